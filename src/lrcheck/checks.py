"""The checks of DESIGN.md as pure functions: (reference trace, candidate trace, tolerances) →
results. Nothing here trains, prints or writes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lrcheck.diagnosis import data_diff, data_text, diagnose
from lrcheck.plan.windows import Window, fraction_text, window_ids
from lrcheck.spec import Tolerances
from lrcheck.trace import RunTrace, SkippedStep
from lrcheck.words import plural

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
CHECK_NAMES = ("updates", "data", "weights", "lr", "params", "loss", "metrics")
# The weights check: how closely two measured weights of a sample's loss must agree, relative,
# by the dtype the backward pass ran in. Rounding alone leaves a few units in the last place
# (n/N then 1/n against 1/N); a real difference is at least one sample in a window: 1/E.
WEIGHT_RTOL = {"float64": 1e-12, "float32": 1e-6}
_TINY = 1e-300


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str
    max_abs_diff: float | None
    first_divergence: int | None
    detail: str
    max_rel_diff: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "max_abs_diff": self.max_abs_diff,
                "first_divergence": self.first_divergence, "detail": self.detail,
                "max_rel_diff": self.max_rel_diff}


def not_comparable_reason(ref: RunTrace, cand: RunTrace) -> str | None:
    """Why the two runs cannot train alike even with a correct schedule, or None."""
    r, c = ref.spec, cand.spec
    if r is None or c is None:  # runs read from files: nothing known about their layers
        return None
    layers = set(ref.not_comparable) | set(cand.not_comparable)
    if any("BatchNorm" in name for name in layers) and (r.bs, r.world) != (c.bs, c.world):
        return (f"BatchNorm normalises over each forward's samples: {c.bs} per forward in the "
                f"candidate, {r.bs} in the reference")
    if (any("Dropout" in name for name in layers)
            and (r.bs, r.accum, r.world) != (c.bs, c.accum, c.world)):
        return "dropout masks are drawn per forward and differ between the runs"
    return None


def check_updates(ref: RunTrace, cand: RunTrace) -> CheckResult:
    if ref.stopped and cand.stopped:  # the schedule fails with and without accumulation
        n_ref, n_cand = len(ref.updates), len(cand.updates)
        if ref.stopped == cand.stopped:
            detail = (f"both runs stopped, the reference after {n_ref} of "
                      f"{plural(ref.planned_updates, 'update')} and the candidate after {n_cand} "
                      f"of {cand.planned_updates}: {ref.stopped}")
        else:
            detail = (f"both runs stopped: the reference after {n_ref} of "
                      f"{plural(ref.planned_updates, 'update')} ({ref.stopped}), the candidate "
                      f"after {n_cand} of {plural(cand.planned_updates, 'update')} "
                      f"({cand.stopped})")
        return CheckResult("updates", FAIL, float(abs(n_ref - n_cand)), min(n_ref, n_cand),
                           detail)
    for who, trace in (("candidate", cand), ("reference", ref)):
        if trace.stopped:
            return CheckResult("updates", FAIL, None, len(trace.updates),
                               f"{who} stopped after {len(trace.updates)} of "
                               f"{plural(trace.planned_updates, 'update')}: {trace.stopped}")
    n_ref, n_cand = len(ref.updates), len(cand.updates)
    if n_ref == n_cand:
        return CheckResult("updates", PASS, 0.0, None, f"{n_ref} in both runs")
    return CheckResult("updates", FAIL, float(abs(n_ref - n_cand)), min(n_ref, n_cand),
                       f"reference made {plural(n_ref, 'optimizer update')}, candidate {n_cand}")


def check_data(ref: RunTrace, cand: RunTrace) -> CheckResult:
    """The samples behind update k — a multiset of ids over every micro-batch and rank, as fed —
    are the same in both runs, for every k; ``skip`` when a run has no windows (read from a
    file, or a schedule stepped without a model)."""
    if ref.windows is None or cand.windows is None:
        who = "the reference" if ref.windows is None else "the candidate"
        return CheckResult("data", SKIP, None, None,
                           f"not recorded: {who} has no samples per update")
    diff = data_diff(ref.windows, cand.windows, ref.updates, cand.updates)
    if diff.seen is None:
        return CheckResult("data", PASS, 0.0, None,
                           f"the same samples behind all {plural(diff.compared, 'update')}")
    if not len(diff.differing):  # the same samples as far as both go; one run goes on
        return CheckResult("data", FAIL, None, diff.compared, data_text(diff))
    k = int(diff.differing[0])
    detail = data_text(diff, resumed=cand.resumed is not None and k == cand.resumed.update)
    # max |Δ|: how many samples differ at the first update that differs.
    return CheckResult("data", FAIL, float(len(diff.only_cand) + len(diff.only_ref)), k, detail)


def check_weights(ref: RunTrace, cand: RunTrace) -> CheckResult:
    """The weight each sample's loss carried in update k's gradient — measured in the backward
    pass, summed over the micro-batches and ranks that fed it — is the same in both runs, for
    every k, up to the rounding of the dtype (``WEIGHT_RTOL``). ``skip`` where a run has no
    measured weights."""
    if ref.windows is None or cand.windows is None:
        who = "the reference" if ref.windows is None else "the candidate"
        return CheckResult("weights", SKIP, None, None,
                           f"not recorded: {who} has no samples per update")
    spec = ref.spec or cand.spec
    dtype = spec.dtype if spec is not None else "float64"
    tol = WEIGHT_RTOL.get(dtype, WEIGHT_RTOL["float32"])
    n = min(len(ref.windows), len(cand.windows), len(ref.updates), len(cand.updates))
    # Every (update, sample) of both runs at once, on the updates both measured; only the first
    # update that differs is looked at one by one, for its message.
    a, b = _flat_weights(ref.windows[:n]), _flat_weights(cand.windows[:n])
    common = a[2] & b[2]
    a_keys, a_w = _keep(a, common)
    b_keys, b_w = _keep(b, common)
    compared = int(common.sum())
    if not compared:
        return CheckResult("weights", SKIP, None, None,
                           "not measured: no update has its weights measured in both runs")
    if not np.array_equal(a_keys, b_keys):
        m = min(len(a_keys), len(b_keys))
        at = np.flatnonzero(a_keys[:m] != b_keys[:m])
        i = int(at[0]) if len(at) else m
        k = int(min(a_keys[min(i, len(a_keys) - 1)], b_keys[min(i, len(b_keys) - 1)]) // _SLOTS)
        return CheckResult("weights", FAIL, None, k,
                           f"first differ at update {k}, which was fed different samples "
                           "from the reference's: see data")
    rel = np.abs(b_w - a_w) / np.maximum(np.abs(a_w), _TINY)
    worst = float(rel.max(initial=0.0))
    bad = np.flatnonzero(~(rel <= tol))
    if len(bad):
        i = int(bad[0])
        k, sample = int(a_keys[i] // _SLOTS), int(a_keys[i] % _SLOTS)
        here = float(rel[a_keys // _SLOTS == k].max())
        return CheckResult("weights", FAIL, here, k,
                           f"first differ at update {k}: sample {sample}'s loss weighted "
                           f"{b_w[i]:.6g} in the candidate, {a_w[i]:.6g} in the reference "
                           f"(relative {rel[i]:.3g} > {tol:g})", here)
    return CheckResult("weights", PASS, worst, None,
                       f"the same weight on each sample's loss at all "
                       f"{plural(compared, 'update')}, measured in the backward pass (max "
                       f"relative {worst:.3g} ≤ {tol:g})", worst)


# (update, sample id) as one key: update · _SLOTS + id.
_SLOTS = 1 << 32


def _flat_weights(windows: Sequence[Window]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample fed in ``windows``: the key (update, id), sorted and distinct, with the total
    weight of its loss; and per update whether all its weights were measured."""
    ids, weights, updates = [], [], []
    measured = np.ones(len(windows), dtype=bool)
    for k, window in enumerate(windows):
        shares = [m.per_sample() for m in window]
        got = [w for w in shares if w is not None]
        if len(got) < len(shares):
            measured[k] = False
            continue
        for m, w in zip(window, got, strict=True):
            ids.append(m.ids)
            weights.append(w)
            updates.append(np.full(len(m.ids), k, dtype=np.int64))
    if not ids:
        return np.empty(0, dtype=np.int64), np.empty(0), measured
    keys = np.concatenate(updates) * _SLOTS + np.concatenate(ids).astype(np.int64)
    distinct, where = np.unique(keys, return_inverse=True)
    return distinct, np.bincount(where, weights=np.concatenate(weights)), measured


