"""The library calls behind the commands: ``lrcheck.compare``, ``lrcheck.trace_schedule`` and
``lrcheck.diff``, and ``lrcheck.save_report``. Importing this module does not import torch;
training does."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lrcheck.checks import needs_floor, recorded_checks, run_checks, schedule_checks
from lrcheck.errors import SpecError
from lrcheck.result import Kind, Report
from lrcheck.spec import (
    DEFAULT_TIMEOUT_S,
    TRACE_DEFAULTS,
    FilePair,
    PairSpec,
    RunSpec,
    Tolerances,
    reference_framework,
)
from lrcheck.trace import RunTrace

if TYPE_CHECKING:
    from lrcheck.runner.pair import Progress

# The candidate's fields ``compare`` and ``trace_schedule`` take as keywords: RunSpec's, less
# ``twin``, which lrcheck sets on a reference of its own and a user never types.
CANDIDATE_KEYWORDS = tuple(f.name for f in fields(RunSpec) if f.name != "twin")


def compare(pair: PairSpec | None = None, *, ref_bs: int | None = None, ref_world: int = 1,
            tolerances: Tolerances | None = None, ref_framework: str | None = None,
            fast: bool = False, progress: Progress | None = None,
            timeout: float | None = DEFAULT_TIMEOUT_S,
            cache: dict[RunSpec, RunTrace] | None = None, **candidate: Any) -> Report | None:
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
    reports: list[Report] = []
    run_comparison(_pair(pair, ref_bs, ref_world, tolerances, candidate, ref_framework, fast),
                   reports.append,
                   progress=progress, timeout=timeout, cache=cache)
    return reports[0] if reports else None


def run_comparison(pair: PairSpec, on_report: Callable[[Report], None], *,
                   progress: Progress | None = None, timeout: float | None = DEFAULT_TIMEOUT_S,
                   cache: dict[RunSpec, RunTrace] | None = None) -> int:
    """``compare`` for a command: ``on_report`` gets the report where there is one, and the exit
    code every process leaves with is returned. Inside torchrun that is rank 0's on every rank,
    and ``on_report`` runs on rank 0 before the processes part: torchrun stops every rank as soon
    as one exits non-zero, so rank 0 saves and shows the report there while the others wait."""
    from lrcheck.runner.pair import join_torchrun, leave_torchrun, release_torchrun, run_pair

    member = join_torchrun(pair.candidate, timeout)
    try:
        traces = run_pair(pair, progress, timeout=timeout, member=member, cache=cache,
                          needs_floor=lambda ref, cand: needs_floor(ref, cand,
                                                                    pair.tolerances))
    except BaseException:
        if member is not None:  # a later comparison in this process joins afresh
            release_torchrun(member)
        raise
    report = None
    if traces is not None:
        checks = run_checks(traces.reference, traces.candidate, pair.tolerances, traces.twin)
        report = Report(pair, traces.reference, traces.candidate, checks, traces.environment)

    def hand_over() -> None:
        if report is not None:
            on_report(report)

    code = 0 if report is None else report.exit_code
    if member is None:
        hand_over()
        return code
    return leave_torchrun(member, code, hand_over)


def trace_schedule(pair: PairSpec | None = None, *, ref_bs: int | None = None, ref_world: int = 1,
                   tolerances: Tolerances | None = None, progress: Progress | None = None,
                   **candidate: Any) -> Report:
    """``lrcheck trace``: step both schedules without a model over ``samples`` training samples
    per epoch (world size is arithmetic) and run the checks that apply, ``updates`` and ``lr``.
    Arguments as for ``compare``, with ``lrcheck trace``'s defaults (``TRACE_DEFAULTS``: bs 8,
    accum 1, 1 epoch); ``samples`` is required, as ``--samples`` is. Ctrl-C raises
    ``Interrupted`` carrying what was simulated. A keyword it does not take is a ``SpecError``
    naming it, as for ``compare``."""
    from lrcheck.runner.simulate import simulate_pair

    _check_keywords(trace_schedule, pair, candidate)
    if pair is None and "samples" not in candidate:
        raise SpecError("trace_schedule needs samples=N, the training samples per epoch of the "
                        "run to check (lrcheck trace --samples)")
    pair = _pair(pair, ref_bs, ref_world, tolerances, {**TRACE_DEFAULTS, **candidate})
    traces = simulate_pair(pair, progress)
    checks = schedule_checks(traces.reference, traces.candidate, pair.tolerances)
    return Report(pair, traces.reference, traces.candidate, checks, traces.environment,
                  kind=Kind.TRACE)


def diff(reference: str | Path, candidate: str | Path, *,
         tolerances: Tolerances | None = None, **unknown: Any) -> Report:
    """``lrcheck diff``: read two files written by ``lrcheck.Recorder``, align their updates by
    ``samples_seen`` and run the checks that apply (``updates``, ``lr``, ``loss``, and
    ``params`` where both files carry parameter fingerprints). Trains
    nothing and needs no torch. A missing or malformed file is a ``SpecError`` naming it (and
    the line). Default tolerances are float32's (a file does not say its dtype). A keyword
    other than ``tolerances`` is a ``SpecError`` naming it."""
    if unknown:
        raise _unknown("diff", list(unknown), ("tolerances",),
                       "it takes the two Recorder files and tolerances")
    from lrcheck.recorder import read_records
    from lrcheck.version import __version__

    pair = FilePair(str(reference), str(candidate),
                    **({} if tolerances is None else {"tolerances": tolerances}))
    ref, cand = (RunTrace.from_records(read_records(path), str(path))
                 for path in (reference, candidate))
    checks = recorded_checks(ref, cand, pair.tolerances)
    return Report(pair, ref, cand, checks, {"lrcheck": __version__, "device": "none"},
                  kind=Kind.DIFF)


def save_report(report: Report, out: str | Path) -> Path:
    """Write ``report``'s result.json, report.md and plots into the folder ``out`` (made when
    missing); returns the folder. A folder that cannot be written is a ``SpecError``."""
    from lrcheck.reports.files import write_report

    return write_report(report, Path(out))


def _check_keywords(function: Callable[..., Any], pair: PairSpec | None,
                    candidate: dict[str, Any]) -> None:
    """A ``SpecError`` for a keyword of ``function``'s ``**candidate`` that is no candidate
    field (naming it, the nearest accepted one, and all that are accepted), and for candidate
    fields beside a ``pair``: rather than Python's TypeError, or keywords silently unused."""
    own = [p.name for p in inspect.signature(function).parameters.values()
           if p.kind is inspect.Parameter.KEYWORD_ONLY]
    name = function.__name__
    unknown = [key for key in candidate if key not in CANDIDATE_KEYWORDS]
    if unknown:
        raise _unknown(name, unknown, (*CANDIDATE_KEYWORDS, *own),
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

def _unknown(name: str, unknown: list[str], accepted: tuple[str, ...],
             takes: str) -> SpecError:
    """The error for the keywords ``unknown`` that ``lrcheck.name`` does not take: each named,
    the accepted one nearest the first, and ``takes``, what it does take."""
    close = difflib.get_close_matches(unknown[0], accepted, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    words = (f"keyword {unknown[0]!r}" if len(unknown) == 1
             else f"keywords {', '.join(map(repr, unknown))}")
    return SpecError(f"lrcheck.{name}: unknown {words}{hint}; {takes}")


def _pair(pair: PairSpec | None, ref_bs: int | None, ref_world: int,
          tolerances: Tolerances | None, candidate: dict[str, Any],
          ref_framework: str | None = None, fast: bool = False) -> PairSpec:
    if pair is not None:
        return pair
    return PairSpec.build(RunSpec(**candidate), ref_bs=ref_bs, ref_world=ref_world,
                          tolerances=tolerances,
                          ref_framework=reference_framework(candidate.get("policy", ""),
                                                            ref_framework),
                          noise_floor=not fast)
