"""The library calls behind the commands: ``lrcheck.compare`` and ``lrcheck.trace_schedule``."""

from __future__ import annotations

from typing import Any

from lrcheck.checks import run_checks, schedule_checks
from lrcheck.result import Report
from lrcheck.runner.pair import Progress, run_pair
from lrcheck.spec import PairSpec, RunSpec, Tolerances
from lrcheck.trace import RunTrace


def compare(pair: PairSpec | None = None, *, ref_bs: int | None = None, ref_world: int = 1,
            tolerances: Tolerances | None = None, progress: Progress | None = None,
            timeout: float | None = None, member: Any = None,
            cache: dict[RunSpec, RunTrace] | None = None, **candidate: Any) -> Report | None:
    """Train the reference and the candidate and check that they train alike.

    Either pass a ``PairSpec``, or the candidate's ``RunSpec`` fields as keywords
    (``compare(accum=2, bs=16)``, ``compare(world=2, bs=8)``); the reference then has
    ``bs = ref_bs`` (default: the candidate's effective batch over ``ref_world``), accum 1 and
    policy ``per-update``. A side with ``world > 1`` is launched through torchrun; ``timeout``
    is how long such a run may go without finishing an update.

    Inside torchrun, pass ``member`` (``lrcheck.runner.group.join``): every rank trains the
    candidate, and ranks other than 0 get None instead of a report. ``cache`` (reference
    ``RunSpec`` → trace) lets several pairs share one trained reference.
    """
    pair = _pair(pair, ref_bs, ref_world, tolerances, candidate)
    traces = run_pair(pair, progress, timeout=timeout, member=member, cache=cache)
    if traces is None:
        return None
    checks = run_checks(traces.reference, traces.candidate, pair.tolerances)
    return Report(pair, traces.reference, traces.candidate, checks, traces.environment)


def trace_schedule(pair: PairSpec | None = None, *, ref_bs: int | None = None, ref_world: int = 1,
                   tolerances: Tolerances | None = None, progress: Progress | None = None,
                   **candidate: Any) -> Report:
    """``lrcheck trace``: step both schedules without a model over ``samples`` training samples
    per epoch (world size is arithmetic) and run the checks that apply, ``updates`` and ``lr``.
    Arguments as for ``compare``."""
    from lrcheck.runner.schedule import simulate_pair

    pair = _pair(pair, ref_bs, ref_world, tolerances, candidate)
    traces = simulate_pair(pair, progress)
    checks = schedule_checks(traces.reference, traces.candidate, pair.tolerances)
    # Keep the updates around where the traces part in the thinned result.json.
    pinned = tuple(c.first_divergence for c in checks if c.first_divergence is not None)
    for trace in (traces.reference, traces.candidate):
        trace.pinned = pinned  # type: ignore[attr-defined]
    return Report(pair, traces.reference, traces.candidate, checks, traces.environment,
                  mode="trace")


def _pair(pair: PairSpec | None, ref_bs: int | None, ref_world: int,
          tolerances: Tolerances | None, candidate: dict[str, Any]) -> PairSpec:
    if pair is not None:
        return pair
    return PairSpec.build(RunSpec(**candidate), ref_bs=ref_bs, ref_world=ref_world,
                          tolerances=tolerances)
