"""The library calls behind the commands: ``lrcheck.compare``, ``lrcheck.trace_schedule`` and
``lrcheck.diff``, and ``lrcheck.save_report``; ``record`` and ``run_commands`` for a user's own
commands; the suite's calls (from ``lrcheck.suite_api``: ``load_suite``, ``run_suite``,
``merge_suites``); and what the command line needs of a process (``hold``: the garbage collector
held off while a command starts, ``runner.startup``; ``exit_now``: leave without finalising the
interpreter, ``procs.marks``).
Every option is checked here or in ``spec``, so that a library call, a suite's ``[[pair]]`` and
the command refuse the same input with the same message. Importing this module does not import
torch; training does."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from lrcheck.comparison import (
    check_processes,
    check_setup,
    compare_pair,
    run_comparison,
    under_torchrun,
)
from lrcheck.errors import SpecError
from lrcheck.procs.marks import exit_now
from lrcheck.runner.startup import hold
from lrcheck.spec import (
    DEFAULT_TIMEOUT_S,
    TRACE_DEFAULTS,
    PairSpec,
    RunSpec,
    Tolerances,
    pair_from_options,
)
from lrcheck.spec.run_options import RunOptions, unknown_keywords
from lrcheck.suite_api import (
    load_suite,
    merge_suites,
    run_suite,
    shard_part,
    suite_jobs,
    suite_plan,
    suite_shard,
)

if TYPE_CHECKING:
    from lrcheck.record.launch import RecordedRun
    from lrcheck.result import Report as Report
    from lrcheck.runner.pair import Progress as Progress
    from lrcheck.suite.outcome import PairOutcome as PairOutcome
    from lrcheck.suite.outcome import SuiteResult as SuiteResult
    from lrcheck.suite.spec import Suite as Suite
    from lrcheck.trace import RunTrace

__all__ = ["compare", "comparison_pair", "check_processes", "run_comparison", "trace_schedule",
           "diff", "record",
           "run_commands", "save_report", "ready", "load_suite", "run_suite", "merge_suites",
           "suite_jobs", "suite_shard", "shard_part", "suite_plan", "hold", "exit_now",
           "under_torchrun", "Report", "CANDIDATE_KEYWORDS"]

# The candidate's fields ``compare`` and ``trace_schedule`` take as keywords: RunSpec's, less
# ``twin``, which lrcheck sets on a reference of its own and a user never types.
# The tags a user maps to quantities: ["lr=LearningRate"] or {"lr": "LearningRate"}.
LogTags = Sequence[str] | Mapping[str, str] | None
CANDIDATE_KEYWORDS = tuple(f.name for f in fields(RunSpec) if f.name != "twin")


def compare(pair: PairSpec | None = None, *, ref_bs: int | None = None, ref_world: int = 1,
            tolerances: Tolerances | None = None, ref_framework: str | None = None,
            fast: bool = False, progress: Progress | None = None,
            timeout: float | None = DEFAULT_TIMEOUT_S,
            cache: dict[RunSpec, RunTrace] | None = None, **candidate: object) -> Report | None:
    """Train the reference and the candidate and check that they train alike.

    Either pass a ``PairSpec``, or the candidate's ``RunSpec`` fields as keywords
    (``compare(accum=2, bs=16)``, ``compare(world=2, bs=8)``); the reference then has
    ``bs = ref_bs`` (default: the candidate's effective batch over ``ref_world``), accum 1 and
    policy ``per-update``, trained through ``ref_framework`` (default: the candidate's
    ``framework``). Every default is ``lrcheck compare``'s (``RunSpec``'s fields; bs 16 ×
    accum 2 against bs 32). A side with ``world > 1`` is launched through torchrun; ``timeout``
    (300 s, None for no limit) is how long such a run may go without finishing an update.
    ``fast``: no noise floor where the candidate cannot run in lockstep (``--fast``).

    Inside torchrun with several processes (a script or ``lrcheck compare`` that torchrun
    started), every rank trains the candidate, rank 0 the reference, and ranks other than 0 get
    None instead of a report. ``cache`` (reference ``RunSpec`` → trace) lets several pairs share
    one trained reference. Ctrl-C raises ``Interrupted`` carrying what was recorded.

    A keyword that is neither a ``RunSpec`` field nor one of these, or a ``pair`` given with
    candidate fields beside it (which it would override), is a ``SpecError`` naming it.
    """
    _check_keywords(compare, pair, candidate)
    if pair is None:
        pair = comparison_pair(candidate, ref_bs=ref_bs, ref_world=ref_world,
                               tolerances=tolerances, ref_framework=ref_framework, fast=fast,
                               timeout=timeout)
    return compare_pair(pair, progress=progress, timeout=timeout, cache=cache)


def comparison_pair(candidate: RunSpec | Mapping[str, Any], *, ref_bs: int | None = None,
                    ref_world: int = 1, ref_framework: str | None = None,
                    tolerances: Tolerances | Mapping[str, float | None] | None = None,
                    fast: bool = False, timeout: float | None = DEFAULT_TIMEOUT_S) -> PairSpec:
    """The pair ``compare`` trains for the candidate (a ``RunSpec``, or its fields) and the
    other arguments (``spec.pair_from_options``), after the processes are checked
    (``comparison.check_processes``): inside torchrun the candidate's ``world`` is torchrun's
    (a field absent or None: it is taken from there). ``lrcheck compare`` builds its pair
    here, from a ``RunSpec`` whose world it asked ``check_processes`` for."""
    if isinstance(candidate, RunSpec):
        check_processes(ref_world, candidate.world, timeout)
    else:
        world = check_processes(ref_world, candidate.get("world"), timeout)
        candidate = {**candidate, "world": world}
    return pair_from_options(candidate, ref_bs=ref_bs, ref_world=ref_world,
                             ref_framework=ref_framework, tolerances=tolerances, fast=fast)


def ready(pair: PairSpec) -> None:
    """What can fail before training, checked now: the scheduler factory imports, the device
    exists (``comparison.check_setup``)."""
    check_setup([pair.candidate])


def trace_schedule(pair: PairSpec | None = None, *, ref_bs: int | None = None, ref_world: int = 1,
                   tolerances: Tolerances | None = None, progress: Progress | None = None,
                   **candidate: object) -> Report:
    """``lrcheck trace``: step both schedules without a model over ``samples`` training samples
    per epoch (world size is arithmetic) and run the checks that apply, ``updates`` and ``lr``.
    Arguments as for ``compare``, with ``lrcheck trace``'s defaults (``TRACE_DEFAULTS``: bs 8,
    accum 1, 1 epoch); ``samples`` is required, as ``--samples`` is. Ctrl-C raises
    ``Interrupted`` carrying what was simulated. A keyword it does not take is a ``SpecError``
    naming it, as for ``compare``."""
    from lrcheck.checks import schedule_checks
    from lrcheck.result import Kind, Report
    from lrcheck.runner.simulate import simulate_pair

    _check_keywords(trace_schedule, pair, candidate)
    if pair is None and "samples" not in candidate:
        raise SpecError("trace_schedule needs samples=N, the training samples per epoch of the "
                        "run to check (lrcheck trace --samples)")
    if pair is None:
        pair = pair_from_options({**TRACE_DEFAULTS, **candidate}, ref_bs=ref_bs,
                                 ref_world=ref_world, tolerances=tolerances)
    traces = simulate_pair(pair, progress)
    checks = schedule_checks(traces.reference, traces.candidate, pair.tolerances)
    return Report(pair, traces.reference, traces.candidate, checks, traces.environment,
                  kind=Kind.TRACE)


def diff(reference: str | Path, candidate: str | Path, *,
         tolerances: Tolerances | None = None, tags: LogTags = None,
         log_steps: str | None = None, **unknown: object) -> Report:
    """``lrcheck diff``: read two runs — each a file written by ``lrcheck.Recorder`` or a folder
    ``lrcheck record`` wrote, or two runs' own logs (``logs.pairs``, docs/logs.md) — align
    their updates by ``samples_seen`` (by update index where a folder does not know its
    samples per update) and run the checks that apply (``updates``,
    ``lr``, ``loss``, and ``params`` where both carry parameter fingerprints; a recorded folder
    adds ``scaler-skips``, ``grad-norm`` and its replicas' agreement). Trains nothing. A
    missing or malformed file is a ``SpecError`` naming it (and the line). Default tolerances
    are float32's (a file does not say its dtype). Two logs: ``tags`` says which tag holds a
    quantity (``["lr=LearningRate"]`` or ``{"lr": "LearningRate"}``), ``log_steps`` what a
    step counts (``"updates-from-1"``, docs/logs.md). A keyword other than these is a
    ``SpecError`` naming it."""
    if unknown:
        raise unknown_keywords("diff", list(unknown), ("tolerances", "tags", "log_steps"),
                       "it takes the two Recorder files or logs, tolerances, and how to read "
                       "logs")
    from lrcheck.command_pair import diff_runs
    from lrcheck.logs.read import reading

    return diff_runs(reference, candidate, tolerances=tolerances,
                     stated=reading(tags, log_steps))


def record(command: Sequence[str], out: str | Path, *, samples: int | None = None,
           fingerprint_every: int | None = None, echo: TextIO | None = None,
           capture: bool = False, deterministic: bool = False,
           logs: str | Path | None = None, tags: LogTags = None,
           log_steps: str | None = None) -> RecordedRun:
    """``lrcheck record``: run ``command`` (a list of arguments) with lrcheck's recording in
    every Python process it starts, into the folder ``out`` (``record.launch.record_command``).
    ``samples``: samples per update, where known (else updates align by index);
    ``fingerprint_every``: a parameter fingerprint and gradient norm every K updates (0: none;
    default ``DEFAULT_EVERY``). A command that cannot run, a Python flag that keeps the
    recording out and an unwritable ``out`` are ``SpecError``s; so is a command that ended well
    but made no optimizer update (saying what it saw). ``deterministic``: with
    ``--deterministic``'s settings (docs/checks.md, "Deterministic runs"). ``logs``: the
    command's own log (a file or a folder; default: where its Trainer logged), held against
    the record: the run's ``logs`` findings, written into the folder's logs.json
    (docs/logs.md); ``tags`` and ``log_steps``: how to read it, as ``diff``'s."""
    from lrcheck.command_pair import record_run
    from lrcheck.logs.read import reading

    return record_run(command, out, samples=samples, fingerprint_every=fingerprint_every,
                      echo=echo, capture=capture, deterministic=deterministic, logs=logs,
                      stated=reading(tags, log_steps))


def run_commands(reference: str, candidate: str, out: str | Path,
                 options: RunOptions | None = None, *, echo: TextIO | None = None,
                 **keywords: object) -> Report:
    """``lrcheck run``: record the two command lines (each split as a shell would, not run
    through one) into ``out``/reference and ``out``/candidate, side by side with the
    candidate in lockstep, then ``diff`` them (``command_pair.run_commands``). The options are
    ``RunOptions``' fields, given as ``options`` or as keywords over it (``samples=32,
    free=True``; one that is no field is a ``SpecError`` naming it):

    - ``samples``: samples per update, where known; ``fingerprint_every``: as ``record``'s;
      ``tolerances``: default float32's.
    - ``free``: one after the other, each free-running; ``strict``: effects that could be
      judged only up to some update (a twin that decorrelated) fail there; ``timeout``: a
      command that makes no update for that many seconds in lockstep (0 or None: no limit) is
      a ``RunError`` with its exit code and last lines, as a command that fails is.
    - ``deterministic``: both with ``--deterministic``'s settings.
    - ``ref_logs`` and ``logs``: each run's own log (a file or a folder; default: where its
      Trainer logged), held against its record in the report's ``logs`` (docs/logs.md), which
      never changes the verdict; ``tags`` and ``log_steps``: how to read them, as ``diff``'s.
    - ``interrupt_at`` and ``resume``: the candidate interrupted once it made ``interrupt_at``
      updates (``interrupt_signal``: ``TERM``, then ``KILL`` after ``grace`` seconds, or
      ``KILL``), then resumed by the command line ``resume``, and the two processes held
      against the reference as one run (docs/resume.md).

    ``echo``: where the commands' output goes (None: kept). Ctrl-C keeps what was recorded."""
    from lrcheck.command_pair import run_commands as run

    return run(reference, candidate, out,
               RunOptions.of(options, caller="run_commands", **keywords), echo=echo)


def save_report(report: Report, out: str | Path) -> Path:
    """Write ``report``'s result.json, report.md and plots into the folder ``out`` (made when
    missing); returns the folder. A folder that cannot be written is a ``SpecError``."""
    from lrcheck.reports.files import write_report

    return write_report(report, Path(out))


def _check_keywords(function: Callable[..., Any], pair: PairSpec | None,
                    candidate: dict[str, object]) -> None:
    """A ``SpecError`` for a keyword of ``function``'s ``**candidate`` that is no candidate
    field (naming it, the nearest accepted one, and all that are accepted), and for candidate
    fields beside a ``pair``: rather than Python's TypeError, or keywords silently unused."""
    own = [p.name for p in inspect.signature(function).parameters.values()
           if p.kind is inspect.Parameter.KEYWORD_ONLY]
    name = function.__name__
    unknown = [key for key in candidate if key not in CANDIDATE_KEYWORDS]
    if unknown:
        raise unknown_keywords(name, unknown, (*CANDIDATE_KEYWORDS, *own),
                       f"it takes a PairSpec, or the candidate's RunSpec fields: "
                       f"{', '.join(CANDIDATE_KEYWORDS)}; and {', '.join(own)}")
    if pair is not None and not isinstance(pair, PairSpec):
        raise SpecError(f"lrcheck.{name}: pair must be a PairSpec, got {type(pair).__name__}; "
                        "PairSpec.build(candidate) makes one from a RunSpec")
    if pair is not None and candidate:
        raise SpecError(f"lrcheck.{name}: a PairSpec and the candidate's fields "
                        f"({', '.join(f'{k}={v!r}' for k, v in candidate.items())}) together; "
                        "pass one or the other (dataclasses.replace(pair.candidate, ...) and "
                        "PairSpec.build make a pair with other fields)")


# The names these had before they were the functions themselves, kept for callers of them.
starting = hold
leave = exit_now