def _keep(flat: tuple[np.ndarray, np.ndarray, np.ndarray],
          updates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys and weights of ``flat`` on the ``updates`` (a mask) given."""
    keys, weights, _ = flat
    keep = updates[keys // _SLOTS] if len(keys) else np.empty(0, dtype=bool)
    return keys[keep], weights[keep]


def skipped_updates(trace: RunTrace) -> list[SkippedStep]:
    """The updates whose optimizer step the GradScaler skipped, with the scheduler steps made
    during each (``--amp fp16``); empty otherwise."""
    return list(trace.skipped or [])


def _applied(trace: RunTrace) -> np.ndarray:
    """Indices of the updates whose optimizer step was applied."""
    skipped = {s.update for s in skipped_updates(trace)}
    return np.array([k for k in range(len(trace.updates)) if k not in skipped], dtype=np.int64)


def check_lr(ref: RunTrace, cand: RunTrace, tol: float,
             pairs: tuple[np.ndarray, np.ndarray] | None = None) -> CheckResult:
    """LR of update k, every group, within ``tol·max(1, |lr_ref|)``. ``pairs`` (reference
    indices, candidate indices) compares those updates with each other instead of update k with
    update k, and names updates by their reference index (``lrcheck diff``). Runs with skipped
    optimizer steps are aligned by applied updates, named by the candidate's index."""
    lengths = (len(ref.updates), len(cand.updates))
    if pairs is not None:
        ref_at, cand_at = pairs
        named, lengths = ref_at, (len(ref_at), len(ref_at))
    elif skipped_updates(ref) or skipped_updates(cand):
        ref_at, cand_at = _applied(ref), _applied(cand)
        lengths = (len(ref_at), len(cand_at))
        n = min(lengths)
        ref_at, cand_at = ref_at[:n], cand_at[:n]
        named = cand_at
    else:
        n = min(lengths)
        ref_at = cand_at = named = np.arange(n)
    n = len(ref_at)
    if n == 0:
        return CheckResult("lr", SKIP, None, None, "no updates to compare")
    a, b = ref.lrs()[ref_at], cand.lrs()[cand_at]
    if a.shape != b.shape:
        return CheckResult("lr", FAIL, None, 0,
                           f"reference has {plural(a.shape[1], 'param group')}, "
                           f"candidate {b.shape[1]}")
    diff = np.abs(b - a)
    bad = np.argwhere(~(diff <= tol * np.maximum(1.0, np.abs(a))))  # NaN fails too
    worst = float(diff.max())
    if len(bad):
        i, g = (int(v) for v in bad[0])
        k = int(named[i])
        group = f" (param group {g})" if a.shape[1] > 1 else ""
        if not (np.isfinite(a[i, g]) or np.isfinite(b[i, g])):
            return CheckResult("lr", FAIL, worst, k,
                               f"the LR is not finite in both runs from update {k}{group}: "
                               f"{a[i, g]:.10g} in the reference, {b[i, g]:.10g} in the candidate")
        return CheckResult("lr", FAIL, worst, k,
                           f"first differs at update {k}{group}: reference {a[i, g]:.10g}, "
                           f"candidate {b[i, g]:.10g}; max |ΔLR| {worst:.3g}")
    if lengths[0] != lengths[1]:
        return CheckResult("lr", FAIL, worst, n,
                           f"equal for the first {plural(n, 'update')}, then only one run goes "
                           f"on ({lengths[0]} vs {lengths[1]} updates)")
    return CheckResult("lr", PASS, worst, None,
                       f"equal at all {plural(n, 'update')} "
                       f"({plural(a.shape[1], 'param group')})")


def _relative(name: str, diff: np.ndarray, scale: np.ndarray, tol: float, reason: str | None,
              steps: np.ndarray | None = None, what: str = "relative") -> CheckResult:
    """``diff[k]``, the largest absolute difference at update k, relative to ``scale[k]``;
    ``steps[k]`` (default k) names update k; ``what`` names the ratio in the detail."""
    n = len(diff)
    if n == 0:
        return CheckResult(name, SKIP, None, None, "no updates to compare")
    rel = diff / np.maximum(scale, _TINY)
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
                 twin: RunTrace | None = None) -> CheckResult:
    """After every update: ``max|Δp| / max|p_ref|`` over all parameters, at most ``tol`` — or,
    with the reference's ``twin``, within the noise floor (``check_effect``)."""
    return check_effect("params", params_gap, ref, cand, tol, reason, twin)


