"""The causes, checked exactly per update: the number of updates, the samples behind each
(``data``), the weight of each sample's loss (``weights``) and the steps skipped by a GradScaler.
The LR, the fourth cause, is ``checks.lr``."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lrcheck.checks.status import FAIL, PASS, SKIP, TINY, CheckResult
from lrcheck.diagnosis import data_diff, data_text, weights_text
from lrcheck.plan.windows import Window
from lrcheck.trace import RunTrace, SkippedStep
from lrcheck.words import plural

# The weights check: how closely two measured weights of a sample's loss must agree, relative,
# by the dtype the backward pass ran in. Rounding alone leaves a few units in the last place
# (n/N then 1/n against 1/N); a real difference is at least one sample in a window: 1/E.
WEIGHT_RTOL = {"float64": 1e-12, "float32": 1e-6}


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


def weight_rtol(ref: RunTrace, cand: RunTrace) -> float:
    """``WEIGHT_RTOL`` of the dtype the runs' losses were computed in (the spec's, or the
    coarsest measured; float32 where unknown)."""
    spec = ref.spec or cand.spec
    kinds = [t.loss_dtype for t in (ref, cand) if t.loss_dtype]
    dtype = (spec.dtype if spec is not None else
             "float64" if all(k == "float64" for k in kinds) else "float32")
    return WEIGHT_RTOL.get(dtype, WEIGHT_RTOL["float32"])


def check_weights(ref: RunTrace, cand: RunTrace) -> CheckResult:
    """The weight each sample's loss carried in update k's gradient — measured in the backward
    pass, summed over the micro-batches and ranks that fed it — is the same in both runs, for
    every k, up to the rounding of the dtype (``WEIGHT_RTOL``). ``skip`` where a run has no
    measured weights."""
    if ref.windows is None or cand.windows is None:
        who = "the reference" if ref.windows is None else "the candidate"
        return CheckResult("weights", SKIP, None, None,
                           f"not recorded: {who} has no samples per update")
    tol = weight_rtol(ref, cand)
    n = min(len(ref.windows), len(cand.windows), len(ref.updates), len(cand.updates))
    # Every (update, sample) of both runs at once, on the updates both measured; only the first
    # update that differs is looked at one by one, for its message.
    a, b = _flat_weights(ref.windows[:n]), _flat_weights(cand.windows[:n])
    common = a[2] & b[2]
    a_keys, a_w = _keep(a, common)
    b_keys, b_w = _keep(b, common)
    compared = int(common.sum())
    if not compared:
        why = next((f": {t.unweighed}" for t in (ref, cand) if t.unweighed), "")
        return CheckResult("weights", SKIP, None, None,
                           f"not measured: no update has its weights measured in both runs{why}")
    if not np.array_equal(a_keys, b_keys):
        m = min(len(a_keys), len(b_keys))
        at = np.flatnonzero(a_keys[:m] != b_keys[:m])
        i = int(at[0]) if len(at) else m
        k = int(min(a_keys[min(i, len(a_keys) - 1)], b_keys[min(i, len(b_keys) - 1)]) // _SLOTS)
        return CheckResult("weights", FAIL, None, k,
                           f"first differ at update {k}, which was fed different samples "
                           "from the reference's: see data")
    rel = np.abs(b_w - a_w) / np.maximum(np.abs(a_w), TINY)
    worst = float(rel.max(initial=0.0))
    bad = np.flatnonzero(~(rel <= tol))
    if len(bad):
        i = int(bad[0])
        k, sample = int(a_keys[i] // _SLOTS), int(a_keys[i] % _SLOTS)
        here = float(rel[a_keys // _SLOTS == k].max())
        at = a_keys // _SLOTS == k
        window = cand.windows[k]
        means = weights_text(window, ref.windows[k], sum(len(m.ids) for m in window))
        return CheckResult("weights", FAIL, here, k,
                           f"first differ at update {k}: {means + '; ' if means else ''}"
                           f"sample {sample}'s loss weighted {b_w[i]:.6g} in the candidate, "
                           f"{a_w[i]:.6g} in the reference (relative {rel[i]:.3g} > {tol:g})"
                           f"{_in_total(b_w[at], a_w[at], tol)}", here)
    return CheckResult("weights", PASS, worst, None,
                       f"the same weight on each sample's loss at all "
                       f"{plural(compared, 'update')}, measured in the backward pass (max "
                       f"relative {worst:.3g} ≤ {tol:g})", worst)


def _in_total(cand_w: np.ndarray, ref_w: np.ndarray, tol: float) -> str:
    """What one update's per-sample weights sum to in each run, where the sums differ: a loss
    scaled as a whole (not divided by the accumulation steps, or divided twice) shows as a ratio
    every sample shares; a ratio of the sums that is not every sample's (a micro-batch token
    mean not divided by the accumulation) is said to be more than a scale."""
    cand, ref = float(cand_w.sum()), float(ref_w.sum())
    if abs(cand - ref) <= tol * max(abs(ref), TINY):
        return "; the update's weights sum to the same in both runs, shared out differently"
    ratio = cand / ref if ref else float("inf")
    sums = (f"; the update's weights sum to {cand:.6g} in the candidate, {ref:.6g} in the "
            f"reference ({ratio:.4g}×)")
    scaled = ratio * ref_w
    if ref and bool(np.all(np.abs(cand_w - scaled) <= tol * np.maximum(np.abs(scaled), TINY))):
        return (f"{sums}: its loss is scaled as a whole, as a loss not divided by the "
                "accumulation steps (or divided twice) is")
    return f"{sums}, and shared out differently: not a scale of the whole loss alone"


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
