"""Runs every pair of a suite in this process, one after the other.

torch is imported once; a reference that several pairs share (the same frozen ``RunSpec``) is
trained once. Each pair's report is saved into ``out/<name>`` as soon as it is done, so an
interrupted suite leaves what it finished. A pair that crashes, turns out to be bad input or
whose report cannot be saved is recorded with its reason and the suite goes on; Ctrl-C stops
the suite. Multi-process pairs go through the same ``lrcheck.compare`` as on the command line.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np

from lrcheck.errors import Interrupted, LrcheckError, Recorded, SpecError, stop_words
from lrcheck.result import Report
from lrcheck.runner.startup import release
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.suite.baseline import BaselineRecord, regressions
from lrcheck.suite.outcome import PairOutcome, SuiteResult
from lrcheck.suite.spec import Suite, SuiteEntry
from lrcheck.trace import RunTrace

if TYPE_CHECKING:
    from lrcheck.runner.pair import Progress

# Called with the pair's index, the run's role, its updates done and planned.
OnProgress = Callable[[int, str, int, int], None]
OnDone = Callable[[int, PairOutcome], None]


class PairFiles(Protocol):
    """Where each pair's report is saved as the pair ends (``reports.files.ReportFiles``). The
    suite writes through what it is given, so that it imports nothing of ``reports``, which
    shows the suite's outcome."""

    def report(self, report: Report, out: Path) -> Sequence[str]:
        """Save a finished pair's report into ``out``; the names of the PNGs drawn there."""

    def incomplete(self, result: Recorded, out: Path) -> object:
        """Save what an interrupted pair had recorded into ``out``."""


def prepare(suite: Suite, out: Path) -> None:
    """Check before training what can fail for the whole suite: no pair's report folder in
    ``out`` is an existing file, and what ``lrcheck compare`` checks before training
    (``comparison.check_setup``: every scheduler factory imports, every device exists), told
    at the first entry that names a factory that does not import."""
    from lrcheck.comparison import check_setup

    for entry in suite.entries:
        if (out / entry.name).exists() and not (out / entry.name).is_dir():
            raise SpecError(f"{suite.path}: {entry.origin}: the report folder of pair "
                            f"{entry.name!r}, {str(out / entry.name)!r}, is an existing file; "
                            "remove it, or give another --out or 'name'")

    def located(index: int, exc: SpecError) -> SpecError:
        entry = suite.entries[index]
        return SpecError(f"{suite.path}: {entry.origin} ({entry.name!r}), key 'scheduler': "
                         f"{str(exc).removeprefix('--scheduler ')}")

    check_setup([e.pair.candidate for e in suite.entries if isinstance(e.pair, PairSpec)],
                located)


def run_pairs(suite: Suite, out: Path, *, files: PairFiles,
              baseline: dict[str, BaselineRecord] | None = None, baseline_path: str | None = None,
              on_progress: OnProgress | None = None, on_done: OnDone | None = None,
              references: dict[RunSpec, RunTrace] | None = None) -> SuiteResult:
    """Every pair of ``suite``, compared with ``baseline`` (records by pair name) when given.
    ``on_progress(index, role, done, total)`` follows the updates of the pair being trained;
    ``on_done(index, outcome)`` is called as each pair ends. Each pair's report is saved
    through ``files`` into ``out/<name>`` (``reports.files.ReportFiles``, whose renderer may draw
    its plots in a helper while the next pair trains).

    Ctrl-C stops the suite rather than the pair: the pair that was running is ``incomplete``
    (what it recorded is saved in its folder, as ``lrcheck compare`` does), the pairs after it
    are ``not_run`` (``on_done`` is called for them too), and the result, whose ``interrupted``
    says where it stopped, is returned for the suite's report to be written.

    ``references``: the runs already trained (references and noise-floor twins, by their
    ``RunSpec``), which the pairs take instead of training them again; what the pairs train is
    added to it (a ``suite.parallel`` worker's sends each new one to the suite at once)."""
    started = time.perf_counter()
    references = {} if references is None else references
    outcomes: list[PairOutcome] = []
    stopped: str | None = None
    try:
        for index, entry in enumerate(suite.entries):
            progress = ((lambda role, done, total, i=index: on_progress(i, role, done, total))
                        if on_progress else None)
            outcomes.append(_run_pair(entry, out, references, progress, files, baseline))
            if outcomes[-1].interrupted is not None:
                stopped = _where(suite, index, outcomes[-1].stopped_by)
            if on_done is not None:
                on_done(index, outcomes[-1])
            if stopped is not None:
                break
    except KeyboardInterrupt as stop:  # between two pairs, or while one was being shown
        stopped = stopped or _where(suite, len(outcomes) - 1, stop_words(stop), after=True)
    for index in range(len(outcomes), len(suite.entries)):
        outcomes.append(PairOutcome(suite.entries[index], not_run=True))
        if on_done is not None:
            on_done(index, outcomes[-1])

    return suite_result(suite, outcomes, started, baseline, baseline_path, stopped)