def check_loss(ref: RunTrace, cand: RunTrace, tol: float, reason: str | None,
               twin: RunTrace | None = None) -> CheckResult:
    """Per-update training loss, ``|Δloss| / |loss_ref|`` at most ``tol`` (below 1/100 of the
    first loss, relative to that: ``loss_scale``) — or, with the reference's ``twin``, within
    the noise floor (``check_effect``)."""
    return check_effect("loss", loss_gap, ref, cand, tol, reason, twin)


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
                 reason: str | None, twin: RunTrace | None) -> CheckResult:
    """An effect (``params`` or ``loss``), per update, relative to the reference.

    In lockstep (``cand.lockstep``: each candidate update started from the reference's state)
    the gap is one update's rounding, and must be within ``tol``. Free-running, two correct
    trainings drift apart from the rounding level at a rate the training sets; with the
    reference's ``twin`` (the same run summed in another order), a gap beyond ``tol`` passes as
    drift while within ``FLOOR_FACTOR`` times the twin's own, and fails where it is not."""
    diff, scale = gap(ref, cand)
    result = _relative(name, diff, scale, tol, reason)
    if cand.lockstep:
        return replace(result, detail=f"lockstep ({cand.lockstep} updates started from the "
                                      f"reference's state): {result.detail}")
    if result.status != FAIL:
        return result
    if twin is None:
        own_loop = ref.spec is None or cand.spec is None or (
            ref.spec.framework == cand.spec.framework == "plain")
        if own_loop:  # hand-made traces, or a reference cached without its states
            return result
        return replace(result, detail=f"{result.detail}; free-running, with no noise floor "
                                      "measured (--fast, or a framework that orders its data "
                                      "itself), so this may be rounding drift: without --fast "
                                      "a twin of the reference tells")
    rel = diff / np.maximum(scale, _TINY)
    t_diff, t_scale = gap(ref, twin)
    n = min(len(rel), len(t_diff))
    floor = np.maximum.accumulate(np.nan_to_num(t_diff[:n] / np.maximum(t_scale[:n], _TINY),
                                                nan=0.0, posinf=0.0))
    rel = rel[:n]
    allowed = np.maximum(tol, FLOOR_FACTOR * floor)
    over = np.flatnonzero(~(rel <= allowed) | ~np.isfinite(rel))  # a run that diverged fails
    beyond = np.flatnonzero(rel > tol)
    start = int(beyond[0]) if len(beyond) else 0
    worst = int(np.nanargmax(rel)) if len(rel) else 0
    if not len(over):
        ratios = rel[beyond] / np.maximum(floor[beyond], _TINY)
        at = int(beyond[int(np.argmax(ratios))])
        lost = np.flatnonzero(floor >= DECORRELATED)
        if len(lost):
            j = int(lost[0])
            early = beyond[beyond < j]
            ratio = (float(np.max(rel[early] / np.maximum(floor[early], _TINY)))
                     if len(early) else 0.0)
            return CheckResult(name, WARN, result.max_abs_diff, j,
                               f"not comparable from update {j} on: the twin reference (summed "
                               "in another order, initial weights one ulp apart) drifted "
                               f"{floor[j]:.3g} apart there, so drift has decorrelated the "
                               f"trainings and later gaps cannot be judged; up to there the "
                               f"candidate drifted at most {ratio:.2g}× the twin's own (the "
                               f"most allowed is {FLOOR_FACTOR:g}×)", result.max_rel_diff)
        return CheckResult(name, PASS, result.max_abs_diff, None,
                           f"numerical drift: from {rel[start]:.3g} at update {start} (the first "
                           f"beyond {tol:g}) to {rel[worst]:.3g} at update {worst}, at most "
                           f"{float(ratios.max()):.2g}× the twin reference's own drift (update "
                           f"{at}: {rel[at]:.3g} against {floor[at]:.3g}; the most allowed is "
                           f"{FLOOR_FACTOR:g}×); the twin is the reference with its samples "
                           "summed in another order and its initial weights one unit in the "
                           "last place apart", result.max_rel_diff)
    k = int(over[0])
    if not np.isfinite(rel[k]):
        measured = f"not finite (NaN or inf) at update {k}"
    else:
        measured = (f"relative {rel[k]:.3g} at update {k}, {rel[k] / max(floor[k], _TINY):.3g}× "
                    f"the twin reference's own drift there ({floor[k]:.3g}; the most allowed "
                    f"is {FLOOR_FACTOR:g}×): more than rounding")
    return CheckResult(name, FAIL, result.max_abs_diff, k, measured, result.max_rel_diff)


