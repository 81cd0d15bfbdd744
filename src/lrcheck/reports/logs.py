"""The logs section of a report (docs/logs.md, "Logs against the recording"): what each run
logged, held against what its recording measured (``logs.truth``), in the table, report.md and
report.html. It is a section of its own: a logging difference never changes the verdict, and
a training check that failed is said apart, never put down to the logs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text

from lrcheck.reports.html import Html, grid, join, status, tag
from lrcheck.result import Report

if TYPE_CHECKING:
    from lrcheck.logs.truth import LogFinding

STYLE = {"matches": "green", "differs": "yellow", "unknown": "dim"}
# result.json's and the tables' status words as the page's status cells colour them.
AS_CHECK = {"matches": "pass", "differs": "warn", "unknown": "skip"}


def apart(report: Report) -> str | None:
    """The sentence that keeps the logs and the training apart (None: no findings)."""
    if not report.logs:
        return None
    failed = [c.name for c in report.checks if c.status == "fail"]
    differs = any(f.status == "differs" for f in report.logs)
    if failed:
        return (f"The training checks failed on their own ({', '.join(failed)}): "
                + ("the logs differ from the recording besides, which is not the cause."
                   if differs else "the logs say what was recorded."))
    if differs:
        return ("The training checks pass: what differs here is what was logged, not what "
                "was trained.")
    return "Each log says what its run's recording measured."


def _first(update: int | None) -> str:
    return "—" if update is None else f"update {update}"


def findings_table(found: Sequence[LogFinding]) -> Table:
    """The findings as a table (``lrcheck record --logs`` prints it alone)."""
    table = Table(title="logs against the recording", title_justify="left")
    for column in ("run", "quantity", "log", "from", "says"):
        table.add_column(column, overflow="fold")
    for f in found:
        table.add_row(f.side, f.what, Text(f.status.value, style=STYLE[f.status.value]),
                      _first(f.first_update), f.says)
    return table


def logs_table(report: Report) -> list[Table | Text]:
    """The section as the CLI prints it (empty where no log was read)."""
    if not report.logs:
        return []
    return [findings_table(report.logs), Text(apart(report) or "", style="italic")]


def logs_markdown(report: Report, markdown_cell: Callable[[str], str]) -> list[str]:
    """report.md's section (``markdown_cell``: text as a table cell holds it)."""
    if not report.logs:
        return []
    lines = ["", "## Logs against the recording", "", f"_{apart(report)}_", "",
             "| run | quantity | log | from | says | log read |",
             "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {f.side} | {f.what} | {f.status.value} | {_first(f.first_update)} | "
              f"{markdown_cell(f.says)} | `{markdown_cell(f.path)}` |" for f in report.logs]
    return lines


def logs_html(report: Report) -> Html:
    """report.html's section."""
    if not report.logs:
        return Html("")
    rows = [[f.side, tag("code", f.what),
             (f.status.value, status(AS_CHECK[f.status.value])[1]),
             (_first(f.first_update), "num"), (f.says, "detail"), tag("code", f.path)]
            for f in report.logs]
    return join([tag("h2", "Logs against the recording", id="logs"), tag("p", apart(report)),
                 grid(["run", "quantity", "log", "from", "says", "log read"], rows)])
