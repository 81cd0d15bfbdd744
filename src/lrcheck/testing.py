"""For users' own test suites: fail a pytest (or any test) when two configurations do not train
alike, with lrcheck's table in the message."""

from __future__ import annotations

from typing import Any

from lrcheck.result import Report


def render_text(report: Report, width: int = 120) -> str:
    """The tables and verdict the CLI prints, as plain text."""
    import io

    from rich.console import Console

    from lrcheck.reports.table import render

    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    console.print(render(report))
    return console.file.getvalue()  # type: ignore[attr-defined]


def assert_equivalent(*args: Any, **kwargs: Any) -> Report:
    """``lrcheck.compare(*args, **kwargs)``, raising ``AssertionError`` with the table when the
    verdict is not pass; returns the report otherwise."""
    import lrcheck

    report = lrcheck.compare(*args, **kwargs)
    if not report.ok:
        raise AssertionError(f"{report.pair.name} does not train like its reference:\n"
                             f"{render_text(report)}")
    return report
