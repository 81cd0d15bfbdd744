"""``lrcheck.compare``: the library call behind ``lrcheck compare``."""

from __future__ import annotations

from typing import Any

from lrcheck.checks import run_checks
from lrcheck.result import Report
from lrcheck.runner.pair import Progress, run_pair
from lrcheck.spec import PairSpec, RunSpec, Tolerances


def compare(pair: PairSpec | None = None, *, ref_bs: int | None = None, ref_world: int = 1,
            tolerances: Tolerances | None = None, progress: Progress | None = None,
            timeout: float | None = None, member: Any = None, **candidate: Any) -> Report | None:
    """Train the reference and the candidate and check that they train alike.

    Either pass a ``PairSpec``, or the candidate's ``RunSpec`` fields as keywords
    (``compare(accum=2, bs=16)``, ``compare(world=2, bs=8)``); the reference then has
    ``bs = ref_bs`` (default: the candidate's effective batch over ``ref_world``), accum 1 and
    policy ``per-update``. A side with ``world > 1`` is launched through torchrun; ``timeout``
    is how long such a run may go without finishing an update.

    Inside torchrun, pass ``member`` (``lrcheck.runner.group.join``): every rank trains the
    candidate, and ranks other than 0 get None instead of a report.
    """
    if pair is None:
        pair = PairSpec.build(RunSpec(**candidate), ref_bs=ref_bs, ref_world=ref_world,
                              tolerances=tolerances)
    traces = run_pair(pair, progress, timeout=timeout, member=member)
    if traces is None:
        return None
    checks = run_checks(traces.reference, traces.candidate, pair.tolerances)
    return Report(pair, traces.reference, traces.candidate, checks, traces.environment)
