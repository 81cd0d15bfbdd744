"""``lrcheck list``."""




from tests.cli.helpers import invoke


def test_list_shows_every_registry_entry():
    from lrcheck.experiments.schedulers import SCHEDULERS
    from lrcheck.experiments.tasks import TASKS
    from lrcheck.plan.policies import POLICIES

    out = invoke("list").stdout
    for name in [*TASKS, *SCHEDULERS, *POLICIES]:
        assert name in out


def test_list_has_no_empty_column():
    lines = [line.rstrip() for line in invoke("list").stdout.splitlines()]
    title = lines.index("schedulers (--scheduler)")
    header = lines[title + 2]  # the title, the top border, then the header
    assert header.count("┃") == 3 and "name" in header and "what" in header  # two columns
    for line in lines:
        assert "┃  ┃" not in line and "│  │" not in line
