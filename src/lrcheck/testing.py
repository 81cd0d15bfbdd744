"""For users' own test suites: fail a pytest (or any test) when two configurations do not train
alike, with lrcheck's findings in the message. ``assert_equivalent`` for ``lrcheck compare``'s
pairs, ``assert_runs_equivalent`` for two command lines of your own training (``lrcheck run``);
the pytest plugin (``lrcheck.pytest_plugin``) gives the latter a report folder per test.
Importing this module imports neither torch nor numpy."""

from __future__ import annotations

import inspect
import os
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from lrcheck.spec import RUN_STALL_S, Tolerances

if TYPE_CHECKING:
    from lrcheck.result import Report

Command = str | Sequence[str | os.PathLike[str]]

# Where assert_runs_equivalent puts a report when given no ``out``: a new folder under this one
# (the pytest plugin's --lrcheck-reports, while a session that has it runs), else under the
# system's temporary folder.
_reports_root: Path | None = None


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


def assert_runs_equivalent(reference: Command, candidate: Command, *,
                           out: str | Path | None = None, samples: int | None = None,
                           fingerprint_every: int | None = None, echo: TextIO | None = None,
                           tolerances: Tolerances | None = None, free: bool = False,
                           timeout: float | None = RUN_STALL_S, strict: bool = False,
                           interrupt_at: int | None = None, resume: Command | None = None,
                           interrupt_signal: str = "TERM", grace: float = 30.0,
                           **unknown: object) -> Report:
    """``lrcheck run`` from a test: record the two commands (each a command line, split as a
    shell would, or a list of arguments) and compare them (``lrcheck.api.run_commands``, whose
    keywords these are), writing the whole report into ``out`` (default: a new folder under the
    pytest plugin's ``--lrcheck-reports``, else under the system's temporary folder). Returns
    the report when the verdict is pass; else raises ``AssertionError`` naming each failed or
    warned check with its update and detail, and the report folder. A command that fails is a
    ``RunError``, a bad option a ``SpecError`` (an unknown keyword named, as the api does).
    ``interrupt_at`` and ``resume`` (a command too): the candidate interrupted once it made
    that many updates, then resumed by ``resume`` (docs/resume.md)."""
    from lrcheck.api import run_commands, save_report, unknown_keywords

    __tracebackhide__ = True  # pytest shows the test's line and this message, not this frame
    if unknown:
        own = tuple(p.name for p in inspect.signature(assert_runs_equivalent).parameters.values()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY)
        raise unknown_keywords("testing.assert_runs_equivalent", list(unknown), own,
                               f"it takes the two commands and {', '.join(own)}")
    lines = {"reference": _line(reference), "candidate": _line(candidate)}
    folder = Path(out) if out is not None else new_report_folder()
    report = run_commands(lines["reference"], lines["candidate"], folder, samples=samples,
                          fingerprint_every=fingerprint_every, echo=echo, tolerances=tolerances,
                          free=free, timeout=timeout, strict=strict,
                          interrupt_at=interrupt_at,
                          resume=None if resume is None else _line(resume),
                          interrupt_signal=interrupt_signal, grace=grace)
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


def _line(command: Command) -> str:
    """``command`` as one command line: a string as it is, a list of arguments quoted."""
    if isinstance(command, str):
        return command
    return shlex.join(os.fspath(word) for word in command)
