"""``lrcheck suite``: every pair of a suite file in one process, and a CI report."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.markup import escape

from lrcheck.cli.ending import warning
from lrcheck.cli.options import out_option
from lrcheck.cli.output import DEFAULT_REPORTS, SUITE_LOG_WIDTH, plots, stdout_console
from lrcheck.errors import SpecError

if TYPE_CHECKING:
    from lrcheck.api import PairOutcome, Suite, SuiteResult
    from lrcheck.reports.render import Renderer


def suite_command(
    file: Annotated[Path, typer.Argument(help="The suite: a TOML file with [defaults], [[pair]] and [[grid]] entries.", show_default=False)],
    out: Annotated[Path | None, out_option("Report folder: a folder per pair, suite.json, summary.md, junit.xml, matrix.png. [default: ./lrcheck-reports/suite-<file name>]")] = None,
    baseline: Annotated[Path | None, typer.Option(help="Compare with this baseline: a changed LR trace, or accuracy/macro-F1 lower by more than tol_metrics, is a regression.")] = None,
    save_baseline: Annotated[Path | None, typer.Option(help="Save this run's LR trace digests and metrics as a baseline.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table: only the closing lines.")] = False,
) -> None:
    """Run every pair of a suite file in one process and write a CI report.

    Exit codes: 0 every pair met its expectation (and no regression), 1 one did not, 2 bad input,
    3 a run crashed, 130 interrupted (the pair that was running is saved as "incomplete", the
    pairs after it are "not run", and the suite's report is written).
    """
    from lrcheck.api import load_suite

    suite = load_suite(file)
    raise typer.Exit(_suite(suite, out if out is not None
                            else DEFAULT_REPORTS / f"suite-{file.stem}",
                            baseline, save_baseline, quiet))


def _suite(suite: Suite, out: Path, baseline: Path | None, save_baseline: Path | None,
           quiet: bool) -> int:
    """Run ``suite`` into ``out`` as a live table (a terminal) or a line per pair, write its
    report (and ``save_baseline``), and tell how it went; the exit code."""
    console = stdout_console(SUITE_LOG_WIDTH)
    live = console.is_terminal and not quiet
    with plots(True) as renderer:
        result = _run_suite(suite, out, baseline, save_baseline, renderer, console, live=live,
                            quiet=quiet)
    _step_summary(out)
    _suite_closing(result, out, save_baseline, console, table=not (live or quiet))
    return result.exit_code


def _run_suite(suite: Suite, out: Path, baseline: Path | None, save_baseline: Path | None,
               renderer: Renderer, console: Console, *, live: bool,
               quiet: bool) -> SuiteResult:
    """Every pair of ``suite`` (``api.run_suite``), shown as a live table, or (not ``quiet``) a
    line per pair."""
    from lrcheck.api import run_suite
    from lrcheck.reports.suite_table import SuiteBoard

    board = SuiteBoard(suite)
    started = time.perf_counter()

    def done(index: int, outcome: PairOutcome) -> None:
        board.done(index, outcome)
        if live or quiet:
            return
        where = f"[{index + 1}/{len(suite.entries)}] {outcome.entry.name}:"
        console.print(f"{where} not run (interrupted)" if outcome.not_run else
                      f"{where} {outcome.verdict} (expect {outcome.entry.expect}) → "
                      f"{outcome.status}, {time.perf_counter() - started:.1f} s", markup=False)

    def run() -> SuiteResult:
        return run_suite(suite, out, baseline=baseline, save_baseline=save_baseline,
                         on_progress=board.progress if live else None, on_done=done,
                         renderer=renderer)

    if not live:
        return run()
    from rich.live import Live

    with Live(board, console=console, refresh_per_second=4):
        return run()


def _step_summary(folder: Path) -> None:
    """The suite's summary appended to ``$GITHUB_STEP_SUMMARY`` when that is set: a courtesy,
    whose failure is a warning; the verdict stands."""
    from lrcheck.reports.files import append_text

    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            append_text(Path(summary), (folder / "summary.md").read_text(encoding="utf-8"))
        except SpecError as exc:
            warning(f"$GITHUB_STEP_SUMMARY: {exc}")


def _suite_closing(result: SuiteResult, folder: Path, save_baseline: Path | None,
                   console: Console, *, table: bool) -> None:
    """The final table (unless it was shown live, or ``--quiet``), the verdict lines, and where
    the report and the baseline are."""
    from lrcheck.reports.suite_table import SuiteBoard, verdict_lines

    if table:
        console.print(SuiteBoard.finished(result))
    for line in verdict_lines(result):
        console.print(line)
    notes = [f"report: {folder}"]
    if save_baseline is not None:
        notes.append(f"baseline saved: {save_baseline}" if result.interrupted is None
                     else "baseline not saved: the suite was interrupted")
    Console(stderr=True, highlight=False, soft_wrap=True).print(escape(" · ".join(notes)))
