"""The effects, judged against the training's own noise: parameters and loss per update
(relative, in lockstep, against a twin reference's drift, or as jump or drift for recorded
runs) and the final metrics."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from lrcheck.checks.causes import check_data, check_weights
from lrcheck.checks.lr import check_lr
from lrcheck.checks.status import FAIL, JUDGED_UP_TO, PASS, SKIP, TINY, WARN, CheckResult
from lrcheck.plan.judging import Judging, judging_mode
from lrcheck.spec import Tolerances
from lrcheck.trace import RunTrace
from lrcheck.words import plural


def relative(name: str, diff: np.ndarray, scale: np.ndarray, tol: float, reason: str | None,
              steps: np.ndarray | None = None, what: str = "relative") -> CheckResult:
    """``diff[k]``, the largest absolute difference at update k, relative to ``scale[k]``;
    ``steps[k]`` (default k) names update k; ``what`` names the ratio in the detail."""
    n = len(diff)
    if n == 0:
        return CheckResult(name, SKIP, None, None, "no updates to compare")
    rel = diff / np.maximum(scale, TINY)
    steps = np.arange(n) if steps is None else steps
    worst_abs, worst_rel = float(diff.max()), float(rel.max())
    over = np.flatnonzero(~(rel <= tol))  # NaN (a run that diverged) fails too
    if not len(over):
        return CheckResult(name, PASS, worst_abs, None,
                           f"max {what} {worst_rel:.3g} ≤ {tol:g} over {plural(n, 'update')}",
                           worst_rel)
    i = int(over[0])
    k = int(steps[i])
    if not np.isfinite(rel[i]):
        measured = f"not finite (NaN or inf) at update {k}"
    else:
        measured = f"{what} {rel[i]:.3g} > {tol:g} at update {k}; max {what} {worst_rel:.3g}"
    if reason:
        return CheckResult(name, WARN, worst_abs, k, f"not comparable: {reason}; {measured}",
                           worst_rel)
    return CheckResult(name, FAIL, worst_abs, k, measured, worst_rel)


# Parameter values the params check holds at once: its working memory is one buffer of 2 MiB
# beside the snapshots themselves, which is all the memory a comparison's recording needs, and
# the buffer stays in the CPU's cache (a chunk of 256 snapshots of digits' MLP, 10 MB a
# temporary, made the check four times slower).
PARAM_CHUNK = 1 << 18


def params_gap(ref: RunTrace, cand: RunTrace) -> tuple[np.ndarray, np.ndarray]:
    """Per update, ``max|Δp|`` over all parameters and ``max|p_ref|``."""
    n = min(len(ref.params), len(cand.params))
    diff, scale = np.empty(n), np.empty(n)
    step = max(1, PARAM_CHUNK // max(1, ref.params.shape[1]))
    buffer = np.empty((min(n, step), ref.params.shape[1]))
    for start in range(0, n, step):
        rows = slice(start, min(n, start + step))
        work = buffer[:rows.stop - start]
        a = ref.params[rows].astype(np.float64, copy=False)
        b = cand.params[rows].astype(np.float64, copy=False)
        np.abs(np.subtract(b, a, out=work), out=work)
        np.max(work, axis=1, initial=0.0, out=diff[rows])
        np.max(np.abs(a, out=work), axis=1, initial=0.0, out=scale[rows])
    return diff, scale


# A cross-entropy near 0 is the difference of a logit and a log-sum-exp, which keeps only their
# absolute precision: relative to a loss that has fallen to 1e-5, float32's rounding alone is
# 1e-2 (measured: bs 2 x 2, 20 epochs). The loss check's scale is therefore the loss, or this
# fraction of the run's first loss where the loss has fallen below that.
LOSS_SCALE_FLOOR = 1e-2


def loss_scale(losses: np.ndarray) -> np.ndarray:
    """``|loss|`` per update, at least ``LOSS_SCALE_FLOOR`` times the first finite one."""
    finite = np.abs(losses[np.isfinite(losses)])
    floor = LOSS_SCALE_FLOOR * float(finite[0]) if len(finite) else 0.0
    return np.asarray(np.maximum(np.abs(losses), floor))


def loss_gap(ref: RunTrace, cand: RunTrace) -> tuple[np.ndarray, np.ndarray]:
    """Per update, ``|Δloss|`` and the loss's scale (``loss_scale``)."""
    a, b = ref.losses(), cand.losses()
    n = min(len(a), len(b))
    return np.abs(b[:n] - a[:n]), loss_scale(a[:n])


