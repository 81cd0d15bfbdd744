"""The checks of DESIGN.md as pure functions: (reference trace, candidate trace, tolerances) →
results. Nothing here trains, prints or writes."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lrcheck.spec import Tolerances
from lrcheck.trace import RunTrace, SkippedStep
from lrcheck.words import plural

PASS, FAIL, WARN, SKIP = "pass", "fail", "warn", "skip"
CHECK_NAMES = ("updates", "lr", "params", "loss", "metrics")
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
              steps: np.ndarray | None = None) -> CheckResult:
    """``diff[k]``, the largest absolute difference at update k, relative to ``scale[k]``;
    ``steps[k]`` (default k) names update k."""
    n = len(diff)
    if n == 0:
        return CheckResult(name, SKIP, None, None, "no updates to compare")
    rel = diff / np.maximum(scale, _TINY)
    steps = np.arange(n) if steps is None else steps
    worst_abs, worst_rel = float(diff.max()), float(rel.max())
    over = np.flatnonzero(~(rel <= tol))  # NaN (a run that diverged) fails too
    if not len(over):
        return CheckResult(name, PASS, worst_abs, None,
                           f"max relative {worst_rel:.3g} ≤ {tol:g} over {plural(n, 'update')}",
                           worst_rel)
    i = int(over[0])
    k = int(steps[i])
    if not np.isfinite(rel[i]):
        measured = f"not finite (NaN or inf) at update {k}"
    else:
        measured = (f"relative {rel[i]:.3g} > {tol:g} at update {k}; "
                    f"max relative {worst_rel:.3g}")
    if reason:
        return CheckResult(name, WARN, worst_abs, k, f"not comparable: {reason}; {measured}",
                           worst_rel)
    return CheckResult(name, FAIL, worst_abs, k, measured, worst_rel)


# Parameter values the params check holds at once: its working memory is one buffer of 2 MiB
# beside the snapshots themselves, which is all the memory a comparison's recording needs, and
# the buffer stays in the CPU's cache (a chunk of 256 snapshots of digits' MLP, 10 MB a
# temporary, made the check four times slower).
PARAM_CHUNK = 1 << 18


def check_params(ref: RunTrace, cand: RunTrace, tol: float, reason: str | None) -> CheckResult:
    """After every update: ``max|Δp| / max|p_ref|`` over all parameters, at most ``tol``."""
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
    return _relative("params", diff, scale, tol, reason)


def check_loss(ref: RunTrace, cand: RunTrace, tol: float, reason: str | None) -> CheckResult:
    """Per-update training loss, ``|Δloss| / |loss_ref|`` at most ``tol``."""
    a, b = ref.losses(), cand.losses()
    n = min(len(a), len(b))
    return _relative("loss", np.abs(b[:n] - a[:n]), np.abs(a[:n]), tol, reason)


def check_metrics(ref: RunTrace, cand: RunTrace, tol: float, reason: str | None) -> CheckResult:
    """Final eval accuracy and macro-F1 within ``tol`` (absolute)."""
    r, c = ref.metrics, cand.metrics
    if r is None or c is None:
        return CheckResult("metrics", SKIP, None, None, "a run has no evaluation")
    d_acc, d_f1 = c["accuracy"] - r["accuracy"], c["f1_macro"] - r["f1_macro"]
    worst = max(abs(d_acc), abs(d_f1))
    text = (f"accuracy {r['accuracy']:.4f} → {c['accuracy']:.4f} ({d_acc:+.4f}), "
            f"macro-F1 {r['f1_macro']:.4f} → {c['f1_macro']:.4f} ({d_f1:+.4f})")
    if worst <= tol:
        return CheckResult("metrics", PASS, worst, None, f"{text}; ≤ {tol:g}")
    if reason:
        return CheckResult("metrics", WARN, worst, None, f"not comparable: {reason}; {text}")
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


def run_checks(ref: RunTrace, cand: RunTrace, tol: Tolerances) -> list[CheckResult]:
    """Every check of the contract, in the order of ``CHECK_NAMES``; ``skipped-steps`` too when
    the runs used a GradScaler (``--amp fp16``)."""
    reason = not_comparable_reason(ref, cand)
    checks = [
        check_updates(ref, cand),
        check_lr(ref, cand, tol.lr),
        check_params(ref, cand, tol.params, reason),
        check_loss(ref, cand, tol.loss, reason),
        check_metrics(ref, cand, tol.metrics, reason),
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


def _with_pace(lr: CheckResult, ref: RunTrace, cand: RunTrace, ref_at: Any = slice(None),
               cand_at: Any = slice(None)) -> CheckResult:
    """A failed ``lr`` check with how much faster or slower the candidate's schedule runs
    (group 0; ``ref_at``/``cand_at``: the updates aligned), when that can be told."""
    if lr.status != FAIL:
        return lr
    pace = schedule_pace(ref.lrs()[ref_at, 0], cand.lrs()[cand_at, 0])
    return replace(lr, detail=f"{lr.detail}; {pace}") if pace else lr


def schedule_checks(ref: RunTrace, cand: RunTrace, tol: Tolerances) -> list[CheckResult]:
    """The checks that apply to schedules stepped without a model (``lrcheck trace``):
    ``updates`` and ``lr``, the latter saying how much faster or slower the candidate's
    schedule runs when it fails; the others are ``skip``."""
    lr = _with_pace(check_lr(ref, cand, tol.lr), ref, cand)
    skipped = [CheckResult(name, SKIP, None, None,
                           "not measured: lrcheck trace steps the schedule without a model")
               for name in CHECK_NAMES if name not in SIMULATED]
    return [check_updates(ref, cand), lr, *skipped]


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


def recorded_checks(ref: RunTrace, cand: RunTrace, tol: Tolerances) -> list[CheckResult]:
    """``lrcheck diff``: two runs read from Recorder files, their updates aligned by
    ``samples_seen``. ``updates``, ``lr`` and ``loss`` (where both files recorded one) apply;
    ``params`` and ``metrics`` are not recorded."""
    pairs = align(ref, cand)
    ref_at, cand_at = pairs
    a, b = ref.losses()[ref_at], cand.losses()[cand_at]
    recorded = np.array([ref.updates[int(i)].loss is not None
                         and cand.updates[int(j)].loss is not None
                         for i, j in zip(ref_at, cand_at, strict=True)], dtype=bool)
    if recorded.any():
        loss = _relative("loss", np.abs(b[recorded] - a[recorded]), np.abs(a[recorded]),
                         tol.loss, None, ref_at[recorded])
    else:
        loss = CheckResult("loss", SKIP, None, None,
                           "not recorded: no update has a loss in both files")
    lr = _with_pace(check_lr(ref, cand, tol.lr, pairs), ref, cand, ref_at, cand_at)
    skipped = {name: CheckResult(name, SKIP, None, None, "not recorded in a Recorder file")
               for name in ("params", "metrics")}
    found = {"updates": check_aligned_updates(ref, cand, pairs), "lr": lr, "loss": loss,
             **skipped}
    return [found[name] for name in CHECK_NAMES]


def verdict(checks: list[CheckResult]) -> str:
    return FAIL if any(c.status == FAIL for c in checks) else PASS