def needs_floor(ref: RunTrace, cand: RunTrace, tol: Tolerances) -> bool:
    """Whether judging ``params`` and ``loss`` needs the noise floor (``runner.pair`` trains the
    reference's twin only then): an effect goes beyond its tolerance at some update, and no
    cause (data, weights, LR) differs at or before it — where one does, the effect is put down
    to that cause and the verdict is a failure anyway."""
    beyond = []
    for gap, limit in ((params_gap, tol.params), (loss_gap, tol.loss)):
        diff, scale = gap(ref, cand)
        over = np.flatnonzero(~(diff / np.maximum(scale, _TINY) <= limit))
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
    rel = diff / np.maximum(scale, _TINY)
    before = np.concatenate([[0.0], rel[:-1]])
    jumped = np.flatnonzero(~(rel <= tol) & ~(rel <= JUMP_FACTOR * np.maximum(before, _TINY)))
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
    return max(abs(c["accuracy"] - r["accuracy"]), abs(c["f1_macro"] - r["f1_macro"]))


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
    d_acc, d_f1 = c["accuracy"] - r["accuracy"], c["f1_macro"] - r["f1_macro"]
    text = (f"accuracy {r['accuracy']:.4f} → {c['accuracy']:.4f} ({d_acc:+.4f}), "
            f"macro-F1 {r['f1_macro']:.4f} → {c['f1_macro']:.4f} ({d_f1:+.4f})")
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
        drift = float(np.max(diff / np.maximum(scale, _TINY), initial=0.0))
        if drift >= DECORRELATED:
            return CheckResult("metrics", WARN, worst, None,
                               f"not comparable: drift decorrelated the trainings (the twin "
                               f"reference's parameters drifted {drift:.2g} apart, its metrics "
                               f"{floor:.4f}); {text}")
    return CheckResult("metrics", FAIL, worst, None, f"{text}; beyond tolerance {tol:g}")


