"""The checks only a run ``lrcheck record`` recorded has: the steps a GradScaler skipped, the
gradient norm, and (a run of several replicas) whether the replicas agree."""

from __future__ import annotations

import numpy as np

from lrcheck.checks.effects import TWIN_COMMAND, against_twin, jump_or_drift, relative
from lrcheck.checks.status import FAIL, PASS, SKIP, CheckResult
from lrcheck.trace import RunTrace


def check_skips(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray]
                ) -> CheckResult | None:
    """``skipped-steps``: the GradScaler skipped the same number of steps before each aligned
    update in both runs (None: neither run recorded skips)."""
    if ref.skips is None or cand.skips is None:
        return None
    a = np.array([ref.skips[int(i)] for i in pairs[0]], dtype=np.int64)
    b = np.array([cand.skips[int(j)] for j in pairs[1]], dtype=np.int64)
    if not a.any() and not b.any():
        return CheckResult("skipped-steps", SKIP, None, None,
                           "no optimizer step was skipped by a GradScaler in either run")
    apart = np.flatnonzero(a != b)
    if len(apart):
        k = int(pairs[0][apart[0]])
        return CheckResult("skipped-steps", FAIL, float(abs(int(b[apart[0]]) - int(a[apart[0]]))),
                           k, f"before update {k} the GradScaler skipped {int(b[apart[0]])} "
                              f"step(s) in the candidate, {int(a[apart[0]])} in the reference")
    return CheckResult("skipped-steps", PASS, 0.0, None,
                       f"the GradScaler skipped {int(a.sum())} step(s) in each run, before "
                       "the same updates")


def check_grad_norm(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray],
                    tol: float, twin: RunTrace | None = None) -> CheckResult | None:
    """``grad-norm``: the gradient norm of the updates where both runs took one, judged as
    ``params`` is (against the reference command's ``twin`` where there is one, else as a
    jump against the drift); None where neither run recorded one."""
    if ref.grad_norms is None or cand.grad_norms is None:
        return None
    both = [(int(i), ref.grad_norms[int(i)], cand.grad_norms[int(j)])
            for i, j in zip(*pairs, strict=True)
            if ref.grad_norms[int(i)] is not None and cand.grad_norms[int(j)] is not None]
    if not both:
        return CheckResult("grad-norm", SKIP, None, None,
                           "no update has a gradient norm in both runs")
    steps = np.array([k for k, _, _ in both])
    a = np.array([x for _, x, _ in both], dtype=np.float64)
    b = np.array([y for _, _, y in both], dtype=np.float64)
    diff, scale = np.abs(b - a), np.maximum(np.abs(a), 1e-300)
    result = relative("grad-norm", diff, scale, tol, None, steps, "|Δ‖g‖|/‖g‖")
    norms = None if twin is None else twin.grad_norms
    own = None if norms is None else [norms[k] if k < len(norms) else None for k in steps]
    if result.status == FAIL and own is not None and all(x is not None for x in own):
        floor = np.abs(np.array(own, dtype=np.float64) - a) / scale
        return against_twin(result, diff / scale, floor, tol, steps, TWIN_COMMAND,
                            len(pairs[0]))
    return jump_or_drift(result, diff, scale, tol, steps)


def check_replicas(name: str, gap: tuple[float, int, int] | None, ranks: int,
                   tol: float) -> CheckResult | None:
    """``replicas``: the parameter fingerprints of every rank of a replicated run (DDP) agree
    with rank 0's within ``tol`` (``gap``: the largest ``|Δsum|/max|p|``, its update and
    rank); None for a run of one rank, a sharded one, or one without fingerprints."""
    if gap is None:
        return None
    value, update, rank = gap
    if value > tol:
        return CheckResult(f"replicas ({name})", FAIL, value, update,
                           f"rank {rank}'s parameters part from rank 0's after update {update} "
                           f"(|Δsum|/max|p| {value:.3g} > {tol:g}): the {ranks} replicas of "
                           f"the {name} do not train in sync")
    return CheckResult(f"replicas ({name})", PASS, value, None,
                       f"the {ranks} ranks' parameters agree with rank 0's "
                       f"(|Δsum|/max|p| ≤ {value:.3g})")
