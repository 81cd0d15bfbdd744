"""``stages (candidate)``: a pipeline-parallel run's gradient norm stage by stage
(``record.staged``: ``grad_sq_stages``, each stage's squared norm, and ``stage_tensors``, its
number of tensors, in the model's order) against the reference's same tensors (its per-tensor
squares, ``grad_sqs``), update by update in order. A stage whose norm is 1/n (or n) times the
reference's is named: where n is the micro-batches of the update (its backward passes), the
stage's gradients were scaled by 1/n twice — the loss divided by the micro-batches and the
schedule's ``scale_grads`` (or the stage's own rescale) on top (torchtitan #1733, DeepSpeed
PR #8154)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from lrcheck.checks.effects import JUMP_FACTOR
from lrcheck.checks.status import FAIL, PASS, SKIP, TINY, WARN, CheckResult
from lrcheck.words import plural

Record = Mapping[str, object]
# A candidate's and the reference's record of one update → each part's gradient norm over the
# reference's same tensors' (None: not measured); and the parts apart in words.
Ratios = Callable[[Record, Record], list[float] | None]
Words = Callable[[Sequence[float], Record], str]


def part_ratios(squares: Sequence[float], tensors: Sequence[Sequence[int]],
                whole: Sequence[float]) -> list[float]:
    """Each part's gradient norm (``squares``: its squared norm) over the reference's over
    the same tensors (``tensors``: each part's, indices into the reference's ``whole``); 1
    where both are zero, infinite where only the reference's is."""
    ratios = []
    for square, mine in zip(squares, tensors, strict=True):
        want = float(sum(whole[t] for t in mine))
        ratios.append(math.sqrt(square / want) if want > 0 else 1.0 if square == 0 else math.inf)
    return ratios


def stage_ratios(candidate: Record, reference: Record) -> list[float] | None:
    """Each stage's gradient norm over the reference's same tensors' (None: not both
    measured, or not as many tensors)."""
    squares, counts = candidate.get("grad_sq_stages"), candidate.get("stage_tensors")
    whole = reference.get("grad_sqs")
    if not isinstance(squares, list) or not isinstance(counts, list) \
            or not isinstance(whole, list) or sum(counts) != len(whole):
        return None
    starts = [0, *itertools.accumulate(counts)]
    return part_ratios(squares, [range(a, b) for a, b in itertools.pairwise(starts)], whole)


def scaled_by(ratio: float, tol: float) -> int | None:
    """n where ``ratio`` is 1/n (negative: n, a stage scaled up), n ≥ 2, within ``tol``."""
    if not math.isfinite(ratio) or ratio <= 0:
        return None
    for n in (round(1 / ratio) if ratio > 0 else 0, -round(ratio)):
        if abs(n) >= 2 and abs(ratio * abs(n) ** (1 if n > 0 else -1) - 1) <= tol:
            return n
    return None


def named(ratios: Sequence[float], micro: object, tol: float) -> str:
    """The stages whose norm parts from the reference's, and their scaling in words."""
    parts = []
    for s, ratio in enumerate(ratios):
        if abs(ratio - 1) <= tol:
            continue
        n = scaled_by(ratio, 10 * tol)
        if n is None:
            parts.append(f"stage {s}'s gradient norm is {ratio:.6g} times the reference's")
        elif n > 0:
            twice = " twice" if n == micro else ""
            parts.append(f"stage {s}'s gradients scaled by 1/{n}{twice}")
        else:
            parts.append(f"stage {s}'s gradients {-n} times the reference's")
    why = (f" (the {micro} micro-batches divided once by the loss and once more by the "
           f"schedule's scale_grads or the stage's own rescale)"
           if any(f"1/{micro} twice" in p for p in parts) else "")
    return "; ".join(parts) + why


def check_parts(name: str, candidate: Sequence[Record], reference: Sequence[Record],
                tol: float, ratios_of: Ratios, words: Words, passed: str
                ) -> CheckResult | None:
    """``name``: at every update both measured, each part's gradient norm within ``tol``
    (relative) of the reference's same tensors' (``ratios_of``); a failure at the first
    update beyond it where a part is scaled by n (a scaling is no rounding) or the gap jumped
    (``checks.effects.JUMP_FACTOR`` in one update, or at the first update, where both runs
    start from the same weights), the parts apart in ``words``; a gap beyond ``tol`` that
    only grew, as two free-running trainings drift apart, a warning; a pass saying ``passed``
    (its ``{updates}`` and ``{worst}`` filled in). None where no update has both."""
    worst, checked, before, drifted = 0.0, 0, 0.0, None
    for k, (mine, theirs) in enumerate(zip(candidate, reference, strict=False)):
        ratios = ratios_of(mine, theirs)
        if ratios is None:
            continue
        checked += 1
        gap = max((abs(r - 1) for r in ratios), default=0.0)
        worst = max(worst, gap) if gap == gap else math.inf
        scaled = any(scaled_by(r, 10 * tol) is not None for r in ratios)
        jumped = checked == 1 or not gap <= JUMP_FACTOR * max(before, TINY)
        if not gap <= tol and (scaled or jumped):
            return CheckResult(name, FAIL, gap, k, f"at update {k}: {words(ratios, mine)}")
        if not gap <= tol and drifted is None:
            drifted = k
        before = gap
    if not checked:
        return None
    if drifted is not None:
        return CheckResult(name, WARN, worst, drifted, f"numerical drift, not a failure: beyond "
                           f"{tol:g} from update {drifted} (at most {worst:.3g}), grown "
                           f"smoothly, never {JUMP_FACTOR:g}× in one update nor a scaling by n, "
                           "as two free-running trainings that differ only in the order of their "
                           "sums part")
    return CheckResult(name, PASS, worst, None,
                       passed.format(updates=plural(checked, "update"), worst=f"{worst:.3g}"))


def check_stages(candidate: Sequence[Record], reference: Sequence[Record], tol: float
                 ) -> CheckResult | None:
    """``stages (candidate)``: at every update both measured, each stage's gradient norm within
    ``tol`` (relative) of the reference's same tensors'; a failure at the first update beyond
    it, naming the stages and their scaling. None where no update has both."""
    result = check_parts("stages (candidate)", candidate, reference, tol, stage_ratios,
                         lambda ratios, mine: named(ratios, mine.get("backward"), tol),
                         "each pipeline stage's gradient norm is the reference's over the same "
                         "tensors at {updates} (relative ≤ {worst})")
    told = next((t for r in candidate if isinstance(t := r.get("stage_names"), str)), None)
    if told is None:  # record.staged.shared_of: what the stitch took, where it could not tell
        return result
    if result is None:
        return CheckResult("stages (candidate)", SKIP, None, None,
                           "not compared at any update (the stitched model's tensors not the "
                           f"reference's in number, or no gradient norm per tensor); {told}")
    return replace(result, detail=f"{result.detail}; {told}")
