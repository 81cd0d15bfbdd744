"""For users' own test suites: fail a pytest (or any test) when two configurations do not train
alike, with lrcheck's table in the message."""

from __future__ import annotations

from typing import Any

from lrcheck.result import Report


def render_text(report: Report, width: int = 120) -> str:
    """The tables and verdict the CLI prints, as plain text."""
    import io

    from rich.console import Console

    from lrcheck.reports.kinds import render

    text = io.StringIO()
    Console(file=text, width=width, color_system=None, highlight=False).print(render(report))
    return text.getvalue()


def assert_equivalent(*args: Any, **kwargs: Any) -> Report | None:
    """``lrcheck.compare(*args, **kwargs)``, raising ``AssertionError`` with the table when the
    verdict is not pass; returns the report otherwise (None on the ranks other than 0 of a
    script torchrun started, which have no report)."""
    import lrcheck

    report = lrcheck.compare(*args, **kwargs)
    if report is not None and not report.ok:
        raise AssertionError(f"{report.pair.name} does not train like its reference:\n"
                             f"{render_text(report)}")
    return report
