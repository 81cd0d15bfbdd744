"""``lrcheck.compare``: the library call behind ``lrcheck compare``."""

from __future__ import annotations

from typing import Any

from lrcheck.checks import run_checks
from lrcheck.result import Report
from lrcheck.runner.pair import Progress, run_pair
from lrcheck.spec import PairSpec, RunSpec, Tolerances


def compare(pair: PairSpec | None = None, *, ref_bs: int | None = None, ref_world: int = 1,
            tolerances: Tolerances | None = None, progress: Progress | None = None,
            **candidate: Any) -> Report:
    """Train the reference and the candidate and check that they train alike.

    Either pass a ``PairSpec``, or the candidate's ``RunSpec`` fields as keywords
    (``compare(accum=2, bs=16)``); the reference then has ``bs = ref_bs`` (default: the
    candidate's effective batch), accum 1 and policy ``per-update``.
    """
    if pair is None:
        pair = PairSpec.build(RunSpec(**candidate), ref_bs=ref_bs, ref_world=ref_world,
                              tolerances=tolerances)
    traces = run_pair(pair, progress)
    checks = run_checks(traces.reference, traces.candidate, pair.tolerances)
    return Report(pair, traces.reference, traces.candidate, checks, traces.environment)
