"""``experts (candidate)``: an expert-parallel run's gradient norm group by group
(``record.experts``: ``grad_sq_groups``, each group's squared norm, and ``group_tensors``, its
tensors in the model's order: the experts, the router, the other parameters) against the
reference's same tensors (its per-tensor squares, ``grad_sqs``), update by update in order
(``checks.stages``' machinery). A group whose norm is n (or 1/n) times the reference's is
named; the experts' n times where n is the ranks holding them, counted on each of them: every
rank's loss reaches every expert, so an expert's gradient is the sum over the ranks' losses
where the reference's is their mean (pytorch #160285); and 1/n, that sum divided by the ranks
twice (torch 2.13's FSDP2 on transformers' 1-rank expert mesh, in float64). The router's
alone names a scaling of its own terms, as the auxiliary loss's (Megatron-LM PR #3769); where
both runs measured the router's gradient term by term (``record.router``: ``router_terms``,
through the top-k that routes and from the auxiliary term), each term is compared on its own
and named."""

from __future__ import annotations

import math
from collections.abc import Sequence

from lrcheck.checks.stages import Record, check_parts, part_ratios, scaled_by
from lrcheck.checks.status import CheckResult
from lrcheck.record.groups import terms_of

WHOSE = {"experts": "the experts'", "router": "the router's", "rest": "the other parameters'"}
TERMS = {"routing": "the routing term (through the top-k: the cross-entropy's path)",
         "auxiliary": "the auxiliary term (the router's scores read besides the top-k: the "
                      "load-balancing loss)"}


def group_ratios(candidate: Record, reference: Record) -> list[float] | None:
    """Each group's gradient norm over the reference's same tensors', then each of the
    router's terms' over the reference's where both measured them (None: not both measured,
    or not as many tensors)."""
    squares, tensors = candidate.get("grad_sq_groups"), candidate.get("group_tensors")
    whole = reference.get("grad_sqs")
    if not isinstance(squares, dict) or not isinstance(tensors, dict) \
            or not isinstance(whole, list) or set(squares) != set(tensors) \
            or sorted(t for mine in tensors.values() for t in mine) != list(range(len(whole))):
        return None
    ratios = part_ratios([squares[g] for g in tensors], list(tensors.values()), whole)
    mine, theirs = terms_of(candidate.get("router_terms")), terms_of(reference.get("router_terms"))
    if mine is not None and theirs is not None and set(mine) == set(theirs):
        ratios += [math.sqrt(mine[t] / theirs[t]) if theirs[t] > 0 else 1.0 if mine[t] == 0
                   else math.inf for t in mine]
    return ratios


def _term(term: str, ratio: float, ranks: object, tol: float) -> str:
    """A term of the router's gradient that parts from the reference's, in words."""
    n, whose = scaled_by(ratio, 10 * tol), TERMS.get(term, f"the {term} term")
    if n is None:
        return f"the router's gradient from {whose} is {ratio:.6g} times the reference's"
    if n < 0:
        return f"the router's gradient from {whose} {-n}× the reference's"
    why = (f" (divided by the {ranks} data-parallel ranks once more: Megatron-LM PR #3769)"
           if term == "auxiliary" and n == ranks else "")
    return f"the router's gradient from {whose} scaled by 1/{n}{why}"


def named_groups(groups: Sequence[str], ratios: Sequence[float], ranks: object, tol: float
                 ) -> str:
    """The groups whose norm parts from the reference's, and their scaling in words."""
    parts = []
    for group, ratio in zip(groups, ratios, strict=True):
        if abs(ratio - 1) <= tol:
            continue
        if group in TERMS:
            parts.append(_term(group, ratio, ranks, tol))
            continue
        whose, n = WHOSE.get(group, f"{group}'s"), scaled_by(ratio, 10 * tol)
        if n is None:
            parts.append(f"{whose} gradient norm is {ratio:.6g} times the reference's")
        elif n > 0:
            why = (f" (expert parallel: divided by the {ranks} ranks twice)"
                   if group == "experts" and n == ranks else "")
            parts.append(f"{whose} gradients scaled by 1/{n}{why}")
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
        groups, terms = mine.get("group_tensors"), mine.get("router_terms")
        names = [*(groups if isinstance(groups, dict) else ()),
                 *(terms if isinstance(terms, dict) else ())]
        return named_groups(names[:len(ratios)], ratios, mine.get("expert_ranks"), tol)

    return check_parts("experts (candidate)", candidate, reference, tol, group_ratios, words,
                       "the experts', the router's and the other parameters' gradient norms "
                       "are the reference's over the same tensors, the router's terms apart "
                       "where measured, at {updates} (relative ≤ {worst})")
