"""For users' own test suites: fail a pytest (or any test) when two configurations do not train
alike, with lrcheck's findings in the message. ``assert_equivalent`` for ``lrcheck compare``'s
pairs, ``assert_runs_equivalent`` for two command lines of your own training (``lrcheck run``);
the pytest plugin (``lrcheck.pytest_plugin``) gives the latter a report folder per test.
Importing this module imports neither torch nor numpy."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TextIO

from lrcheck.api import compare
from lrcheck.spec.run_options import Command, RunOptions, command_line

if TYPE_CHECKING:
    from lrcheck.result import Report

__all__ = ["assert_equivalent", "assert_runs_equivalent", "render_text", "failure_message",
           "new_report_folder", "set_reports_root", "Command", "RunOptions"]

# Where assert_runs_equivalent puts a report when given no ``out``: a new folder under this one
# (the pytest plugin's --lrcheck-reports, while a session that has it runs), else under the
# system's temporary folder.
_reports_root: Path | None = None
P = ParamSpec("P")


def render_text(report: Report, width: int = 120) -> str:
    """The tables and verdict the CLI prints, as plain text."""
    import io

    from rich.console import Console

    from lrcheck.reports.kinds import render

    text = io.StringIO()
    Console(file=text, width=width, color_system=None, highlight=False).print(render(report))
    return text.getvalue()


def _asserting(compare: Callable[P, Report | None]) -> Callable[P, Report | None]:
    """``compare`` (``lrcheck.compare``), with its own signature, raising ``AssertionError``
    with the table where the verdict is not pass."""
    @functools.wraps(compare)
    def assert_equivalent(*args: P.args, **kwargs: P.kwargs) -> Report | None:
        report = compare(*args, **kwargs)
        if report is not None and not report.ok:
            raise AssertionError(f"{report.pair.name} does not train like its reference:\n"
                                 f"{render_text(report)}")
        return report

    assert_equivalent.__name__ = assert_equivalent.__qualname__ = "assert_equivalent"
    assert_equivalent.__doc__ = (
        "``lrcheck.compare(...)``, whose arguments it takes, raising ``AssertionError`` with the "
        "table when the verdict is not pass; returns the report otherwise (None on the ranks "
        "other than 0 of a script torchrun started, which have no report).")
    return assert_equivalent


assert_equivalent = _asserting(compare)


def assert_runs_equivalent(reference: Command, candidate: Command,
                           options: RunOptions | None = None, *,
                           out: str | Path | None = None, echo: TextIO | None = None,
                           **keywords: object) -> Report:
    """``lrcheck run`` from a test: record the two commands (each a command line, split as a
    shell would, or a list of arguments) and compare them (``lrcheck.api.run_commands``),
    writing the whole report into ``out`` (default: a new folder under the pytest plugin's
    ``--lrcheck-reports``, else under the system's temporary folder). It takes every option
    ``lrcheck run`` takes, as ``options`` or as keywords over it (``RunOptions``' fields:
    ``samples``, ``free``, ``deterministic``, ``logs``, ``interrupt_at`` and ``resume``, a
    command too, …). Returns the report when the verdict is pass; else raises
    ``AssertionError`` naming each failed or warned check with its update and detail, and the
    report folder. A command that fails is a ``RunError``, a bad option a ``SpecError`` (an
    unknown keyword named, as the api does), both before anything runs."""
    from lrcheck.api import run_commands, save_report

    __tracebackhide__ = True  # pytest shows the test's line and this message, not this frame
    chosen = RunOptions.of(options, caller="testing.assert_runs_equivalent", **keywords)
    lines = {"reference": command_line(reference), "candidate": command_line(candidate)}
    folder = Path(out) if out is not None else new_report_folder()
    report = run_commands(lines["reference"], lines["candidate"], folder, chosen, echo=echo)
    save_report(report, folder)
    if not report.ok:
        raise AssertionError(failure_message(report, lines, folder))
    return report


def failure_message(report: Report, lines: dict[str, str], folder: Path) -> str:
    """What ``assert_runs_equivalent`` raises: the verdict, the two command lines, each check
    that failed or warned (its update, its detail), and where the report is."""
    from lrcheck.checks.status import FAIL, WARN

    found = [f"  {c.name}: {c.status.value.upper()}"
             + ("" if c.first_divergence is None else f" at update {c.first_divergence}")
             + f": {c.detail}" for c in report.checks if c.status in (FAIL, WARN)]
    return "\n".join([f"lrcheck run: the candidate does not train like the reference "
                      f"(verdict {report.verdict.value.upper()})",
                      f"  reference: {lines['reference']}",
                      f"  candidate: {lines['candidate']}", *found,
                      f"report: {folder} (report.html, report.md, result.json)"])


def new_report_folder(prefix: str = "run-") -> Path:
    """A new, empty folder for one report: under the plugin's ``--lrcheck-reports`` while a
    pytest session that has it runs, else under the system's temporary folder."""
    if _reports_root is None:
        return Path(tempfile.mkdtemp(prefix=f"lrcheck-{prefix}"))
    _reports_root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=_reports_root))


def set_reports_root(folder: Path | None) -> Path | None:
    """Make ``folder`` where reports go without an ``out``; returns the one it replaces (the
    pytest plugin sets its option at configure and puts the earlier one back at unconfigure,
    so that a pytest run inside a test leaves the outer one as it was)."""
    global _reports_root
    earlier, _reports_root = _reports_root, folder
    return earlier