Gap = Callable[[RunTrace, RunTrace], tuple[np.ndarray, np.ndarray]]


def check_params(ref: RunTrace, cand: RunTrace, tol: float, reason: str | None,
                 twin: RunTrace | None = None, causes: Sequence[CheckResult] = ()) -> CheckResult:
    """After every update: ``max|Δp| / max|p_ref|`` over all parameters, at most ``tol`` — or,
    with the reference's ``twin``, within the noise floor (``check_effect``)."""
    return check_effect("params", params_gap, ref, cand, tol, reason, twin, causes)


def check_loss(ref: RunTrace, cand: RunTrace, tol: float, reason: str | None,
               twin: RunTrace | None = None, causes: Sequence[CheckResult] = ()) -> CheckResult:
    """Per-update training loss, ``|Δloss| / |loss_ref|`` at most ``tol`` (below 1/100 of the
    first loss, relative to that: ``loss_scale``) — or, with the reference's ``twin``, within
    the noise floor (``check_effect``)."""
    return check_effect("loss", loss_gap, ref, cand, tol, reason, twin, causes)


# Against the noise floor: the candidate's gap to the reference may be up to FLOOR_FACTOR times
# the twin's own gap, the largest the twin's has been up to that update (drift comes in bursts).
FLOOR_FACTOR = 10.0
# A twin's gap beyond this: the two trainings have decorrelated, and what they do from there on
# (the gaps of later updates, the final metrics) tells nothing about the candidate.
DECORRELATED = 0.1
# Without a floor (recorded runs): a gap beyond the tolerance that grew by more than JUMP_FACTOR
# in one update entered at that update; one that grew less is drift.
JUMP_FACTOR = 100.0


def check_effect(name: str, gap: Gap, ref: RunTrace, cand: RunTrace, tol: float,
                 reason: str | None, twin: RunTrace | None,
                 causes: Sequence[CheckResult] = ()) -> CheckResult:
    """An effect (``params`` or ``loss``), per update, relative to the reference, as the pair's
    ``plan.judging.judging_mode`` says.

    In lockstep (``cand.lockstep``: each candidate update started from the reference's state)
    the gap is one update's rounding, and must be within ``tol``; a pair that could run so but
    did not (hand-made traces, a reference without its states) keeps the plain failure.
    Free-running, two correct trainings drift apart from the rounding level at a rate the
    training sets; with the reference's ``twin`` (the same run summed in another order), a gap
    beyond ``tol`` passes as drift while within ``FLOOR_FACTOR`` times the twin's own, and fails
    where it is not. Without a twin, a failed cause of ``causes`` at or before the gap is why
    none is needed (``needs_floor``), and the detail says so."""
    diff, scale = gap(ref, cand)
    result = relative(name, diff, scale, tol, reason)
    if cand.lockstep:
        return replace(result, detail=f"lockstep ({cand.lockstep} updates started from the "
                                      f"reference's state): {result.detail}")
    if result.status != FAIL:
        return result
    if twin is None:
        if ref.spec is None or cand.spec is None or (
                judging_mode(ref.spec, cand.spec) is Judging.LOCKSTEP):
            return result  # hand-made traces, or a reference cached without its states
        cause = _cause_before(result, causes)
        if cause is not None:
            return replace(result, detail=f"{result.detail}; free-running, with no noise floor "
                                          f"measured, none being needed: {cause.name} already "
                                          f"differs at update {cause.first_divergence}")
        return replace(result, detail=f"{result.detail}; free-running, with no noise floor "
                                      "measured (--fast, or a framework that orders its data "
                                      "itself), so this may be rounding drift: without --fast "
                                      "a twin of the reference tells")
    t_diff, t_scale = gap(ref, twin)
    return against_twin(result, diff / np.maximum(scale, TINY),
                         t_diff / np.maximum(t_scale, TINY), tol)


def _cause_before(result: CheckResult, causes: Sequence[CheckResult]) -> CheckResult | None:
    """The first of ``causes`` that fails at or before ``result``'s first divergence."""
    k = result.first_divergence
    failed = [c for c in causes if c.status == FAIL and c.first_divergence is not None
              and k is not None and c.first_divergence <= k]
    return min(failed, key=lambda c: c.first_divergence or 0, default=None)


# What the twin is, in the words of the details: lrcheck's own loop's, and a recorded command's.
TWIN_OWN = ("the twin is the reference with its samples summed in another order and its initial "
            "weights one unit in the last place apart")
TWIN_COMMAND = ("the twin is the reference command run again, its parameters nudged by one unit "
                "in the last place at its first optimizer step")


