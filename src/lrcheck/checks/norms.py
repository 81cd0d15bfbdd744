"""``clip-norm``: the run's own clipping norm (what ``clip_grad_norm_`` returned, or the norm
given to ``clip_grads_with_norm_``: ``record.calls``) held against the true global gradient
norm, computed from the gradient the optimizer stepped on, merged over the ranks by placement
(``record.placed``: each shard once, however many ranks hold it).

The gradient is recorded after the clip, so the true pre-clip norm is the stepped one undone by
the clip's own coefficient, ``min(1, max_norm / (norm + 1e-6))`` (torch's): where the run's norm
is right the two agree to rounding. Where the run's norm squared is the true one's with the
replicated tensors' part counted N times (the sum of every rank's local squares: N ranks hold
each of their shards), that is named; so is a norm that is rank 0's own shards' (each rank's
local norm, not reduced over the ranks: the record's clip norm is rank 0's)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lrcheck.checks.status import FAIL, PASS, CheckResult
from lrcheck.words import plural

Record = Mapping[str, object]
EPS = 1e-6  # torch's clip_grad_norm_: max_norm / (total_norm + 1e-6)


def true_norm(record: Record) -> tuple[float, float, float] | None:
    """The norm one update was clipped with, and the true pre-clip global norm and its
    replicated tensors' part, both squared (None: not clipped with a known norm, or no
    gradient measured)."""
    norm, top, stepped = record.get("clip_norm"), record.get("max_norm"), record.get("grad_sq")
    replicated = record.get("grad_sq_replicated", 0.0)
    if not record.get("clip_grad_norm") or not isinstance(norm, (int, float)) \
            or not isinstance(top, (int, float)) or not isinstance(stepped, (int, float)) \
            or not isinstance(replicated, (int, float)):
        return None
    coef = min(1.0, top / (norm + EPS))
    if not coef > 0.0:
        return None
    return float(norm), stepped / coef ** 2, replicated / coef ** 2


def _counted(norm: float, whole: float, replicated: float, copies: object, tol: float
             ) -> int | None:
    """N where ``norm`` squared is the true norm squared ``whole`` with the ``replicated``
    part counted N times (2 to ``copies``); None where no such N fits within ``tol``."""
    for n in range(2, (copies if isinstance(copies, int) else 1) + 1):
        expected = whole + (n - 1) * replicated
        if replicated > 0 and abs(norm * norm - expected) <= tol * expected:
            return n
    return None


def _cause(record: Record, norm: float, whole: float, replicated: float, tol: float) -> str:
    """The words naming why the run's ``norm`` parts from the true one (squared: ``whole``,
    its replicated part ``replicated``), within ``tol``: the replicated tensors counted N
    times, or rank 0's own shards' norm (the record's clip norm is rank 0's; its gradient was
    clipped by its own coefficient); "" where neither fits."""
    counted = _counted(norm, whole, replicated, record.get("replicated_ranks"), tol)
    if counted is not None:
        return (f": replicated parameters counted {counted} times (the norm over the tensors "
                f"replicated on {counted} ranks summed on each of the {counted} ranks)")
    ranks, top = record.get("grad_sq_ranks"), record.get("max_norm")
    if not isinstance(ranks, list) or not ranks or not isinstance(top, (int, float)):
        return ""
    own = float(ranks[0]) / min(1.0, top / (norm + EPS)) ** 2  # rank 0's, before its clip
    if abs(norm * norm - own) > tol * own:
        return ""
    return (f": rank 0 clipped with the norm of its own shards, not reduced over the "
            f"{len(ranks)} ranks (each rank clips its shards by a coefficient of its own)")


def check_clip_norm(name: str, records: Sequence[Record], tol: float) -> CheckResult | None:
    """``clip-norm (name)``: at every update clipped with a known norm where the gradient was
    measured, the run's norm against the true global one, relative, within ``tol``; a failure
    at the first update beyond it, naming the replicated count, or rank 0's own shards' norm,
    where it explains the gap. None where no update has both."""
    worst, first, named = 0.0, None, ""
    checked = 0
    for k, record in enumerate(records):
        found = true_norm(record)
        if found is None:
            continue
        checked += 1
        norm, whole, replicated = found
        gap = abs(norm - math.sqrt(whole)) / max(math.sqrt(whole), 1e-300)
        worst = max(worst, gap) if gap == gap else math.inf
        if first is None and not gap <= tol:
            first = k, norm, math.sqrt(whole)
            # Naming only, not the verdict: squares of norms equal to the rounding of tol.
            named = _cause(record, norm, whole, replicated, 10 * tol)
    if not checked:
        return None
    if first is None:
        return CheckResult(f"clip-norm ({name})", PASS, worst, None,
                           f"the norm the run clipped with is the true global gradient norm "
                           f"(merged over the ranks by placement, each shard once) at "
                           f"{plural(checked, 'clipped update')} (relative gap ≤ {worst:.3g})")
    k, norm, true = first
    return CheckResult(f"clip-norm ({name})", FAIL, worst, k,
                       f"at update {k} the run clipped with a gradient norm of {norm:.6g}, the "
                       f"true global norm is {true:.6g} (relative gap {abs(norm - true) / true:.3g}"
                       f" > {tol:g}){named}")
