"""Two recorded runs judged in lockstep (``stepwise.StepGaps``): each candidate update started
from the reference's state, so the gradient it used and the parameters after it differ from
the reference's only by the order of a floating-point sum, at every update, and nothing piles
up. ``grads`` judges ‖g_c − g_r‖ / ‖g_r‖ over the model, ``params`` ‖p_c − p_r‖ after the
update relative to the update's own size (above the parameters' rounding floor), each against
a bound for the precision the runs computed in (``BOUNDS``, calibrated on correct pairs:
docs/checks.md): the coarsest of the parameters' type, autocast's and the types the forward's
operations computed in (``record.precision``), named in the detail.

Rounding is nearly orthogonal to the reference's own gradient and update; the bugs lrcheck
exists for (a loss normalised wrongly, a scale on the gradient, the LR or the update) are
along it. So the part of each gap along the reference's own (``scale``: <Δ, ref> / ‖ref‖²,
over the model and per tensor) is judged against a much tighter bound: a 1.001× gradient fails
under bf16 autocast's noise of 2e-3.

A tensor whose gradient is exactly zero in exact arithmetic (an attention key bias: softmax
ignores it) gets a gradient of pure rounding noise, different in each run, which AdamW turns
into steps of a sizeable fraction of the LR: such tensors (``rounding_noise``) are left out of
both judgements and named; so are the coordinates of a tensor whose gradient is such noise
(the key-bias slice of a fused qkv projection), which the candidate leaves out of the
parameters' columns and counts (``record.gaps.noise``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from lrcheck.checks.status import FAIL, PASS, SKIP, TINY, WARN, CheckResult
from lrcheck.stepwise import (
    GRAD_ALONG,
    GRAD_DIFF,
    GRAD_DOT,
    GRAD_L1,
    GRAD_REF,
    NOISE,
    PARAM_DIFF,
    ULP,
    UPDATE_ALONG,
    UPDATE_DOT,
    UPDATE_L1,
    UPDATE_REF,
    StepGaps,
)
from lrcheck.words import plural


@dataclass(frozen=True)
class Bound:
    """The most a correct pair's gradient (``grad``) and update (``update``) may differ, each
    relative; ``noise``: a tensor whose gradient norm is at most this fraction of the model's
    and which the two runs do not share (relative gap ≥ ``UNSHARED``) carries rounding noise;
    ``scale``: the most the gap along the reference's own gradient or update may be, relative
    to it (a 1.001× gradient is 1e-3)."""

    grad: float
    update: float
    noise: float
    scale: float


# Keyed by the precision the runs computed in (``record.precision``). Calibrated on correct
# pairs (docs/checks.md, "Lockstep bounds for recorded runs"): the largest relative gaps
# measured, the bound and the margin are there.
BOUNDS = {"float64": Bound(1e-9, 1e-9, 1e-12, 1e-10),
          "float32": Bound(1e-4, 1e-4, 1e-5, 1e-5),
          "tfloat32": Bound(5e-2, 5e-2, 1e-1, 2e-4),
          "bfloat16": Bound(5e-2, 5e-2, 1e-1, 2e-4),
          "float16": Bound(5e-2, 5e-2, 1e-1, 2e-4)}
# A tensor's scale is judged on its own where the gap is along its own gradient or update this
# much (|cos|; rounding's is about 1/√n) and it has at least ``SCALED_SIZE`` elements.
PARALLEL, SCALED_SIZE = 0.9, 64
# A tensor's gradients in the two runs are unshared noise where they differ by this much of
# their own size (two independent draws of rounding differ by about √2 of one).
UNSHARED = 0.1


def bound_for(dtype: str) -> Bound:
    """The bound of the coarsest type among ``dtype``'s (``float32+float64``: float32's)."""
    kinds = [BOUNDS[k] for k in dtype.split("+") if k in BOUNDS]
    if not kinds:
        return BOUNDS["float32"]
    return max(kinds, key=lambda b: b.grad)


def bound_of(gaps: StepGaps) -> tuple[Bound, str]:
    """The bound of the coarsest precision either run computed in, and what set it ("bf16
    autocast on cpu"); the parameters' types where the precision was not recorded."""
    found = [c for c in (gaps.compute, gaps.reference_compute)
             if c and str(c.get("precision")) in BOUNDS]
    if found:
        worst = max(found, key=lambda c: BOUNDS[str(c["precision"])].grad)
        return BOUNDS[str(worst["precision"])], str(worst.get("why") or worst["precision"])
    dtype = f"{gaps.dtype}+{gaps.reference_dtype or gaps.dtype}"
    return bound_for(dtype), f"the parameters' type, {gaps.dtype}"


def rounding_noise(gaps: StepGaps, bound: Bound) -> np.ndarray:
    """``(updates, tensors)``: where a tensor's gradient is rounding noise (see ``Bound``)."""
    g = gaps.gaps
    model = np.sqrt(np.sum(g[:, :, GRAD_REF] ** 2, axis=1, keepdims=True))
    own = g[:, :, GRAD_REF]
    tiny = own <= bound.noise * model
    unshared = g[:, :, GRAD_DIFF] >= UNSHARED * own
    return np.asarray(tiny & unshared & (own > 0))


def _noise_text(gaps: StepGaps, noise: np.ndarray, bound: Bound, optimizer: str) -> str:
    """The tensors left out as rounding noise, named (``optimizer``: its class name)."""
    tensors = np.flatnonzero(noise.any(axis=0))
    if not len(tensors):
        return ""
    shown = ", ".join(gaps.names[t] for t in tensors[:4])
    more = f" and {len(tensors) - 4} more" if len(tensors) > 4 else ""
    whose = f"{optimizer}'s steps" if optimizer else "the steps"
    return (f"; {shown}{more} get only rounding noise as a gradient (at most {bound.noise:g} "
            f"of the model's norm, and unshared by the runs): {whose} on them are not compared")


def _norms(gaps: StepGaps, keep: np.ndarray, column: int) -> np.ndarray:
    return np.asarray(np.sqrt(np.sum(np.where(keep, gaps.gaps[:, :, column], 0.0) ** 2, axis=1)))


def _worst_tensor(gaps: StepGaps, i: int, keep: np.ndarray, diff: int, ref: int) -> str:
    row = np.where(keep[i], gaps.gaps[i, :, diff], 0.0)
    t = int(np.argmax(row))
    own = gaps.gaps[i, t, diff] / max(gaps.gaps[i, t, ref], TINY)
    return f"most in {gaps.names[t]} ({own:.3g} of its own)"


def _lead(gaps: StepGaps) -> str:
    n = len(gaps.steps)
    text = f"lockstep ({plural(max(n - 1, 0), 'update')} started from the reference's state"
    if gaps.stopped is not None:
        text += f"; lockstep stopped after update {gaps.stopped_at}: {gaps.stopped}"
    return text + ")"


def scales(gaps: StepGaps, keep: np.ndarray, columns: tuple[int, int, int, int, int],
           floor: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per update, the scale of the gap over the model: Σ sign(ref_i)·Δ_i / Σ |ref_i|
    (``columns``' along and l1, ``keep``'s tensors; ``record.lockstep._along``: a few large
    coordinates cannot carry their rounding into it);
    and ``(updates, tensors)`` each tensor's own, <Δ, ref> / ‖ref‖² (``columns``' dot, ref
    and diff), where it is judged on its own (0 elsewhere): a gap along its own
    (``PARALLEL``), of a tensor of ``SCALED_SIZE`` elements or more (where the sizes are
    recorded), beyond its rounding floor (``floor``: the column of its norm)."""
    dot, ref, diff, along, l1 = columns
    g = gaps.gaps
    d, r = np.where(keep, g[:, :, dot], 0.0), np.where(keep, g[:, :, ref], 0.0)
    model = (np.sum(np.where(keep, g[:, :, along], 0.0), axis=1)
             / np.maximum(np.sum(np.where(keep, g[:, :, l1], 0.0), axis=1), TINY))
    sizes = np.array(gaps.sizes if len(gaps.sizes) == len(gaps.names) else [0] * len(gaps.names))
    alone = (np.abs(d) >= PARALLEL * g[:, :, diff] * r) & (sizes >= SCALED_SIZE) & (r > 0)
    if floor is not None:
        alone &= g[:, :, diff] > g[:, :, floor]
    return model, np.where(alone, d / np.maximum(r * r, TINY), 0.0)


def _scaled_text(gaps: StepGaps, i: int, found: tuple[np.ndarray, np.ndarray], bound: Bound,
                 what: str) -> str:
    """Update ``gaps.steps[i]``'s scale beyond ``bound.scale``, over the model or of a tensor
    ('' where none is)."""
    model, tensor = found
    k = int(gaps.steps[i])
    where = ""
    value = float(model[i])
    if not abs(value) <= bound.scale:
        where = f"the {what}"
    elif np.any(np.abs(tensor[i]) > bound.scale):
        t = int(np.argmax(np.abs(tensor[i])))
        value, where = float(tensor[i, t]), f"{gaps.names[t]}'s {what}"
    if not where:
        return ""
    return (f"{where} is {1 + value:.6g}× the reference's at update {k}: a scale, not rounding "
            f"(the part of the gap along the reference's own {what}; rounding keeps it within "
            f"±{bound.scale:g})")


def _beyond_scale(found: tuple[np.ndarray, np.ndarray], bound: Bound) -> np.ndarray:
    model, tensor = found
    return np.asarray(~(np.abs(model) <= bound.scale) | np.any(np.abs(tensor) > bound.scale,
                                                                axis=1))


def check_grads(gaps: StepGaps, reason: str | None, optimizer: str = "") -> CheckResult:
    """``grads``: ‖g_c − g_r‖ / ‖g_r‖ of every update within the bound of the precision the
    runs computed in, and its part along the reference's gradient (``scales``) within
    ``Bound.scale``, rounding-noise tensors left out; ``reason``: why the effects are not
    comparable."""
    if not len(gaps.steps):
        return CheckResult("grads", SKIP, None, None, f"no update compared: {_lead(gaps)}")
    bound, source = bound_of(gaps)
    noise = rounding_noise(gaps, bound)
    keep = ~noise
    diff, ref = _norms(gaps, keep, GRAD_DIFF), _norms(gaps, keep, GRAD_REF)
    rel = diff / np.maximum(ref, TINY)
    found = scales(gaps, keep, (GRAD_DOT, GRAD_REF, GRAD_DIFF, GRAD_ALONG, GRAD_L1))
    judged = np.ones(len(rel), dtype=bool)
    if gaps.init_gap:  # update 0 started from other weights: its gradient is not comparable
        judged &= gaps.steps != 0
    over = np.flatnonzero(judged & (~(rel <= bound.grad) | _beyond_scale(found, bound)))
    worst = float(np.max(rel[judged], initial=0.0))
    along = float(np.max(np.abs(found[0][judged]), initial=0.0))
    what = f"‖Δg‖/‖g‖ (the gradient each update used, after clipping; {gaps.dtype})"
    limit = f"{bound.grad:g} (the bound for {source})"
    named = _noise_text(gaps, noise, bound, optimizer)
    if not len(over):
        return _ended("grads", None, float(np.max(diff, initial=0.0)), worst, reason,
                      f"{_lead(gaps)}: max {what} {worst:.3g} ≤ {limit} over "
                      f"{plural(int(judged.sum()), 'update')}, along the reference's own "
                      f"gradient at most {along:.2g} of it ≤ {bound.scale:g}{named}")
    i = int(over[0])
    k = int(gaps.steps[i])
    scaled = _scaled_text(gaps, i, found, bound, "gradient")
    if rel[i] <= bound.grad:
        text = f"{scaled}; {what} {rel[i]:.3g} within {limit}"
    else:
        text = (f"{what} {rel[i]:.3g} > {bound.grad:g} at update {k}, from the same state "
                f"(the bound for {source}): {_worst_tensor(gaps, i, keep, GRAD_DIFF, GRAD_REF)}"
                f"{'; ' if scaled else ''}{scaled}")
    return _ended("grads", k, float(diff[i]), worst, reason,
                  f"{_lead(gaps)}: {text}; max {worst:.3g}{_beyond(gaps.steps[over])}{named}")


def _beyond(steps: np.ndarray, shown: int = 8) -> str:
    """Every update beyond the bound, where there is more than the first: in lockstep each
    started from the reference's state, so each is a difference of its own."""
    if len(steps) < 2:
        return ""
    named = ", ".join(str(int(k)) for k in steps[:shown])
    return (f"; beyond it at {plural(len(steps), 'update')}: {named}"
            f"{', …' if len(steps) > shown else ''}")


def _ended(name: str, k: int | None, gap: float, worst: float, reason: str | None,
           text: str) -> CheckResult:
    """A lockstep check's result: failed at update ``k`` (None: passed), a warning instead
    where the effects are not comparable (``reason``)."""
    if reason:
        return CheckResult(name, WARN, gap, k, f"not comparable: {reason}; {text}", worst)
    return CheckResult(name, PASS if k is None else FAIL, gap, k, text, worst)


def check_updates(gaps: StepGaps, reason: str | None, optimizer: str = "") -> CheckResult:
    """``params`` in lockstep: ‖p_c − p_r‖ after every update at most the bound times the
    update's own size ‖p_r − p_start‖, above the rounding floor of the parameters' values
    (‖ulp(p_r)‖: one unit in the last place per element), rounding-noise tensors left out."""
    if gaps.init_gap and gaps.born_equal:
        return CheckResult("params", FAIL, None, 0,
                           f"the weights update 0's step started from differ (max|Δp|/max|p| "
                           f"{gaps.init_gap:.3g}) though they were the same when the optimizers "
                           "were made: the candidate changed them in place before its first "
                           "step (weight decay, a clamp or a copy by hand, once per "
                           "micro-batch?)")
    if gaps.init_gap:
        return CheckResult("params", FAIL, None, 0,
                           f"the runs start from different weights (max|Δp|/max|p| "
                           f"{gaps.init_gap:.3g} before update 0): seed the model's "
                           "initialisation the same way in both commands")
    if not len(gaps.steps):
        return CheckResult("params", SKIP, None, None, f"no update compared: {_lead(gaps)}")
    bound, source = bound_of(gaps)
    noise = rounding_noise(gaps, bound)
    keep = ~noise
    diff, size, ulp = (_norms(gaps, keep, c) for c in (PARAM_DIFF, UPDATE_REF, ULP))
    # Beyond the rounding floor of the values (every element one ulp apart), relative to the
    # update: what is judged against the bound.
    excess = np.maximum(diff - ulp, 0.0) / np.maximum(size, TINY)
    rel = diff / np.maximum(size, TINY)
    found = scales(gaps, keep, (UPDATE_DOT, UPDATE_REF, PARAM_DIFF, UPDATE_ALONG, UPDATE_L1), ULP)
    over = np.flatnonzero(~(excess <= bound.update) | _beyond_scale(found, bound))
    moved = size > 0
    worst = float(np.max(np.where(moved, excess, 0.0), initial=0.0))
    along = float(np.max(np.abs(found[0]), initial=0.0))
    what = "‖Δp‖/‖update‖ (the parameters after the update, relative to the update's size)"
    limit = f"{bound.update:g} (the bound for {source})"
    named = _noise_text(gaps, noise, bound, optimizer) + _coordinates_text(gaps, optimizer)
    if not len(over):
        return _ended("params", None, float(np.max(diff)), worst, reason,
                      f"{_lead(gaps)}: max {what} "
                      f"{float(np.max(np.where(moved, rel, 0.0), initial=0.0)):.3g}, of which "
                      f"at most {worst:.3g} ≤ {limit} beyond the rounding floor of the "
                      f"parameters' values, over {plural(len(rel), 'update')}, along the "
                      f"reference's own update at most {along:.2g} of it ≤ {bound.scale:g}"
                      f"{named}")
    i = int(over[0])
    k = int(gaps.steps[i])
    scaled = _scaled_text(gaps, i, found, bound, "update")
    figures = (f"{what} {rel[i]:.3g} at update {k}, {excess[i]:.3g} beyond the rounding floor"
               f"{' > ' if excess[i] > bound.update else ' within '}{limit}, from the same "
               f"state ({diff[i]:.3g} apart, the update {size[i]:.3g}, the floor {ulp[i]:.3g})")
    text = (f"{scaled + '; ' if scaled else ''}{figures}: "
            f"{_worst_tensor(gaps, i, keep, PARAM_DIFF, UPDATE_REF)}")
    return _ended("params", k, float(diff[i]), worst, reason,
                  f"{_lead(gaps)}: {text}{_beyond(gaps.steps[over])}{named}")


def _coordinates_text(gaps: StepGaps, optimizer: str) -> str:
    """The tensors some of whose coordinates got only rounding noise as a gradient (left out
    of the parameters' columns by the candidate), named with how many."""
    counts = np.max(gaps.gaps[:, :, NOISE], axis=0, initial=0.0)
    tensors = np.flatnonzero(counts > 0)
    if not len(tensors):
        return ""
    sized = len(gaps.sizes) == len(gaps.names)
    shown = ", ".join(f"{gaps.names[t]} {int(counts[t])}"
                      + (f" of {gaps.sizes[t]}" if sized else "") for t in tensors[:4])
    more = f" and {len(tensors) - 4} more tensors" if len(tensors) > 4 else ""
    whose = f"{optimizer}'s steps" if optimizer else "the steps"
    return (f"; coordinates whose gradient is rounding noise (tiny against their tensor's "
            f"largest, and unshared by the runs: as the key-bias slice of a fused qkv), at most "
            f"at one update: {shown}{more}: {whose} on them are not compared")


def moved(gaps: StepGaps) -> tuple[int, int]:
    """Updates at which the reference's parameters moved, and at which its gradient was not
    zero."""
    g = gaps.gaps
    return (int(np.sum(np.sum(g[:, :, UPDATE_REF], axis=1) > 0)),
            int(np.sum(np.sum(g[:, :, GRAD_REF], axis=1) > 0)))


def every_rank(results: list[CheckResult]) -> CheckResult:
    """One check of a candidate of several ranks, each judged in lockstep on its own: the
    rank that failed first (the lowest of those that failed at the same update), else rank
    0's, said to hold for all."""
    if len(results) == 1:
        return results[0]
    failed = [(r.first_divergence if r.first_divergence is not None else 1 << 62, rank, r)
              for rank, r in enumerate(results) if r.status == FAIL]
    if failed:
        _, rank, result = min(failed, key=lambda f: (f[0], f[1]))
        return replace(result, detail=f"rank {rank} of {len(results)}: {result.detail}")
    return replace(results[0], detail=f"{results[0].detail}; the same judged on each of the "
                                      f"{len(results)} ranks")