def check_skipped_steps(ref: RunTrace, cand: RunTrace) -> CheckResult:
    """On an update whose optimizer step was skipped (non-finite fp16 gradients), the schedule
    must not advance — as Accelerate and DeepSpeed do."""
    skipped = skipped_updates(cand)
    if not skipped:
        return CheckResult("skipped-steps", SKIP, None, None, "no optimizer step was skipped")
    listed = ", ".join(str(s.update) for s in skipped)
    moved = [s for s in skipped if s.scheduler_steps > 0]
    if moved:
        first = moved[0]
        return CheckResult("skipped-steps", FAIL, float(first.scheduler_steps), first.update,
                           f"the scheduler advanced {first.scheduler_steps} step(s) on skipped "
                           f"update {first.update}; skipped updates: {listed}")
    return CheckResult("skipped-steps", PASS, 0.0, None,
                       f"the scheduler held still on every skipped update: {listed}")


def resume_detail(ref: RunTrace, cand: RunTrace, k: int) -> str | None:
    """What the candidate's resume did, when a check first fails at ``k``, the first update after
    it (None otherwise): whether its schedule went on where it stopped (the ``scheduler.step()``
    calls made before update ``k`` in both runs), and whether it was fed the samples the
    uninterrupted run was."""
    if cand.resumed is None or k != cand.resumed.update or k >= min(len(ref.updates),
                                                                    len(cand.updates)):
        return None
    before, steps, first = (ref.updates[k].scheduler_steps, cand.updates[k].scheduler_steps,
                            cand.updates[0].scheduler_steps)
    if before is None or steps is None or first is None:
        return None
    text = f"the candidate resumed before update {k}: "
    if steps == before:
        text += f"its schedule went on where it stopped ({plural(steps, 'scheduler step')})"
    elif steps <= first:
        text += (f"its schedule started again from the beginning ({plural(steps, 'step')} made "
                 f"at update {k}, {before} in the uninterrupted run)")
    else:
        text += (f"its schedule did not go on where it stopped ({plural(steps, 'step')} made at "
                 f"update {k}, {before} in the uninterrupted run)")
    if ref.windows is not None and cand.windows is not None and k < min(len(ref.windows),
                                                                         len(cand.windows)):
        fed = [np.sort(window_ids(w[k])) for w in (ref.windows, cand.windows)]
        if not np.array_equal(fed[0], fed[1]):
            text += ("; it was fed other samples than the uninterrupted run from there (its "
                     "data order did not go on where it stopped either)")
    return text


def _steps_per_update(trace: RunTrace) -> float | None:
    steps = [u.scheduler_steps for u in trace.updates]
    if len(steps) < 2 or steps[0] is None or steps[-1] is None:
        return None
    return (steps[-1] - steps[0]) / (len(steps) - 1)


def schedule_steps_detail(ref: RunTrace, cand: RunTrace, k: int) -> str | None:
    """Why the LRs part at update ``k`` when the schedules stepped differently (None when they
    stepped alike): the ``scheduler.step()`` calls made before update ``k`` in each run, per
    update, and where that puts each run in its schedule's length (the trace's context
    ``total_steps``), in updates."""
    if k >= min(len(ref.updates), len(cand.updates)):
        return None
    before, steps = ref.updates[k].scheduler_steps, cand.updates[k].scheduler_steps
    if before is None or steps is None or before == steps:
        return None
    text = (f"before update {k} the candidate's schedule had stepped "
            f"{plural(steps, 'time')}, the reference's {before}")
    rates = _steps_per_update(ref), _steps_per_update(cand)
    if rates[0] and rates[1] and rates[0] != rates[1]:
        text += f" ({rates[1]:.3g} steps per update against {rates[0]:.3g})"
    lengths = ref.context.get("total_steps"), cand.context.get("total_steps")
    if lengths[0] and lengths[1]:
        ahead = (steps / lengths[1] - before / lengths[0]) * len(ref.updates)
        text += (f"; over schedules of {lengths[1]} and {lengths[0]} steps that puts the "
                 f"candidate {abs(ahead):.3g} update{'' if abs(ahead) == 1 else 's'} "
                 f"{'ahead' if ahead > 0 else 'behind'}")
    return text


def _explain_lr(check: CheckResult, ref: RunTrace, cand: RunTrace) -> CheckResult:
    """A failed ``lr`` check with what its first differing update had behind it: the
    candidate's resume, or schedules that stepped differently."""
    if check.status != FAIL or check.first_divergence is None:
        return check
    k = check.first_divergence
    text = resume_detail(ref, cand, k) or schedule_steps_detail(ref, cand, k)
    return replace(check, detail=f"{check.detail}; {text}") if text else check


