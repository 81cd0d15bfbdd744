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
    jobs: Annotated[str, typer.Option(help="Run the pairs in this many worker processes (auto: the usable cores). A shared reference is trained once and handed to the workers of its other pairs; a multi-process pair counts for its processes. The results are those of a sequential run.")] = "1",
    shard: Annotated[str | None, typer.Option(help="Run only shard k of n (1-based, such as 2/3; also from $LRCHECK_SHARD): reference groups kept whole, split by their cost, the same on every machine. Merge the shards' folders with 'lrcheck suite merge'.", show_default=False)] = None,
    plots_of: Annotated[str, typer.Option("--plots", help="Which pairs' PNGs to draw: all, failed (a pair whose verdict is not a pass) or none. Every report.html is complete without them: its LR and loss charts are drawn from the data in the page, its metrics a table; matrix.png is always drawn.")] = "failed",
    list_plan: Annotated[bool, typer.Option("--list", help="Print the reference groups (and with --shard, every shard's) with their costs, and exit without training.")] = False,
    deterministic: Annotated[bool, typer.Option("--deterministic", help="Every pair with --deterministic on, as the key deterministic = true in each (see lrcheck compare --deterministic).")] = False,
) -> None:
    """Run every pair of a suite file and write a CI report.

    Exit codes: 0 every pair met its expectation (and no regression), 1 one did not, 2 bad input,
    3 a run crashed, 130 interrupted (143 on SIGTERM: the pairs that were running are saved as
    "incomplete", the others are "not run", and the suite's report is written).
    """
    from lrcheck.api import load_suite, suite_jobs, suite_shard

    suite = load_suite(file, deterministic=deterministic)
    workers, part = suite_jobs(jobs), suite_shard(shard)
    if list_plan:
        _list(suite, part)
        raise typer.Exit(0)
    raise typer.Exit(_suite(suite, out if out is not None
                            else DEFAULT_REPORTS / f"suite-{file.stem}",
                            baseline, save_baseline, quiet, workers, part, plots_of))


def merge_command(
    out: Annotated[Path, typer.Argument(help="The merged report's folder.", show_default=False)],
    shards: Annotated[list[Path], typer.Argument(help="The shards' --out folders, from 'lrcheck suite FILE --shard k/n'.", show_default=False)],
    baseline: Annotated[Path | None, typer.Option(help="Compare the merged result with this baseline.")] = None,
    save_baseline: Annotated[Path | None, typer.Option(help="Save the merged result as a baseline (only when no pair is missing).")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No table: only the closing lines.")] = False,
) -> None:
    """Merge the shards of a suite into one report: 'lrcheck suite merge OUT SHARD_DIR...'.

    Shards of different suites and a pair present in two shards are bad input (exit 2); a pair
    whose shard is missing is an error (exit 3), never a pass. Writes suite.json, junit.xml,
    summary.md (and $GITHUB_STEP_SUMMARY), index.html and matrix.png of the whole suite.
    """
    from lrcheck.api import merge_suites

    with plots(True) as renderer:
        result = merge_suites(out, shards, baseline=baseline, save_baseline=save_baseline,
                              renderer=renderer)
    _step_summary(out)
    _suite_closing(result, out, save_baseline, stdout_console(SUITE_LOG_WIDTH),
                   table=not quiet)
    raise typer.Exit(result.exit_code)


def _list(suite: Suite, shard: tuple[int, int] | None) -> None:
    """The plan, a line per shard and an indented line per reference group."""
    from lrcheck.api import suite_plan

    console = stdout_console(SUITE_LOG_WIDTH)
    for line in suite_plan(suite, shard):
        console.print(line, markup=False, highlight=False)


def _suite(suite: Suite, out: Path, baseline: Path | None, save_baseline: Path | None,
           quiet: bool, jobs: int, shard: tuple[int, int] | None, plots_of: str) -> int:
    """Run ``suite`` (its ``shard``) into ``out`` as a live table (a terminal) or a line per
    pair, write its report (and ``save_baseline``), and tell how it went; the exit code."""
    from lrcheck.api import shard_part

    console = stdout_console(SUITE_LOG_WIDTH)
    live = console.is_terminal and not quiet
    with plots(True) as renderer:
        result = _run_shown(shard_part(suite, shard), out, baseline, save_baseline, renderer,
                            console, live=live, quiet=quiet, jobs=jobs, shard=shard,
                            whole=suite, plots_of=plots_of)
    _step_summary(out)
    _suite_closing(result, out, save_baseline, console, table=not (live or quiet))
    return result.exit_code


def _run_shown(suite: Suite, out: Path, baseline: Path | None, save_baseline: Path | None,
               renderer: Renderer, console: Console, *, live: bool, quiet: bool, jobs: int,
               shard: tuple[int, int] | None, whole: Suite, plots_of: str) -> SuiteResult:
    """Every pair of ``suite`` (the ``shard`` of ``whole``, ``api.run_suite``), shown as a live
    table, or (not ``quiet``) a line per pair."""
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
        return run_suite(whole, out, baseline=baseline, save_baseline=save_baseline,
                         on_progress=board.progress if live else None, on_done=done,
                         renderer=renderer, jobs=jobs, shard=shard, plots=plots_of)

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
        notes.append(f"baseline saved: {save_baseline}" if result.complete
                     else "baseline not saved: the suite was interrupted"
                     if result.interrupted is not None
                     else "baseline not saved: pairs are missing from the merge")
    Console(stderr=True, highlight=False, soft_wrap=True).print(escape(" · ".join(notes)))
