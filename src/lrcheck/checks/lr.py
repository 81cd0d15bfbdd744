"""The ``lr`` check and what a failed one says about the candidate's schedule: an offset of a
fraction of an update, how much faster or slower it runs, a resume that restarted it, a resume
with another accumulation whose schedule is sized for the old one (or stepped at the
accumulations' ratio since), or schedules that stepped differently."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from lrcheck.checks.causes import skipped_updates
from lrcheck.checks.continuation import accumulations
from lrcheck.checks.status import FAIL, PASS, SKIP, CheckResult
from lrcheck.plan.windows import fraction_text, window_ids
from lrcheck.stepwise import Boundary, ordinal
from lrcheck.trace import RunTrace
from lrcheck.words import plural


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
    lengths = [None if t.context is None else t.context.total_steps for t in (ref, cand)]
    if lengths[0] and lengths[1]:
        ahead = (steps / lengths[1] - before / lengths[0]) * len(ref.updates)
        text += (f"; over schedules of {lengths[1]} and {lengths[0]} steps that puts the "
                 f"candidate {abs(ahead):.3g} update{'' if abs(ahead) == 1 else 's'} "
                 f"{'ahead' if ahead > 0 else 'behind'}")
    return text


def lr_with_cause(check: CheckResult, ref: RunTrace, cand: RunTrace) -> CheckResult:
    """A failed ``lr`` check with what its first differing update had behind it: the
    candidate's resume, or schedules that stepped differently."""
    if check.status != FAIL or check.first_divergence is None:
        return check
    k = check.first_divergence
    text = resume_detail(ref, cand, k) or schedule_steps_detail(ref, cand, k)
    return replace(check, detail=f"{check.detail}; {text}") if text else check


def _crossing(lrs: np.ndarray, level: float, start: int = 0,
              rising: bool = True) -> float | None:
    """Where, from update ``start`` on, the LR first reaches (``rising``) or falls below
    ``level`` and stays there at the next update too (a one-update dip or spike, as a resume
    that lost the optimizer's LR gives, times no schedule), interpolated between updates; None
    if it never does, or if it is there already at ``start`` (where it got there is then
    unknown)."""
    beyond = lrs[start:] >= level if rising else lrs[start:] < level
    hits = np.flatnonzero(beyond & np.append(beyond[1:], True))
    if not len(hits) or hits[0] == 0:
        return None
    k = start + int(hits[0])
    before, after = lrs[k - 1], lrs[k]
    return k - 1 + float((level - before) / (after - before))


# The LR levels, as fractions of the lower of the two peaks, between which the pace of a
# schedule is timed: away from the peak and from zero, where schedules bend or are clamped.
PACE_LEVELS = (0.25, 0.5, 0.75)


@dataclass(frozen=True)
class _Timing:
    """Where each trace crosses ``first`` and then ``last`` (LR levels) on one edge, and the
    updates each takes from one to the other."""

    verb: str
    first: float
    last: float
    ref: tuple[float, float]
    cand: tuple[float, float]

    @property
    def took(self) -> tuple[float, float]:
        return self.ref[1] - self.ref[0], self.cand[1] - self.cand[0]


def _timing(ref: np.ndarray, cand: np.ndarray, levels: list[float],
            rising: bool) -> _Timing | None:
    """Both traces timed between the first and the last of ``levels`` that both cross, on the
    rising edge from update 0 or the falling one from each peak; None unless both have at least
    one update between their two crossings (within one update the LR's course is not seen)."""
    crossed = [{level: k for level in levels
                if (k := _crossing(lrs, level, 0 if rising else int(np.argmax(lrs)), rising))
                is not None} for lrs in (ref, cand)]
    common = [level for level in levels if all(level in side for side in crossed)]
    if len(common) < 2:
        return None
    first, last = common[0], common[-1]
    at = [(side[first], side[last]) for side in crossed]
    if any(np.floor(b) < np.ceil(a) for a, b in at):
        return None
    return _Timing("rises" if rising else "falls", first, last, at[0], at[1])


def _at(k: float) -> str:
    """An interpolated update as the pace detail writes it: ``4``, ``4.5``, ``1.25``."""
    return f"{k:.2f}".rstrip("0").rstrip(".")