def run_checks(ref: RunTrace, cand: RunTrace, tol: Tolerances,
               twin: RunTrace | None = None) -> list[CheckResult]:
    """Every check of the contract, in the order of ``CHECK_NAMES``; ``skipped-steps`` too when
    the runs used a GradScaler (``--amp fp16``)."""
    reason = not_comparable_reason(ref, cand)
    data = check_data(ref, cand)
    lr = _explained_lr(_explain_lr(check_lr(ref, cand, tol.lr), ref, cand), ref, cand)
    weights = _diagnosed(check_weights(ref, cand), ref, cand, [data, lr])
    causes = [data, weights, lr]
    params = _diagnosed(check_params(ref, cand, tol.params, reason, twin), ref, cand, causes)
    checks = [
        check_updates(ref, cand),
        data,
        weights,
        lr,
        params,
        _diagnosed(check_loss(ref, cand, tol.loss, reason, twin), ref, cand, causes, params),
        check_metrics(ref, cand, tol.metrics, reason, twin),
    ]
    if cand.skipped is not None or ref.skipped is not None:
        checks.append(check_skipped_steps(ref, cand))
    return checks


SIMULATED = ("updates", "lr")


def _crossing(lrs: np.ndarray, level: float, start: float = 0,
              rising: bool = True) -> float | None:
    """Where, from update ``start`` on, the LR first reaches (``rising``) or falls below
    ``level``, interpolated between updates; None if it never does."""
    first = int(np.ceil(start))
    hits = np.flatnonzero(lrs[first:] >= level if rising else lrs[first:] < level)
    if not len(hits):
        return None
    k = first + int(hits[0])
    if k == first:
        return float(k)
    before, after = lrs[k - 1], lrs[k]
    return k - 1 + float((level - before) / (after - before)) if after != before else float(k)


def schedule_pace(ref: np.ndarray, cand: np.ndarray) -> str | None:
    """How many times faster or slower the candidate's schedule (group 0) runs, from when each
    LR trace first reaches half the lower of the two peaks — during warmup, where there is one —
    or else first falls below it; None when that cannot tell."""
    if len(ref) == 0 or len(cand) == 0 or min(ref.max(), cand.max()) <= 0:
        return None
    level = 0.5 * min(float(ref.max()), float(cand.max()))
    k_ref, k_cand = _crossing(ref, level), _crossing(cand, level)
    edge = "reaches"
    if not k_ref or k_cand is None:  # no warmup: the LR starts at its peak; watch it fall
        edge = "falls below"
        k_ref = _crossing(ref, level, k_ref or 0, rising=False)
        k_cand = _crossing(cand, level, _crossing(cand, level) or 0, rising=False)
        if not k_ref:
            return None
        if k_cand is None:
            return (f"the reference's LR falls below {level:.3g} at update {k_ref:.0f}, the "
                    f"candidate's never does in its {plural(len(cand), 'update')}: its "
                    f"schedule runs at least {len(cand) / k_ref:.2g}× too slow")
    ratio = (k_ref + 1) / (k_cand + 1)  # updates it took each to get there
    if abs(ratio - 1) < 0.01:
        return None
    pace = f"≈{ratio:.3g}× too fast" if ratio > 1 else f"≈{1 / ratio:.3g}× too slow"
    return (f"the LR {edge} {level:.3g} at update {k_cand:.0f} in the candidate, {k_ref:.0f} in "
            f"the reference: its schedule runs {pace}")


# Offsets of a fraction of an update the ``lr`` detail looks for: -4 to 4 updates by 1/16.
OFFSETS = np.array([d / 16 for d in range(-64, 65) if d])
# The residual it accepts (90th percentile over the updates, relative to the peak LR; linear
# interpolation between updates leaves about this much on a short cosine) and by how much it
# must beat the offset 0.
OFFSET_RTOL, OFFSET_GAIN = 2e-3, 10.0
# Updates the offset search looks at, evenly spaced, however long the schedule.
OFFSET_POINTS = 2000


def lr_offset(ref: np.ndarray, cand: np.ndarray) -> float | None:
    """The constant ``d`` (a multiple of 1/16 within ±4, not 0) such that the candidate's LR at
    update k is the reference's at ``k + d``, linearly interpolated between updates; None when
    no such offset fits (group 0 traces)."""
    n = min(len(ref), len(cand))
    peak = max(float(np.abs(ref).max(initial=0.0)), float(np.abs(cand).max(initial=0.0)))
    if n < 8 or not peak > 0 or not (np.isfinite(ref).all() and np.isfinite(cand).all()):
        return None
    ks = np.unique(np.linspace(0, n - 1, min(n, OFFSET_POINTS)).astype(np.int64))
    at = ks[None, :] + OFFSETS[:, None]
    inside = (at >= 0) & (at <= len(ref) - 1)
    shifted = np.interp(at.ravel(), np.arange(len(ref)), ref).reshape(at.shape)
    residual = np.where(inside, np.abs(cand[ks][None, :] - shifted), np.nan)
    enough = inside.sum(axis=1) >= len(ks) // 2
    if not enough.any():
        return None
    spread = np.full(len(OFFSETS), np.inf)
    spread[enough] = np.nanquantile(residual[enough], 0.9, axis=1)
    best = int(np.argmin(spread))
    base = float(np.quantile(np.abs(cand[ks] - ref[ks]), 0.9))
    if spread[best] <= OFFSET_RTOL * peak and base > OFFSET_GAIN * spread[best]:
        return float(OFFSETS[best])
    return None


