"""``gradient (candidate)``: the gradient per element, where the norms cannot see it. Each
record holds, per tensor, its gradient dotted with a fixed pseudo-random unit tensor of its
global shape (``grad_dots``, ``record.probes``; a sharded run's merged from its shards, each
once: ``record.placed``, ``record.staged``, ``record.experts``; a candidate not so merged, of
one rank or DDP's replicas, is not held: ``grad-norm`` and ``params`` hold it). Against the
reference's same tensors, update by update in order, each tensor's gap is ``|Δdot| / ‖g‖``
(the reference's norm of that tensor: the dot product is at most it), which rounding keeps
near the arithmetic's epsilon; beyond the tolerance it fails at the first such update,
naming the tensor, and where its norm is the reference's, a gradient permuted or mis-sliced
over the shards."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from lrcheck.checks.status import FAIL, PASS, CheckResult
from lrcheck.words import plural

Record = Mapping[str, object]
NAME = "gradient (candidate)"


def _numbers(found: object) -> list[float | None] | None:
    """A record's per-tensor list (``None`` entries kept: not measured); None: not a list."""
    if not isinstance(found, list):
        return None
    return [float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None
            for x in found]


def dot_gaps(candidate: Record, reference: Record) -> list[float | None] | None:
    """Per tensor ``|Δdot| / ‖g‖`` of one update against the reference's (None for a tensor
    either did not measure); None where the records do not hold as many tensors."""
    mine, theirs = _numbers(candidate.get("grad_dots")), _numbers(reference.get("grad_dots"))
    squares = _numbers(reference.get("grad_sqs"))
    if "grad_sq_ranks" not in candidate:  # not merged from several ranks' shards
        return None
    if mine is None or theirs is None or squares is None \
            or not len(mine) == len(theirs) == len(squares):
        return None
    return [None if a is None or b is None or q is None else
            abs(a - b) / max(math.sqrt(max(q, 0.0)), 1e-300)
            for a, b, q in zip(mine, theirs, squares, strict=True)]


def _norm_ratio(candidate: Record, reference: Record, tensor: int) -> float | None:
    """The candidate's gradient norm of ``tensor`` over the reference's (None: not known)."""
    mine, theirs = _numbers(candidate.get("grad_sqs")), _numbers(reference.get("grad_sqs"))
    if mine is None or theirs is None or len(mine) != len(theirs):
        return None
    a, b = mine[tensor], theirs[tensor]
    return None if a is None or b is None or not b > 0 else math.sqrt(a / b)


def _failed(k: int, gaps: Sequence[float | None], tol: float, candidate: Record,
            reference: Record) -> CheckResult:
    """The failure at update ``k``: the tensors beyond ``tol``, the worst named."""
    beyond = [t for t, g in enumerate(gaps) if g is not None and not g <= tol]
    worst = max(beyond, key=lambda t: math.inf if gaps[t] != gaps[t] else gaps[t] or 0.0)
    gap = gaps[worst] or 0.0
    ratio = _norm_ratio(candidate, reference, worst)
    norm = ("" if ratio is None else
            f"; its norm {ratio:.6g} times the reference's" if abs(ratio - 1) > tol else
            "; its norm the reference's: its elements permuted or mis-sliced over the shards")
    others = len(beyond) - 1
    more = f" ({plural(others, 'other tensor')} too)" if others else ""
    return CheckResult(NAME, FAIL, gap, k,
                       f"at update {k}: tensor {worst}'s gradient (in the model's order) parts "
                       f"from the reference's per element: its dot product with a fixed random "
                       f"tensor differs by {gap:.3g} of its norm (> {tol:g}){norm}{more}")


def check_probes(candidate: Sequence[Record], reference: Sequence[Record], tol: float
                 ) -> CheckResult | None:
    """``gradient (candidate)``: at every update both measured, each tensor's dot product within
    ``tol`` of its norm of the reference's; a failure at the first update beyond it. None where
    no update has both."""
    worst, checked = 0.0, 0
    for k, (mine, theirs) in enumerate(zip(candidate, reference, strict=False)):
        gaps = dot_gaps(mine, theirs)
        known = [] if gaps is None else [g for g in gaps if g is not None]
        if gaps is None or not known:
            continue
        checked += 1
        if not all(g <= tol for g in known):  # NaN fails too
            return _failed(k, gaps, tol, mine, theirs)
        worst = max(worst, *known)
    if not checked:
        return None
    return CheckResult(NAME, PASS, worst, None,
                       f"each tensor's gradient, dotted with a fixed random tensor of its shape "
                       f"(merged over the shards, each once), is the reference's at "
                       f"{plural(checked, 'update')} (|Δ|/‖g‖ ≤ {worst:.3g})")