def schedule_pace(ref: np.ndarray, cand: np.ndarray) -> str | None:
    """How many times faster or slower the candidate's schedule (group 0) runs: the updates the
    reference's LR takes to go between two levels over the updates the candidate's takes, on
    its warmup or its decay, whichever both traces spend more updates on; None when neither
    tells, or when both take the same updates. Timed between two crossings, not from update 0,
    so that a schedule read a step ahead or behind is not called faster."""
    if len(ref) == 0 or len(cand) == 0 or min(ref.max(), cand.max()) <= 0:
        return None
    low = min(float(ref.max()), float(cand.max()))
    levels = [f * low for f in PACE_LEVELS]
    timings = [t for t in (_timing(ref, cand, levels, True),
                           _timing(ref, cand, levels[::-1], False)) if t is not None]
    if timings:
        t = max(timings, key=lambda t: min(t.took))
        ratio = t.took[0] / t.took[1]
        if abs(ratio - 1) < 0.01:
            return None
        pace = f"≈{ratio:.3g}× too fast" if ratio > 1 else f"≈{1 / ratio:.3g}× too slow"
        return (f"the LR {t.verb} from {t.first:.3g} to {t.last:.3g} between updates "
                f"{_at(t.cand[0])} and {_at(t.cand[1])} in the candidate, {_at(t.ref[0])} and "
                f"{_at(t.ref[1])} in the reference: its schedule runs {pace}")
    half = 0.5 * low
    k_ref = _crossing(ref, half, int(np.argmax(ref)), rising=False)
    if k_ref and _crossing(cand, half, int(np.argmax(cand)), rising=False) is None:
        return (f"the reference's LR falls below {half:.3g} at update {_at(k_ref)}, the "
                f"candidate's never does in its {plural(len(cand), 'update')}: its "
                f"schedule runs at least {len(cand) / k_ref:.2g}× too slow")
    return None


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


def lr_with_pace(lr: CheckResult, ref: RunTrace, cand: RunTrace,
                 ref_at: slice | np.ndarray = slice(None),
                 cand_at: slice | np.ndarray = slice(None)) -> CheckResult:
    """A failed ``lr`` check with what the candidate's schedule does (group 0; ``ref_at``/
    ``cand_at``: the updates aligned): an offset of a fraction of an update, or how much faster
    or slower it runs, when that can be told."""
    if lr.status != FAIL:
        return lr
    a, b = ref.lrs()[ref_at, 0], cand.lrs()[cand_at, 0]
    d = lr_offset(a, b)
    why = offset_text(d) if d is not None else schedule_pace(a, b)
    return replace(lr, detail=f"{lr.detail}; {why}") if why else lr


# A schedule sized for the accumulation before a resume: the candidate's LR at update u, from
# the first update where the LRs part, is the reference's at u × r (r = before / after: the
# schedule's length scaled by the accumulations' ratio), interpolated between updates, within
# this share of the reference's peak LR (its length and its warmup are whole updates, rounded:
# tests/fixtures/user_checkpoints.py's 32 updates with 3 of warmup against 16 with 1 leave
# 2.4 %), and that explains the candidate's LR this many times better than the reference's at
# u itself and than the other bug that fits a resume there: a schedule whose position was
# carried, its length right, stepped r× per update since the resume at b (the reference's at
# b + (u − b) × r, b·(1 − r) updates from u × r). The same margin names that one where it is
# the closer by as much. Measured (tests/checks/test_lr.py), for schedules sized for the old
# accumulation the other fit's gap is 14.8× theirs (linear, resumed at 10 of 16), 31× (4 → 2),
# 414× (cosine), 5.3× resumed at 4 and 3.0× at 2 (not named: 1 update apart); a cosine over
# 200 updates stepped every other update from a resume at 10 leaves the sized fit 10× the
# other's (3.9 % of the peak against 0.39 %, the half update that stepping every other update
# rounds).
SIZED_RTOL, SIZED_GAIN = 0.05, 4.0