def against_twin(result: CheckResult, rel: np.ndarray, twin_rel: np.ndarray,
                  tol: float, steps: np.ndarray | None = None,
                  twin: str = TWIN_OWN, total: int | None = None) -> CheckResult:
    """A failed effect ``result`` judged again against the noise floor: ``rel``, the
    candidate's relative gap per update, against ``twin_rel``, the twin reference's own
    (``steps``: the updates they were measured at, default 0, 1, …; ``twin``: what the twin is,
    for the detail; ``total``: the run's updates, default the last measured + 1)."""
    name = result.name
    n = min(len(rel), len(twin_rel))
    at_step = np.arange(n) if steps is None else np.asarray(steps)[:n]
    floor = np.maximum.accumulate(np.nan_to_num(twin_rel[:n], nan=0.0, posinf=0.0))
    rel = rel[:n]
    allowed = np.maximum(tol, FLOOR_FACTOR * floor)
    over = np.flatnonzero(~(rel <= allowed) | ~np.isfinite(rel))  # a run that diverged fails
    beyond = np.flatnonzero(rel > tol)
    start = int(beyond[0]) if len(beyond) else 0
    worst = int(np.nanargmax(rel)) if len(rel) else 0
    if not len(over):
        ratios = rel[beyond] / np.maximum(floor[beyond], TINY)
        at = int(beyond[int(np.argmax(ratios))])
        lost = np.flatnonzero(floor >= DECORRELATED)
        if len(lost):
            j = int(lost[0])
            early = beyond[beyond < j]
            most = int(early[np.argmax(rel[early] / np.maximum(floor[early], TINY))]) \
                if len(early) else None
            drifted = ("0× the twin's own" if most is None else
                       _times(rel[most], floor[most], ".2g", "the twin's own"))
            return CheckResult(name, WARN, result.max_abs_diff, int(at_step[j]),
                               f"{JUDGED_UP_TO} {int(at_step[j])} of "
                               f"{total or int(at_step[-1]) + 1}: the twin decorrelated there (it "
                               f"drifted {floor[j]:.3g} apart; {twin}), so later gaps cannot be "
                               f"judged; up to there the candidate drifted at most "
                               f"{drifted} (the most allowed is {FLOOR_FACTOR:g}×)",
                               result.max_rel_diff)
        return CheckResult(name, PASS, result.max_abs_diff, None,
                           f"numerical drift: from {rel[start]:.3g} at update "
                           f"{int(at_step[start])} (the first beyond {tol:g}) to "
                           f"{rel[worst]:.3g} at update {int(at_step[worst])}, at most "
                           f"{_times(rel[at], floor[at], '.2g')} (update "
                           f"{int(at_step[at])}: {rel[at]:.3g} against {floor[at]:.3g}; the most "
                           f"allowed is {FLOOR_FACTOR:g}×); {twin}", result.max_rel_diff)
    k = int(over[0])
    step = int(at_step[k])
    if not np.isfinite(rel[k]):
        measured = f"not finite (NaN or inf) at update {step}"
    else:
        measured = (f"relative {rel[k]:.3g} at update {step}, "
                    f"{_times(rel[k], floor[k], '.3g')} there "
                    f"({floor[k]:.3g}; the most allowed is {FLOOR_FACTOR:g}×): more than "
                    f"rounding; {twin}")
    return CheckResult(name, FAIL, result.max_abs_diff, step, measured, result.max_rel_diff)


def _times(value: float, floor: float, digits: str,
           what: str = "the twin reference's own drift") -> str:
    """``value`` against the twin's drift ``floor`` in words: "2.1× the twin reference's own
    drift", or, where the twin did not drift at all, that, not a ratio against zero."""
    if floor <= TINY:
        return "drift where the twin reference had none"
    return f"{value / floor:{digits}}× {what}"


def needs_floor(ref: RunTrace, cand: RunTrace, tol: Tolerances) -> bool:
    """Whether judging ``params`` and ``loss`` needs the noise floor (``runner.pair`` trains the
    reference's twin only then): an effect goes beyond its tolerance at some update, and no
    cause (data, weights, LR) differs at or before it — where one does, the effect is put down
    to that cause and the verdict is a failure anyway."""
    beyond = []
    for gap, limit in ((params_gap, tol.params), (loss_gap, tol.loss)):
        diff, scale = gap(ref, cand)
        over = np.flatnonzero(~(diff / np.maximum(scale, TINY) <= limit))
        if len(over):
            beyond.append(int(over[0]))
    if not beyond:
        return False
    causes = [check_data(ref, cand), check_weights(ref, cand), check_lr(ref, cand, tol.lr)]
    first = [c.first_divergence for c in causes
             if c.status == FAIL and c.first_divergence is not None]
    return not first or min(first) > min(beyond)