def offset_text(d: float) -> str:
    """``the candidate's LR at update k is the reference's at k + 1/2 …``."""
    size = abs(d)
    amount = ("half an update" if size == 0.5 else "one update" if size == 1
              else f"{fraction_text(size)} of an update" if size < 1
              else f"{fraction_text(size)} updates")
    sign = "+" if d > 0 else "−"
    return (f"the candidate's LR at update k is the reference's at k {sign} "
            f"{fraction_text(size)} (interpolated between updates): its schedule runs "
            f"{amount} {'ahead' if d > 0 else 'behind'}")


def _explained_lr(lr: CheckResult, ref: RunTrace, cand: RunTrace, ref_at: Any = slice(None),
                  cand_at: Any = slice(None)) -> CheckResult:
    """A failed ``lr`` check with what the candidate's schedule does (group 0; ``ref_at``/
    ``cand_at``: the updates aligned): an offset of a fraction of an update, or how much faster
    or slower it runs, when that can be told."""
    if lr.status != FAIL:
        return lr
    a, b = ref.lrs()[ref_at, 0], cand.lrs()[cand_at, 0]
    d = lr_offset(a, b)
    why = offset_text(d) if d is not None else schedule_pace(a, b)
    return replace(lr, detail=f"{lr.detail}; {why}") if why else lr


def _diagnosed(result: CheckResult, ref: RunTrace, cand: RunTrace, causes: list[CheckResult],
               params: CheckResult | None = None) -> CheckResult:
    """A failed check with what was special about the update where the runs first part
    (``diagnosis.diagnose``), when both runs have windows. A cause (``causes``: data, weights,
    lr) that differs at an earlier update is the explanation: the diagnosis follows the cause.
    The loss of update k is computed from the parameters after update k - 1: where ``params``
    parted before k, that is the explanation."""
    k = result.first_divergence
    if result.status != FAIL or k is None or ref.windows is None or cand.windows is None:
        return result
    earlier = [c for c in causes if c.status == FAIL and c.first_divergence is not None
               and c.first_divergence < k]
    if earlier:
        first = min(earlier, key=lambda c: c.first_divergence or 0)
        return replace(result, detail=f"{result.detail}; the runs had already parted at update "
                                      f"{first.first_divergence}, where {first.name} first "
                                      f"differs: see {first.name}")
    if (params is not None and params.status == FAIL and params.first_divergence is not None
            and params.first_divergence < k):
        return replace(result, detail=f"{result.detail}; update {k} starts from parameters "
                                      f"that already differ: see params, which part at update "
                                      f"{params.first_divergence}")
    lr = next((c for c in causes if c.name == "lr"), None)
    lr_differs = (lr is not None and lr.status == FAIL and lr.first_divergence is not None
                  and lr.first_divergence <= k)
    why = diagnose(ref.windows, cand.windows, ref.updates, cand.updates, k, lr_differs)
    return replace(result, detail=f"{result.detail}; {why}") if why else result


def schedule_checks(ref: RunTrace, cand: RunTrace, tol: Tolerances) -> list[CheckResult]:
    """The checks that apply to schedules stepped without a model (``lrcheck trace``):
    ``updates`` and ``lr``, the latter saying how much faster or slower the candidate's
    schedule runs when it fails; the others are ``skip``."""
    lr = _explained_lr(check_lr(ref, cand, tol.lr), ref, cand)
    found = {name: CheckResult(name, SKIP, None, None,
                               "not measured: lrcheck trace steps the schedule without a model")
             for name in CHECK_NAMES if name not in SIMULATED}
    found.update(updates=check_updates(ref, cand), lr=lr)
    return [found[name] for name in CHECK_NAMES]


def align(ref: RunTrace, cand: RunTrace) -> tuple[np.ndarray, np.ndarray]:
    """Indices (reference, candidate) of the updates that ended at the same ``samples_seen``."""
    a = np.array([u.samples_seen for u in ref.updates], dtype=np.int64)
    b = np.array([u.samples_seen for u in cand.updates], dtype=np.int64)
    _, ref_at, cand_at = np.intersect1d(a, b, assume_unique=False, return_indices=True)
    return ref_at, cand_at