def _scaled(ref: np.ndarray, cand: np.ndarray, at: np.ndarray, ratio: float,
            resumed: int) -> tuple[bool, float, np.ndarray] | None:
    """Which schedule the candidate's LR at the updates ``at`` (``cand``, indexed as ``at``)
    follows: the reference's at ``at × ratio`` (True: sized for the old accumulation) or at
    ``resumed + (at − resumed) × ratio`` (False: stepped ``ratio``× per update since the
    resume), interpolated between updates; with its largest gap over the reference's peak LR
    and the updates compared (those whose ``at × ratio`` is inside the reference). None where
    fewer than 2 updates compare, or the closer is not within ``SIZED_RTOL`` of the peak and
    ``SIZED_GAIN`` times below both the other's gap and the gap to the reference's at ``at``."""
    inside = at * ratio <= len(ref) - 1  # then resumed + (at − resumed) × ratio is inside too
    if inside.sum() < 2:
        return None
    x, lrs = at[inside], cand[inside]
    sized, rate = (float(np.abs(lrs - np.interp(where, np.arange(len(ref)), ref)).max())
                   for where in (x * ratio, resumed + (x - resumed) * ratio))
    best, other = min(sized, rate), max(sized, rate)
    peak = float(np.abs(ref).max())
    if not (best <= SIZED_RTOL * peak and best * SIZED_GAIN <= min(other, float(
            np.abs(lrs - ref[x]).max()))):
        return None
    return sized < rate, best / peak, x


def lr_resized(lr: CheckResult, ref: RunTrace, cand: RunTrace, resumes: Sequence[Boundary],
               pairs: tuple[np.ndarray, np.ndarray]) -> CheckResult:
    """A failed ``lr`` check (updates named by the reference's index in ``pairs``) whose first
    differing update follows a resume with another accumulation (``resumes``: where the
    candidate's later processes joined; ``continuation.accumulations``), with that cause named
    where the candidate's LR from there, up to the next resume, is the reference's on a
    schedule whose length is scaled by the accumulations' ratio (a schedule whose length was
    computed from the accumulation before the resume), or on the reference's schedule stepped
    at that ratio since the resume (``_scaled``: the closer of the two, where clearly)."""
    ref_at, cand_at = pairs
    found = np.flatnonzero(ref_at == lr.first_divergence)
    if lr.status != FAIL or not len(found):
        return lr
    k = int(cand_at[found[0]])
    joined = [b for b in resumes if b.update <= k]
    change = accumulations(cand.windows, joined[-1].update) if joined else None
    end = min((b.update for b in resumes if b.update > k), default=len(cand.updates))
    span = np.flatnonzero((cand_at >= k) & (cand_at < end))
    resumed = int(ref_at[cand_at >= joined[-1].update][0]) if joined else 0
    fit = None if change is None else _scaled(ref.lrs()[:, 0], cand.lrs()[cand_at[span], 0],
                                              ref_at[span], change[0] / change[1], resumed)
    if change is None or fit is None:
        return lr
    (before, after), b, (sized, gap, at) = change, joined[-1], fit
    who = f"the {ordinal(b.order)} process" + ("" if b.pid is None else f" (pid {b.pid})")
    if sized:
        speed = (f"{after / before:.3g}× too slow" if after > before
                 else f"{before / after:.3g}× too fast")
        head, where = f"the schedule is sized for accumulation {before}, the run accumulates " \
                      f"{after}", "u"
        tail = (f"its schedule runs {speed}, its length ({after / before:.3g}× the reference's) "
                f"computed from {before} micro-batches per update")
    else:
        head, where = f"the scheduler steps {before / after:.3g}× per update since the " \
                      "resume", f"{resumed} + (u − {resumed})"
        tail = ("its position carried, its length the reference's: sized for neither "
                "accumulation, stepped at another rate")
    return replace(lr, detail=(
        f"{lr.detail}; {head}: {who} resumed at update {b.update} with {after} micro-batches "
        f"per update, {before} before it, and from update {lr.first_divergence} its LR at "
        f"update u is the reference's at {where} × {before}/{after} (within {100 * gap:.2g} % "
        f"of the peak LR, over updates {int(at[0])}-{int(at[-1])}): {tail}"))
