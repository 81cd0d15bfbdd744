"""``experts (candidate)``: an expert-parallel run's gradient norm group by group
(``record.experts``: ``grad_sq_groups``, each group's squared norm, and ``group_tensors``, its
tensors in the model's order: the experts, the router, the other parameters) against the
reference's same tensors (its per-tensor squares, ``grad_sqs``), update by update in order
(``checks.stages``' machinery). A group whose norm is n (or 1/n) times the reference's is
named; the experts' n times where n is the ranks holding them, counted on each of them: every
rank's loss reaches every expert, so an expert's gradient is the sum over the ranks' losses
where the reference's is their mean (pytorch #160285). The router's alone names a scaling of
its own terms, as the auxiliary loss's (Megatron-LM PR #3769)."""

from __future__ import annotations

from collections.abc import Sequence

from lrcheck.checks.stages import Record, check_parts, part_ratios, scaled_by
from lrcheck.checks.status import CheckResult

WHOSE = {"experts": "the experts'", "router": "the router's", "rest": "the other parameters'"}


def group_ratios(candidate: Record, reference: Record) -> list[float] | None:
    """Each group's gradient norm over the reference's same tensors' (None: not both
    measured, or not as many tensors)."""
    squares, tensors = candidate.get("grad_sq_groups"), candidate.get("group_tensors")
    whole = reference.get("grad_sqs")
    if not isinstance(squares, dict) or not isinstance(tensors, dict) \
            or not isinstance(whole, list) or set(squares) != set(tensors) \
            or sorted(t for mine in tensors.values() for t in mine) != list(range(len(whole))):
        return None
    return part_ratios([squares[g] for g in tensors], list(tensors.values()), whole)


def named_groups(groups: Sequence[str], ratios: Sequence[float], ranks: object, tol: float
                 ) -> str:
    """The groups whose norm parts from the reference's, and their scaling in words."""
    parts = []
    for group, ratio in zip(groups, ratios, strict=True):
        if abs(ratio - 1) <= tol:
            continue
        whose, n = WHOSE.get(group, f"{group}'s"), scaled_by(ratio, 10 * tol)
        if n is None:
            parts.append(f"{whose} gradient norm is {ratio:.6g} times the reference's")
        elif n > 0:
            parts.append(f"{whose} gradients scaled by 1/{n}")
        else:
            why = (f" (expert parallel: counted on each of the {ranks} ranks)"
                   if group == "experts" and -n == ranks else "")
            parts.append(f"{whose} gradients {-n}× the reference's{why}")
    return "; ".join(parts)


def check_experts(candidate: Sequence[Record], reference: Sequence[Record], tol: float
                  ) -> CheckResult | None:
    """``experts (candidate)``: at every update both measured, each group's gradient norm
    within ``tol`` (relative) of the reference's same tensors'; a failure at the first update
    beyond it, naming the groups and their scaling. None where no update has both."""
    def words(ratios: Sequence[float], mine: Record) -> str:
        groups = mine.get("group_tensors")
        return named_groups(list(groups) if isinstance(groups, dict) else [], ratios,
                            mine.get("expert_ranks"), tol)

    return check_parts("experts (candidate)", candidate, reference, tol, group_ratios, words,
                       "the experts', the router's and the other parameters' gradient norms "
                       "are the reference's over the same tensors at {updates} "
                       "(relative ≤ {worst})")
