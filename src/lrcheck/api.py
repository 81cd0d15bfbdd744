"""The library calls behind the commands: ``lrcheck.compare``, ``lrcheck.trace_schedule`` and
``lrcheck.diff``, and ``lrcheck.save_report``; ``record`` and ``run_commands`` for a user's own
commands; the suite's calls (from ``lrcheck.suite_api``: ``load_suite``, ``run_suite``,
``merge_suites``); and what the command line needs of a process (``hold``: the garbage collector
held off while a command starts, ``runner.startup``; ``exit_now``: leave without finalising the
interpreter, ``procs.marks``).
Every option is checked here or in ``spec``, so that a library call, a suite's ``[[pair]]`` and
the command refuse the same input with the same message: the functions defined here are where a
Python caller's keywords become the typed options the library takes (``CompareOptions``,
``RunOptions``, how logs are read), the others are the library's own, exported as they are.
Importing this module imports neither torch nor numpy (``diff``, ``record``, ``run_commands``
and ``save_report`` import the modules that do when called); training does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

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
    TRACE_DEFAULTS,
    CompareOptions,
    PairSpec,
    RunSpec,
    Tolerances,
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

__all__ = ["compare", "comparison_options", "comparison_pair", "check_processes", "check_setup",
           "run_comparison", "trace_schedule", "diff", "record",
           "run_commands", "save_report", "load_suite", "run_suite", "merge_suites",
           "suite_jobs", "suite_shard", "shard_part", "suite_plan", "hold", "exit_now",
           "under_torchrun", "Report", "CompareOptions"]

# The tags a user maps to quantities: ["lr=LearningRate"] or {"lr": "LearningRate"}.
LogTags = Sequence[str] | Mapping[str, str] | None


def compare(pair: PairSpec | CompareOptions | None = None, *, progress: Progress | None = None,
            cache: dict[RunSpec, RunTrace] | None = None, **keywords: object) -> Report | None:
    """Train the reference and the candidate and check that they train alike.

    Either pass a ``PairSpec`` (and, maybe, ``timeout``), or ``CompareOptions`` and/or its
    fields as keywords (``comparison_options``): the candidate's ``RunSpec`` fields
    (``compare(accum=2, bs=16)``, ``compare(world=2, bs=8)``), and ``ref_bs``, ``ref_world``,
    ``ref_framework``, ``tolerances``, ``fast``, ``timeout``. The reference then has
    ``bs = ref_bs`` (default: the candidate's effective batch over ``ref_world``), accum 1 and
    policy ``per-update``, trained through ``ref_framework`` (default: the candidate's
    ``framework``). Every default is ``lrcheck compare``'s (``RunSpec``'s fields; bs 16 ×
    accum 2 against bs 32). ``tolerances``: whole (``Tolerances``) or overrides of the defaults
    of the candidate's dtype (``ToleranceOverrides``, or a mapping: ``{"lr": 1e-3}``). A side
    with ``world > 1`` is launched through torchrun; ``timeout`` (300 s, None for no limit) is
    how long such a run may go without finishing an update. ``fast``: no noise floor where the
    candidate cannot run in lockstep (``--fast``).

    Inside torchrun with several processes (a script or ``lrcheck compare`` that torchrun
    started), every rank trains the candidate (``world``: torchrun's), rank 0 the reference,
    and ranks other than 0 get None instead of a report. ``cache`` (reference ``RunSpec`` →
    trace) lets several pairs share one trained reference. Ctrl-C raises ``Interrupted``
    carrying what was recorded.

    A keyword that is none of these, or a ``pair`` given with fields beside it (which it would
    override), is a ``SpecError`` naming it.
    """
    if isinstance(pair, PairSpec):
        timeout = _beside_pair("compare", pair, keywords, ("timeout",)).timeout
        return compare_pair(pair, progress=progress, timeout=timeout, cache=cache)
    options = comparison_options(_options("compare", pair), caller="compare", **keywords)
    return compare_pair(comparison_pair(options), progress=progress, timeout=options.timeout,
                        cache=cache)


def comparison_options(options: CompareOptions | None = None, /, *, caller: str = "compare",
                       **keywords: object) -> CompareOptions:
    """``CompareOptions.of(options, **keywords)`` (``lrcheck.compare``'s keywords), its
    processes checked (``comparison.check_processes``): inside torchrun the candidate's
    ``world``, where neither ``options`` nor a keyword gives one, is torchrun's."""
    chosen = CompareOptions.of(options, caller=caller, **keywords)
    given = None if options is None and keywords.get("world") is None else chosen.candidate.world
    world = check_processes(chosen.ref_world, given, chosen.timeout)
    if world == chosen.candidate.world:
        return chosen
    return replace(chosen, candidate=chosen.candidate.replace(world=world))


def comparison_pair(options: CompareOptions) -> PairSpec:
    """The pair ``compare`` trains for ``options`` (``CompareOptions.pair``), after the
    processes are checked (``comparison.check_processes``). ``lrcheck compare`` builds its
    options from its flags (the world asked of ``check_processes``) and its pair here."""
    check_processes(options.ref_world, options.candidate.world, options.timeout)
    return options.pair()


def trace_schedule(pair: PairSpec | CompareOptions | None = None, *,
                   progress: Progress | None = None, **keywords: object) -> Report:
    """``lrcheck trace``: step both schedules without a model over ``samples`` training samples
    per epoch (world size is arithmetic) and run the checks that apply, ``updates`` and ``lr``.
    Arguments as for ``compare`` (``fast`` and ``timeout`` unused), with ``lrcheck trace``'s
    defaults (the ``RunSpec`` ``TRACE_DEFAULTS``: bs 8, accum 1, 1 epoch); ``samples`` is
    required, as ``--samples`` is. Ctrl-C raises ``Interrupted`` carrying what was simulated. A
    keyword it does not take is a ``SpecError`` naming it, as for ``compare``."""
    from lrcheck.checks import schedule_checks
    from lrcheck.result import Kind, Report
    from lrcheck.runner.simulate import simulate_pair

    if isinstance(pair, PairSpec):
        _beside_pair("trace_schedule", pair, keywords, ())
    else:
        options = _options("trace_schedule", pair)
        chosen = CompareOptions.of(options or CompareOptions(TRACE_DEFAULTS),
                                   caller="trace_schedule", **keywords)
        if options is None and "samples" not in keywords:
            raise SpecError("trace_schedule needs samples=N, the training samples per epoch of "
                            "the run to check (lrcheck trace --samples)")
        pair = chosen.pair()
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
      against the reference as one run (docs/resume.md); ``interrupt_after_micro``: in the
      middle of update ``interrupt_at``'s window instead, after that many backward passes.

    ``echo``: where the commands' output goes (None: kept). Ctrl-C keeps what was recorded."""
    from lrcheck.command_pair import run_commands as run

    return run(reference, candidate, out,
               RunOptions.of(options, caller="run_commands", **keywords), echo=echo)


def save_report(report: Report, out: str | Path) -> Path:
    """Write ``report``'s result.json, report.md and plots into the folder ``out`` (made when
    missing); returns the folder. A folder that cannot be written is a ``SpecError``."""
    from lrcheck.reports.files import write_report

    return write_report(report, Path(out))


def _options(name: str, given: object) -> CompareOptions | None:
    """``given``, the first argument of ``lrcheck.name``, where it is no ``PairSpec``: options
    or None; anything else is a ``SpecError`` naming what it got."""
    if given is None or isinstance(given, CompareOptions):
        return given
    raise SpecError(f"lrcheck.{name}: pair must be a PairSpec or CompareOptions, got "
                    f"{type(given).__name__}; PairSpec.build(candidate) makes one from a "
                    "RunSpec")


def _beside_pair(name: str, pair: PairSpec, keywords: dict[str, object],
                 allowed: tuple[str, ...]) -> CompareOptions:
    """The options ``allowed`` beside a ``pair`` given whole to ``lrcheck.name`` (each checked);
    any other keyword, which the pair would override, is a ``SpecError`` naming it."""
    beside = {key: value for key, value in keywords.items() if key not in allowed}
    if beside:
        raise SpecError(f"lrcheck.{name}: a PairSpec and the candidate's fields "
                        f"({', '.join(f'{k}={v!r}' for k, v in beside.items())}) together; "
                        "pass one or the other (dataclasses.replace(pair.candidate, ...) and "
                        "PairSpec.build make a pair with other fields)")
    return CompareOptions.of(caller=name, **keywords)