def jump_or_drift(result: CheckResult, diff: np.ndarray, scale: np.ndarray, tol: float,
                  steps: np.ndarray) -> CheckResult:
    """A failed effect of two runs with no noise floor (recorded files): failed where its gap
    jumped by more than ``JUMP_FACTOR`` in one update (``steps``: the updates' names) — the
    first such beyond ``tol`` — else a warning that it grew smoothly, as drift does."""
    if result.status != FAIL:
        return result
    rel = diff / np.maximum(scale, TINY)
    before = np.concatenate([[0.0], rel[:-1]])
    jumped = np.flatnonzero(~(rel <= tol) & ~(rel <= JUMP_FACTOR * np.maximum(before, TINY)))
    beyond = np.flatnonzero(~(rel <= tol))
    if len(jumped):
        i = int(jumped[0])
        k = int(steps[i])
        return replace(result, first_divergence=k,
                       detail=f"{result.detail}; it jumped at update {k}, from {before[i]:.3g} "
                              f"to {rel[i]:.3g} in one update: a difference that entered there, "
                              "not rounding drift")
    i, worst = int(beyond[0]), int(np.argmax(rel))
    return replace(result, status=WARN,
                   detail=f"numerical drift, not a failure: the gap grew smoothly, from "
                          f"{rel[i]:.3g} at update {int(steps[i])} (the first beyond {tol:g}) to "
                          f"{rel[worst]:.3g} at update {int(steps[worst])}, never more than "
                          f"{JUMP_FACTOR:g}× in one update, as two trainings that differ only "
                          "in the order of their sums do (recorded runs carry no noise floor)")


def _metrics_gap(ref: RunTrace, other: RunTrace) -> float | None:
    r, c = ref.metrics, other.metrics
    if r is None or c is None:
        return None
    return max(abs(c.accuracy - r.accuracy), abs(c.f1_macro - r.f1_macro))


def check_metrics(ref: RunTrace, cand: RunTrace, tol: float, reason: str | None,
                  twin: RunTrace | None = None) -> CheckResult:
    """Final eval accuracy and macro-F1 within ``tol`` (absolute). In lockstep the candidate's
    final model is the reference's before its last update plus that update (every update's
    effect is judged by ``params`` and ``loss``). With the reference's ``twin``, a gap within
    ``FLOOR_FACTOR`` times the twin's own passes; beyond it, where the twin's parameters drifted
    ``DECORRELATED`` apart, the metrics of two decorrelated trainings are not comparable."""
    r, c = ref.metrics, cand.metrics
    worst = _metrics_gap(ref, cand)
    if r is None or c is None or worst is None:
        return CheckResult("metrics", SKIP, None, None, "a run has no evaluation")
    d_acc, d_f1 = c.accuracy - r.accuracy, c.f1_macro - r.f1_macro
    text = (f"accuracy {r.accuracy:.4f} → {c.accuracy:.4f} ({d_acc:+.4f}), "
            f"macro-F1 {r.f1_macro:.4f} → {c.f1_macro:.4f} ({d_f1:+.4f})")
    if cand.lockstep:
        text = ("lockstep (the candidate's final model is the reference's before the last "
                f"update, plus the candidate's last update): {text}")
    if worst <= tol:
        return CheckResult("metrics", PASS, worst, None, f"{text}; ≤ {tol:g}")
    if reason:
        return CheckResult("metrics", WARN, worst, None, f"not comparable: {reason}; {text}")
    floor = None if twin is None else _metrics_gap(ref, twin)
    if twin is not None and floor is not None:
        if worst <= FLOOR_FACTOR * floor:
            return CheckResult("metrics", PASS, worst, None,
                               f"{text}; within {worst / floor:.2g}× of the twin reference's "
                               f"own ({floor:.4f}; the most allowed is {FLOOR_FACTOR:g}×)")
        diff, scale = params_gap(ref, twin)
        drift = float(np.max(diff / np.maximum(scale, TINY), initial=0.0))
        if drift >= DECORRELATED:
            return CheckResult("metrics", WARN, worst, None,
                               f"not comparable: drift decorrelated the trainings (the twin "
                               f"reference's parameters drifted {drift:.2g} apart, its metrics "
                               f"{floor:.4f}); {text}")
    return CheckResult("metrics", FAIL, worst, None, f"{text}; beyond tolerance {tol:g}")
