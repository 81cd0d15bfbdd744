"""``lrcheck diff`` of two runs from their logs alone (docs/logs.md, "Two runs from their
logs"), judged: the updates both logged (``logs.pairs`` read them) compared — the LR exactly
(within a float32 step where a log stores float32), the loss and the gradient norm with
``lrcheck diff``'s drift rule — and what only one run logged, and what a log cannot prove, said
beside."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from lrcheck.checks.effects import jump_or_drift, loss_scale, relative
from lrcheck.checks.status import FAIL, PASS, SKIP, WARN, CheckResult
from lrcheck.logs.model import LoggedRun, Quantity
from lrcheck.logs.windows import meanings_differ, window_means
from lrcheck.spec import Tolerances
from lrcheck.trace import RunTrace
from lrcheck.words import plural

# One float32 step at most, relative: 2**-23 |x| is at least the spacing of float32 at x.
FLOAT32_STEP = 2.0 ** -23
Pairs = list[tuple[int, int]]


def aligned(ref: LoggedRun, cand: LoggedRun) -> tuple[Pairs, str]:
    """The updates (reference k, candidate k) both logged, by samples seen where both logged
    them, else by update index; and how they were aligned."""
    if Quantity.SAMPLES in ref.series and Quantity.SAMPLES in cand.series:
        seen = [dict(zip(v.tolist(), k.tolist(), strict=True))
                for k, v in (run.at_updates(Quantity.SAMPLES) for run in (ref, cand))]
        common = sorted(set(seen[0]) & set(seen[1]))
        return [(seen[0][s], seen[1][s]) for s in common], "by samples seen"
    ks = [set(np.concatenate([run.at_updates(q)[0] for q in Quantity]).tolist())
          for run in (ref, cand)]
    return [(k, k) for k in sorted(ks[0] & ks[1])], "by update index"


def _values(run: LoggedRun, q: Quantity) -> dict[int, tuple[float, ...]]:
    """Per update ``q`` was logged at, its values (the LR: one per param group)."""
    series = [run.series[q]] if q in run.series else []
    if q is Quantity.LR:
        series += list(run.lr_groups)
    found = [dict(zip(*(a.tolist() for a in run.series_at_updates(s)), strict=True))
             for s in series]
    return {k: tuple(f[k] for f in found) for k in (found[0] if found else {})
            if all(k in f for f in found)}


def _both(ref: LoggedRun, cand: LoggedRun, q: Quantity, pairs: Pairs
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | str:
    """The reference's k and both runs' values of ``q`` at the aligned updates where both
    logged it; or why there are none."""
    a, b = _values(ref, q), _values(cand, q)
    if not a or not b:
        if not a and not b:
            return "logged by neither run"
        who, run = ("reference", ref) if a else ("candidate", cand)
        return f"only the {who} logged it ({run.series[q].tag})"
    both = [(i, j) for i, j in pairs if i in a and j in b]
    if not both:
        return "no update where both runs logged it"
    if len(a[both[0][0]]) != len(b[both[0][1]]):
        return ""  # the LR's param groups differ: said by _lr
    return (np.array([i for i, _ in both], dtype=np.int64),
            np.array([a[i] for i, _ in both], dtype=np.float64),
            np.array([b[j] for _, j in both], dtype=np.float64))


def _lr(ref: LoggedRun, cand: LoggedRun, pairs: Pairs, tol: float) -> CheckResult:
    """``lr``: equal at every update both logged, within ``tol·max(1, |lr|)`` and, where a
    log stores float32, one float32 step."""
    found = _both(ref, cand, Quantity.LR, pairs)
    if found == "":
        return CheckResult("lr", FAIL, None, 0, f"the reference logged the LR of "
                           f"{plural(1 + len(ref.lr_groups), 'param group')}, the candidate "
                           f"of {1 + len(cand.lr_groups)}")
    if isinstance(found, str):
        return CheckResult("lr", SKIP, None, None, f"not compared: {found}")
    ks, a, b = found
    float32 = "float32" in (ref.series[Quantity.LR].dtype, cand.series[Quantity.LR].dtype)
    allowed = tol * np.maximum(1.0, np.abs(a)) + (FLOAT32_STEP * np.abs(a) if float32 else 0.0)
    diff = np.abs(b - a)
    bad = np.argwhere(~(diff <= allowed))
    worst = float(diff.max())
    within = "within a float32 step, " if float32 else ""
    if not len(bad):
        return CheckResult("lr", PASS, worst, None,
                           f"equal ({within}max |ΔLR| {worst:.3g}) at all "
                           f"{plural(len(ks), 'update')} both logged")
    i, g = (int(v) for v in bad[0])
    k = int(ks[i])
    group = f" (param group {g})" if a.shape[1] > 1 else ""
    return CheckResult("lr", FAIL, worst, k,
                       f"first differs at update {k}{group} (of {len(ks)} both logged): "
                       f"reference {a[i, g]:.10g}, candidate {b[i, g]:.10g}; max |ΔLR| "
                       f"{worst:.3g}")


def _effect(name: str, q: Quantity, ref: LoggedRun, cand: LoggedRun, pairs: Pairs,
            tol: float) -> CheckResult:
    """``loss`` or ``grad-norm`` at the updates both logged, as ``lrcheck diff`` judges an
    effect of runs with no noise floor (``effects.jump_or_drift``)."""
    found = _both(ref, cand, q, pairs)
    if isinstance(found, str):
        return CheckResult(name, SKIP, None, None, f"not compared: {found}")
    return _judged(name, q, found[0], found[1][:, 0], found[2][:, 0], tol)


def _judged(name: str, q: Quantity, ks: np.ndarray, a: np.ndarray, b: np.ndarray,
            tol: float) -> CheckResult:
    """The effect rule on the reference's ``a`` and the candidate's ``b`` at updates ``ks``."""
    diff = np.abs(b - a)
    scale = loss_scale(a) if q is Quantity.LOSS else np.abs(a)
    what = "|Δloss|/|loss|" if q is Quantity.LOSS else "|Δ‖g‖|/‖g‖"
    return jump_or_drift(relative(name, diff, scale, tol, None, ks, what), diff, scale, tol, ks)


def _updates(ref: LoggedRun, cand: LoggedRun, pairs: Pairs, how: str,
             traces: tuple[RunTrace, RunTrace]) -> CheckResult:
    """``updates``: the runs logged as far as each other (within a logging interval), and
    which updates are compared."""
    if not pairs:
        return CheckResult("updates", FAIL, None, 0, "no update logged by both runs (aligned "
                           f"{how}): nothing to compare")
    last = [t.updates[-1].step for t in traces]
    interval = max(ref.every or 1, cand.every or 1)
    if abs(last[0] - last[1]) >= interval:
        return CheckResult("updates", FAIL, float(abs(last[0] - last[1])), min(last) + 1,
                           f"the reference logged up to update {last[0]}, the candidate up to "
                           f"update {last[1]}: not as many updates{_times(last, ref, cand)}")
    return CheckResult("updates", PASS, 0.0, None,
                       f"{plural(len(pairs), 'update')} logged by both, aligned {how}; "
                       f"{len(traces[0].updates)} logged by the reference, "
                       f"{len(traces[1].updates)} by the candidate")


def _times(last: list[int], ref: LoggedRun, cand: LoggedRun) -> str:
    """Where one log's steps run a whole number of times as far as the other's: that they may
    count micro-batches, and how to say so."""
    ratio = (max(last) + 1) / (min(last) + 1)
    if ratio < 2 or ratio != int(ratio):
        return ""
    who, run = (("reference", ref) if last[0] > last[1] else ("candidate", cand))
    return (f"; the {who}'s steps run {int(ratio)}× as far: they may count micro-batches or "
            f"samples ({run.steps.how}); if so, say it: --log-steps micro-batches:{int(ratio)}")


def _incomparable(ref: LoggedRun, cand: LoggedRun) -> CheckResult | None:
    """The tags only one run logged, and those neither maps (None where there are none)."""
    tags = _logged(ref), _logged(cand)
    parts = [f"only the {who} logged {', '.join(sorted(alone))}"
             for who, alone in (("reference", tags[0] - tags[1]),
                                ("candidate", tags[1] - tags[0])) if alone]
    common = sorted(set(ref.unmapped) & set(cand.unmapped))
    if common:
        parts.append(f"both logged, not compared (no quantity lrcheck knows): "
                     f"{', '.join(common)}")
    return CheckResult("incomparable", SKIP, None, None, "; ".join(parts)) if parts else None


def _logged(run: LoggedRun) -> set[str]:
    """What ``run`` logged: the quantities lrcheck knows by name (an LR of several param
    groups as ``lr (N param groups)``), the other tags as they are."""
    lr = f"lr ({1 + len(run.lr_groups)} param groups)" if run.lr_groups else "lr"
    return {lr if q is Quantity.LR else q.value for q in run.series} | set(run.unmapped)


def _limits(ref: LoggedRun, cand: LoggedRun) -> CheckResult:
    """What the two logs cannot prove, and what their steps were taken to mean."""
    both = [s for s in ref.limits if s in cand.limits]
    parts = [*(f"both: {s}" for s in both),
             *(f"{who}: {s}" for who, run in (("reference", ref), ("candidate", cand))
               for s in run.limits if s not in both)]
    steps = (f"steps: {ref.steps.how}" if ref.steps.how == cand.steps.how else
             f"steps: the reference's {ref.steps.how}; the candidate's {cand.steps.how}")
    return CheckResult("limits", SKIP, None, None,
                       "what these logs cannot prove: " + "; ".join([*parts, steps]))


def log_checks(ref: LoggedRun, cand: LoggedRun, traces: tuple[RunTrace, RunTrace],
               tol: Tolerances) -> list[CheckResult]:
    """The checks of two logs: ``updates``, ``lr``, ``loss``, ``grad-norm`` at the updates
    both logged, ``evidence``, ``incomparable`` (what only one logged) and ``limits``."""
    pairs, how = aligned(ref, cand)
    found: Sequence[CheckResult | None] = (
        _updates(ref, cand, pairs, how, traces), _lr(ref, cand, pairs, tol.lr),
        loss_check(ref, cand, pairs, tol.loss),
        _effect("grad-norm", Quantity.GRAD_NORM, ref, cand, pairs, tol.params),
        _evidence(ref, cand, pairs), _incomparable(ref, cand), _limits(ref, cand))
    return [c for c in found if c is not None]


def loss_check(ref: LoggedRun, cand: LoggedRun, pairs: Pairs, tol: float) -> CheckResult:
    """``loss``: at the updates both logged; where one log's loss is the mean over logging
    windows and the other's logged every update of them, the other's averaged over the same
    windows (``windows.window_means``); losses that mean different things (a micro-batch's
    against an update's: ``windows.meanings_differ``) a warning that says so, not a FAIL."""
    windowed = window_means(ref, cand)
    if isinstance(windowed, str):
        return CheckResult("loss", SKIP, None, None, f"not compared: {windowed}")
    if windowed is None:
        result = _effect("loss", Quantity.LOSS, ref, cand, pairs, tol)
    else:
        how, ks, a, b = windowed
        result = _judged("loss", Quantity.LOSS, ks, a, b, tol)
        result = replace(result, detail=f"{how}: {result.detail}")
    differ = meanings_differ(ref, cand)
    if differ is None or result.status not in (FAIL, WARN):
        return result
    return replace(result, status=WARN, detail=f"{differ}: not a verdict; {result.detail}")


def _evidence(ref: LoggedRun, cand: LoggedRun, pairs: Pairs) -> CheckResult:
    """``evidence``: at least 2 updates compared, and an LR logged that is not 0 throughout
    (where neither run logged an LR, a loss that changed)."""
    if len(pairs) < 2:
        return CheckResult("evidence", FAIL, None, None,
                           f"{plural(len(pairs), 'update')} logged by both: a pass needs at "
                           "least 2 compared, or it would prove nothing")
    lrs = np.concatenate([run.at_updates(Quantity.LR)[1] for run in (ref, cand)])
    if len(lrs) and not np.any(lrs):
        return CheckResult("evidence", FAIL, 0.0, None,
                           "the LR logged is 0 at every update of both runs: neither trained, "
                           "so this pass would prove nothing")
    if len(lrs):
        return CheckResult("evidence", PASS, None, None,
                           f"{plural(len(pairs), 'update')} compared, the LR logged not 0 "
                           "throughout; whether the parameters moved is not in a log")
    losses = ref.at_updates(Quantity.LOSS)[1]
    if len(np.unique(losses)) > 1:
        return CheckResult("evidence", PASS, None, None,
                           f"{plural(len(pairs), 'update')} compared; neither run logged its "
                           "LR, the reference's loss changed over them")
    return CheckResult("evidence", WARN, None, None,
                       f"{plural(len(pairs), 'update')} compared; neither run logged its LR "
                       "and the reference's loss did not change: that either trained is "
                       "not shown")