def suite_result(suite: Suite, outcomes: list[PairOutcome], started: float,
                 baseline: dict[str, BaselineRecord] | None, baseline_path: str | None,
                 stopped: str | None) -> SuiteResult:
    """The suite's result for its pairs' ``outcomes`` (one per entry, in order), begun at
    ``started`` (``time.perf_counter``). Its environment is the first trained pair's, without
    what is that pair's own (a ``--jobs`` suite's process imports no torch to tell it)."""
    names = {e.name for e in suite.entries}
    trained = next((o.report.environment for o in outcomes
                    if o.report and isinstance(o.entry.pair, PairSpec)), None)
    if trained is None:
        from lrcheck.runner.local import environment

        device = next((o.report.environment.device for o in outcomes if o.report), "cpu")
        trained = environment(device, 1)
    return SuiteResult(
        suite, outcomes, seconds=time.perf_counter() - started, baseline_path=baseline_path,
        baseline_missing=sorted(set(baseline or {}) - names),
        environment=replace(trained, frameworks={}, noise_floor=None, launch=None,
                            world_size=max((e.pair.candidate.world for e in suite.entries
                                            if isinstance(e.pair, PairSpec)), default=1)),
        interrupted=stopped,
    )


def _run_pair(entry: SuiteEntry, out: Path, references: dict[RunSpec, RunTrace],
              progress: Progress | None, files: PairFiles,
              baseline: dict[str, BaselineRecord] | None) -> PairOutcome:
    """One pair, compared and saved into ``out/<name>``. A pair that crashes, is bad input or
    whose report cannot be saved gets its error; one stopped by Ctrl-C is ``interrupted``."""
    from lrcheck.comparison import compare_pair

    began = time.perf_counter()
    outcome = PairOutcome(entry, shared_reference=isinstance(entry.pair, PairSpec)
                          and entry.pair.reference in references)
    try:
        if isinstance(entry.pair, PairSpec):
            report = compare_pair(entry.pair, progress=progress, cache=references)
        else:
            report = _run_commands(entry, out / entry.name)
        outcome.report = report
        assert report is not None  # every comparison has one outside torchrun
        try:
            outcome.pngs = tuple(files.report(report, out / entry.name))
        except LrcheckError as exc:
            outcome.report = None  # a report that is not there is not a pass
            raise SpecError(f"its report could not be saved: {exc}") from None
    except Interrupted as exc:
        outcome.interrupted, outcome.stopped_by = str(exc), exc.how
        try:
            files.incomplete(exc.result, out / entry.name)
            outcome.partial_saved = True
        except LrcheckError as error:
            outcome.interrupted += f"; what it recorded could not be saved: {error}"
    except KeyboardInterrupt as stop:  # after both runs: while checking or saving
        outcome.report = None
        outcome.stopped_by = stop_words(stop)
        outcome.interrupted = (
            f"{outcome.stopped_by} after both runs, before its report was saved"
            if isinstance(entry.pair, PairSpec) else
            f"{outcome.stopped_by} while its commands ran; what they recorded is in its folder")
    except LrcheckError as exc:
        outcome.error, outcome.error_code = str(exc), exc.exit_code
    if outcome.report is not None:
        # The candidate's parameters served the checks; only a shared reference is needed
        # again, so the suite's memory does not grow with every pair. A new empty array: a
        # slice such as params[:0] would be a view that keeps the whole snapshot alive.
        params = outcome.report.candidate.params
        outcome.report.candidate.params = np.empty((0, *params.shape[1:]), params.dtype)
        if baseline is not None:
            rec = baseline.get(entry.name)
            outcome.baseline = "new" if rec is None else "compared"
            outcome.regressions = regressions(outcome.report, rec) if rec else []
    outcome.seconds = time.perf_counter() - began
    release()  # after the first pair at the latest, even one that failed before training
    # A pair leaves a few reference cycles (closures of its hooks, its Lockstep) that hold its
    # candidate's recording, 8.5 MB on digits: freed now rather than at some later full pass,
    # they do not pile up (suite-12's peak RSS 606 -> 554 MiB). About 10 ms: what starting
    # left is frozen out of the pass (``release``).
    gc.collect()
    return outcome


def _run_commands(entry: SuiteEntry, folder: Path) -> Report:
    """A pair of the user's own commands, recorded into ``folder``/reference and /candidate
    and diffed, as ``lrcheck run`` does; Ctrl-C keeps what they recorded there."""
    from lrcheck.command_pair import run_commands

    pair = entry.pair
    assert not isinstance(pair, PairSpec)
    return run_commands(pair.reference, pair.candidate, folder, pair.options)


def _where(suite: Suite, index: int, how: str, *, after: bool = False) -> str:
    """``interrupted (Ctrl-C) during pair 2 of 3 ('b')``, or ``after pair 2 …``; ``how``: the
    stop's words (``errors.stop_words``)."""
    if index < 0:
        return f"{how} before the first of {len(suite.entries)} pairs"
    return (f"{how} {'after' if after else 'during'} pair {index + 1} of "
            f"{len(suite.entries)} ({suite.entries[index].name!r})")
