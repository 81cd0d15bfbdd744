"""``lrcheck list``: the registries, as ``--task``, ``--scheduler``, ``--policy`` and
``--framework`` take them."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from lrcheck.experiments.schedulers import SCHEDULERS
from lrcheck.experiments.tasks import TASKS
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.plan.policies import POLICIES
from lrcheck.spec import settings_for


def list_command() -> None:
    """List the tasks, schedulers, policies and frameworks."""
    console = Console(highlight=False)
    for title, headers, rows in (
        ("tasks (--task)", ("name", "what", "data"),
         [(t.name, t.description, t.source) for t in TASKS.values()]),
        ("schedulers (--scheduler)", ("name", "what"),
         [(s.name, s.description) for s in SCHEDULERS.values()]),
        ("policies (--policy)", ("name", "what", "who"),
         [(p.name, p.description, p.who) for p in POLICIES.values()]),
        ("frameworks (--framework)", ("name", "what", "settings"),
         [(f.name, f.description, ", ".join(settings_for(f.name))) for f in FRAMEWORKS.values()]),
    ):
        table = Table(*headers, title=title, title_justify="left")
        table.columns[0].style = "bold"
        for row in rows:
            table.add_row(*row)
        console.print(table)
