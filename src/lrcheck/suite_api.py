"""The suite's library calls behind ``lrcheck suite`` and ``lrcheck suite merge`` (``lrcheck.api``
gives them to the command line): a suite file loaded and checked, run in this process or in
worker processes (``--jobs``), one shard of it (``--shard k/n``), its plan (``--list``), and the
shards' folders merged into one report. Importing this module does not import torch."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from lrcheck.errors import SpecError

if TYPE_CHECKING:
    from lrcheck.reports.plots import Plot
    from lrcheck.reports.render import Renderer
    from lrcheck.suite.baseline import BaselineRecord
    from lrcheck.suite.outcome import PairOutcome, SuiteResult
    from lrcheck.suite.spec import Suite


def load_suite(path: str | Path, *, deterministic: bool = False) -> Suite:
    """The suite file at ``path``, every pair checked as ``lrcheck compare`` checks its flags;
    a ``SpecError`` naming the file and the entry otherwise. ``deterministic``: every pair with
    ``--deterministic`` on, whatever the file says (``lrcheck suite --deterministic``)."""
    from lrcheck.suite.spec import deterministic_suite
    from lrcheck.suite.spec import load_suite as load

    suite = load(path)
    return deterministic_suite(suite) if deterministic else suite


def run_suite(suite: Suite, out: Path, *, baseline: Path | None = None,
              save_baseline: Path | None = None,
              on_progress: Callable[[int, str, int, int], None] | None = None,
              on_done: Callable[[int, PairOutcome], None] | None = None,
              renderer: Renderer | None = None, jobs: int = 1,
              shard: tuple[int, int] | None = None, plots: str = "failed") -> SuiteResult:
    """Every pair of ``suite`` (``suite.run.run_pairs``), its report written into the folder
    ``out`` (made when missing), compared with the ``baseline`` file when given, and its records
    saved as the baseline ``save_baseline`` (not of a suite cut short by Ctrl-C, which would
    miss pairs: the one there is kept). What can fail for the whole suite is checked before
    anything trains. ``jobs`` > 1: the pairs run in that many worker processes
    (``suite.parallel``), with the results of a sequential run (a script calls it so under
    ``if __name__ == "__main__":``, as Python's multiprocessing requires). ``shard`` ``(k,
    n)``: only the pairs of shard k of n (``suite.shard``), the report recording which shard it
    is; a shard's ``save_baseline`` is refused, as it would miss the other shards' pairs: save
    it from ``merge_suites``. ``on_progress`` and ``on_done`` take the pair's index in the
    shard. ``plots`` (``all``, ``failed``, ``none``): the pairs whose PNGs are drawn (every
    report.html is complete without them: ``reports.kinds.drawn_plots``); matrix.png always."""
    from lrcheck.reports.files import prepare_file, prepare_out, write_suite
    from lrcheck.reports.kinds import PLOT_CHOICES
    from lrcheck.reports.render import Renderer
    from lrcheck.suite.baseline import load_baseline
    from lrcheck.suite.run import prepare
    from lrcheck.suite.shard import shard_of

    if plots not in PLOT_CHOICES:
        raise SpecError(f"--plots {plots!r}: choose one of {', '.join(PLOT_CHOICES)}")
    if shard is not None and save_baseline is not None:
        raise SpecError("--save-baseline saves a whole suite's records; a shard has some of "
                        "them: save it with 'lrcheck suite merge OUT SHARD_DIR... "
                        "--save-baseline FILE'")
    whole, info = suite, None
    if shard is not None:
        suite, info = shard_of(suite, *shard)
    records = load_baseline(baseline) if baseline is not None else None
    folder = prepare_out(out)
    if save_baseline is not None:
        prepare_file(save_baseline, "--save-baseline")
    prepare(suite, folder)
    renderer = renderer or Renderer(background=False)
    result = _run_here_or_in_workers(suite, folder, records,
                                     None if baseline is None else str(baseline),
                                     on_progress, on_done, renderer, jobs, plots)
    result.shard = info
    if info is not None:  # the other shards' pairs are not missing from the baseline
        names = {e.name for e in whole.entries}
        result.baseline_missing = [n for n in result.baseline_missing if n not in names]
    write_suite(result, folder, renderer)
    renderer.finish()
    _save_baseline(result, save_baseline)
    return result


def _run_here_or_in_workers(suite: Suite, folder: Path,
                            records: dict[str, BaselineRecord] | None, baseline_path: str | None,
                            on_progress: Callable[[int, str, int, int], None] | None,
                            on_done: Callable[[int, PairOutcome], None] | None,
                            renderer: Renderer, jobs: int, plots: str) -> SuiteResult:
    """``suite.run.run_pairs``, each pair's plots drawn by ``renderer``; or with ``jobs`` > 1
    ``suite.parallel.run_parallel``, whose workers save each pair's report themselves (through
    ``DeferredFiles``, which can travel to them and keeps the plots for ``renderer`` here)."""
    import time

    from lrcheck.reports.files import DeferredFiles, ReportFiles
    from lrcheck.suite.parallel import run_parallel
    from lrcheck.suite.run import run_pairs, suite_result

    if jobs <= 1 or len(suite.entries) <= 1:
        return run_pairs(suite, folder, baseline=records, baseline_path=baseline_path,
                         on_progress=on_progress, on_done=on_done,
                         files=ReportFiles(renderer, plots))
    started = time.perf_counter()
    outcomes, stopped = run_parallel(
        suite, folder, jobs, files=DeferredFiles(plots=plots),
        draw=lambda plots: renderer.draw(cast("list[Plot]", plots)), baseline=records,
        on_progress=on_progress, on_done=on_done)
    return suite_result(suite, outcomes, started, records, baseline_path, stopped)


def _save_baseline(result: SuiteResult, save_baseline: Path | None) -> None:
    """The baseline ``save_baseline`` of a complete ``result`` (none of one interrupted, or a
    merge with pairs missing)."""
    from lrcheck.reports.files import write_json
    from lrcheck.suite.baseline import baseline_document

    if save_baseline is not None and result.complete:
        write_json(save_baseline, baseline_document(result.outcomes, result.suite.path))


def suite_jobs(text: str | int) -> int:
    """``--jobs``: a whole number >= 1, or ``auto``: the cores this process may use."""
    if text == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise SpecError(f"--jobs {text!r}: expected a whole number >= 1, or auto (the usable "
                        "cores)")
    return jobs


def suite_shard(shard: str | None) -> tuple[int, int] | None:
    """``--shard k/n``, else ``$LRCHECK_SHARD``, else None (the whole suite)."""
    from lrcheck.suite.shard import shard_from

    return shard_from(shard)


def shard_part(suite: Suite, shard: tuple[int, int] | None) -> Suite:
    """The pairs of ``shard`` of ``suite`` (all of them for None), as ``run_suite`` runs them."""
    from lrcheck.suite.shard import shard_of

    return suite if shard is None else shard_of(suite, *shard)[0]


def suite_plan(suite: Suite, shard: tuple[int, int] | None) -> list[str]:
    """``lrcheck suite FILE --list``: the reference groups of each shard, with their costs."""
    from lrcheck.suite.shard import plan_lines

    return plan_lines(suite, shard)


def merge_suites(out: Path, shards: list[Path], *, baseline: Path | None = None,
                 save_baseline: Path | None = None,
                 renderer: Renderer | None = None) -> SuiteResult:
    """The shards' folders (``run_suite(..., shard=(k, n))``) merged into one suite report in
    ``out``: each pair's folder copied in, and suite.json, summary.md, junit.xml, index.html
    and matrix.png of the whole suite written (``suite.merge``). Shards of different suites,
    or a pair in two shards, are a ``SpecError``; a lost shard's pairs are errors. ``baseline``
    is compared with the merged result; ``save_baseline`` is saved only from a complete
    merge."""
    from lrcheck.reports.files import copy_folder, prepare_file, prepare_out, write_suite
    from lrcheck.reports.render import Renderer
    from lrcheck.suite.baseline import load_baseline
    from lrcheck.suite.merge import check_shards, merge_shards, read_shard

    runs = [read_shard(folder) for folder in shards]
    check_shards(runs)
    records = load_baseline(baseline) if baseline is not None else None
    folder = prepare_out(out)
    if save_baseline is not None:
        prepare_file(save_baseline, "--save-baseline")
    result = merge_shards(runs, baseline=records,
                          baseline_path=None if baseline is None else str(baseline))
    for run in runs:
        for pair in run.data["pairs"]:
            if pair["folder"] is not None:
                copy_folder(run.folder / pair["folder"], folder / pair["folder"])
    renderer = renderer or Renderer(background=False)
    write_suite(result, folder, renderer)
    renderer.finish()
    _save_baseline(result, save_baseline)
    return result