def check_aligned_updates(ref: RunTrace, cand: RunTrace,
                          pairs: tuple[np.ndarray, np.ndarray]) -> CheckResult:
    """Every update of each run has one in the other at the same ``samples_seen``."""
    for who, trace, matched, other in (("reference", ref, pairs[0], "candidate"),
                                       ("candidate", cand, pairs[1], "reference")):
        alone = np.setdiff1d(np.arange(len(trace.updates)), matched)
        if len(alone):
            k = int(alone[0])
            return CheckResult(
                "updates", FAIL, float(abs(len(ref.updates) - len(cand.updates))), k,
                f"{who} update {k} (samples_seen {trace.updates[k].samples_seen:,}) has no "
                f"{other} update at the same samples_seen; {len(alone)} such in the {who}, "
                f"{len(ref.updates)} reference and {plural(len(cand.updates), 'candidate update')}")
    return CheckResult("updates", PASS, 0.0, None,
                       f"{len(ref.updates)} in both files, at the same samples_seen")


def check_fingerprints(ref: Sequence[np.ndarray | None], cand: Sequence[np.ndarray | None],
                       pairs: tuple[np.ndarray, np.ndarray], tol: float) -> CheckResult:
    """``params`` from parameter fingerprints (``integrations.core.fingerprint``: per tensor its
    sum and largest absolute value, rows of ``(tensors, 2)``) on the aligned updates where both
    files have one: ``max |Δsum| / max maxabs_ref`` over the tensors, at most ``tol``."""
    both = [(int(i), int(j)) for i, j in zip(*pairs, strict=True)
            if ref[i] is not None and cand[j] is not None]
    if not both:
        return CheckResult("params", SKIP, None, None,
                           "not recorded: no update has a parameter fingerprint in both files")
    diff, scale = np.empty(len(both)), np.empty(len(both))
    for row, (i, j) in enumerate(both):
        a, b = ref[i], cand[j]
        assert a is not None and b is not None
        if a.shape != b.shape:
            return CheckResult("params", FAIL, None, i,
                               f"the fingerprints at update {i} cover "
                               f"{plural(len(a), 'parameter tensor')} in the reference, {len(b)} "
                               "in the candidate: not the same model")
        diff[row] = np.max(np.abs(b[:, 0] - a[:, 0]), initial=0.0)
        scale[row] = np.max(a[:, 1], initial=0.0)
    steps = np.array([i for i, _ in both])
    what = "|Δsum|/max|p|"
    result = jump_or_drift(_relative("params", diff, scale, tol, None, steps, what), diff, scale,
                           tol, steps)
    return replace(result, detail=f"{result.detail}; from parameter fingerprints: {what} is, "
                                  "over the tensors, the change of a tensor's sum over the "
                                  "largest |p| of the reference, not an element's relative gap")


def recorded_checks(ref: RunTrace, cand: RunTrace, tol: Tolerances) -> list[CheckResult]:
    """``lrcheck diff``: two runs read from Recorder files, their updates aligned by
    ``samples_seen``. ``updates``, ``lr``, ``loss`` (where both files recorded one) and
    ``params`` (where both recorded a parameter fingerprint) apply; ``data`` and ``metrics``
    are not recorded."""
    pairs = align(ref, cand)
    ref_at, cand_at = pairs
    a, b = ref.losses()[ref_at], cand.losses()[cand_at]
    recorded = np.array([ref.updates[int(i)].loss is not None
                         and cand.updates[int(j)].loss is not None
                         for i, j in zip(ref_at, cand_at, strict=True)], dtype=bool)
    if recorded.any():
        diff, scale = np.abs(b[recorded] - a[recorded]), loss_scale(a[recorded])
        loss = jump_or_drift(_relative("loss", diff, scale, tol.loss, None, ref_at[recorded]),
                             diff, scale, tol.loss, ref_at[recorded])
    else:
        loss = CheckResult("loss", SKIP, None, None,
                           "not recorded: no update has a loss in both files")
    lr = _explained_lr(check_lr(ref, cand, tol.lr, pairs), ref, cand, ref_at, cand_at)
    skipped = {name: CheckResult(name, SKIP, None, None, "not recorded in a Recorder file")
               for name in ("data", "weights", "params", "metrics")}
    found = {**skipped, "updates": check_aligned_updates(ref, cand, pairs), "lr": lr,
             "loss": loss}
    if ref.fingerprints is not None and cand.fingerprints is not None:
        found["params"] = check_fingerprints(ref.fingerprints, cand.fingerprints, pairs,
                                             tol.params)
    elif ref.fingerprints is not None or cand.fingerprints is not None:
        who = "reference" if ref.fingerprints is not None else "candidate"
        found["params"] = CheckResult("params", SKIP, None, None,
                                      f"not recorded: only the {who} file has parameter "
                                      "fingerprints")
    return [found[name] for name in CHECK_NAMES]


def verdict(checks: list[CheckResult]) -> str:
    return FAIL if any(c.status == FAIL for c in checks) else PASS
