"""``ema-params``: the EMA model each run updated (``record.ema``: torch's ``AveragedModel``,
timm's ``ModelEmaV2`` / ``ModelEmaV3``, diffusers' ``EMAModel``), fingerprinted after the
updates the model is, compared as ``params`` compares fingerprints: ``max |Δsum| / max|p|`` over
its tensors, at every update both runs fingerprinted it after.

In lockstep the candidate's weights are the reference's after every update but its EMA stays
its own, so an EMA that folds in the same weights as often as the reference's is the
reference's to the rounding, and one updated on every micro-batch (or with another decay, or
from other weights) parts at the first update it folds in — a failure there. Free-running, as
``params``: against the twin where one ran, else a jump (a failure) or a smooth drift (a
warning)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from lrcheck.checks.effects import TWIN_COMMAND, against_twin, jump_or_drift, relative
from lrcheck.checks.status import FAIL, PASS, SKIP, TINY, CheckResult
from lrcheck.stepwise import EmaPrints
from lrcheck.words import plural

NAME = "ema-params"
KINDS = "torch's AveragedModel, timm's ModelEmaV2/V3, diffusers' EMAModel"
WHAT = "|Δsum|/max|p|"
LOCKSTEP = ("in lockstep the candidate's weights are the reference's after every update and its "
            "EMA its own: it folded in other weights, or as often differently (cadence says how "
            "often each run updated it), or with another decay")


def check_ema(ref: EmaPrints | None, cand: EmaPrints | None,
              pairs: tuple[np.ndarray, np.ndarray], tol: float, lockstep: bool,
              twin: EmaPrints | None = None) -> CheckResult:
    """``ema-params`` on the aligned updates ``pairs`` (see the module's docstring); ``twin``:
    the EMA of the reference command's twin, the floor of a free-running pair's drift."""
    if ref is None and cand is None:
        return CheckResult(NAME, SKIP, None, None,
                           f"no EMA: neither run updated an EMA model ({KINDS})")
    if ref is None or cand is None:
        has, lacks = ("reference", "candidate") if ref is not None else ("candidate", "reference")
        one = ref if ref is not None else cand
        assert one is not None
        return CheckResult(NAME, FAIL, None, None,
                           f"only the {has} updated an EMA model ({one.name}, by {one.call}): the "
                           f"{lacks} has none, so the weights an EMA gives are not comparable")
    rows = [(int(i), int(j)) for i, j in zip(*pairs, strict=True)
            if int(i) in ref.prints and int(j) in cand.prints]
    if not rows:
        return CheckResult(NAME, SKIP, None, None,
                           "not fingerprinted: no update has the EMA's fingerprint in both runs "
                           "(--fingerprint-every 0 takes none)")
    shapes = {ref.prints[i].shape for i, _ in rows} | {cand.prints[j].shape for _, j in rows}
    if len(shapes) > 1:
        return CheckResult(NAME, FAIL, None, rows[0][0],
                           f"the EMA has {plural(len(ref.names), 'tensor')} in the reference "
                           f"({ref.name}), {len(cand.names)} in the candidate ({cand.name}): "
                           "not the same model")
    return _compared(ref, cand, rows, tol, lockstep, twin, len(pairs[0]))


def _compared(ref: EmaPrints, cand: EmaPrints, rows: list[tuple[int, int]], tol: float,
              lockstep: bool, twin: EmaPrints | None, total: int) -> CheckResult:
    """The two EMAs at the updates ``rows`` (reference, candidate) both fingerprinted."""
    gaps = np.stack([np.abs(cand.prints[j][:, 0] - ref.prints[i][:, 0]) for i, j in rows])
    diff = gaps.max(axis=1, initial=0.0)
    scale = np.array([np.max(ref.prints[i][:, 1], initial=0.0) for i, _ in rows])
    steps = np.array([i for i, _ in rows])
    result = relative(NAME, diff, scale, tol, None, steps, WHAT)
    what = f"the EMA ({ref.name}" + ("" if cand.name == ref.name else f"; {cand.name}") + ")"
    if result.status == PASS:
        return replace(result, detail=f"{what} agrees in both runs: max {WHAT} "
                                      f"{result.max_rel_diff:.3g} ≤ {tol:g} after "
                                      f"{plural(len(rows), 'fingerprinted update')} "
                                      f"(the last {rows[-1][0]})")
    if lockstep:
        return replace(result, detail=f"{_parts(what, ref, gaps, scale, steps, result, tol)}; "
                                      f"{LOCKSTEP}")
    rel = diff / np.maximum(scale, TINY)
    floor = _twin_gaps(ref, twin, steps)
    judged = (against_twin(result, rel, floor, tol, steps, TWIN_COMMAND, total)
              if floor is not None else jump_or_drift(result, diff, scale, tol, steps))
    if judged.status != FAIL:
        return replace(judged, detail=f"{what}: {judged.detail}")
    return replace(judged, detail=f"{_parts(what, ref, gaps, scale, steps, judged, tol)}; "
                                  f"free-running: {judged.detail}")


def _parts(what: str, ref: EmaPrints, gaps: np.ndarray, scale: np.ndarray, steps: np.ndarray,
           result: CheckResult, tol: float) -> str:
    """Where the candidate's EMA parts (``result.first_divergence``), and in which tensor."""
    k = result.first_divergence
    row = int(np.flatnonzero(steps == k)[0]) if k is not None and (steps == k).any() else 0
    most = int(np.argmax(gaps[row])) if gaps.shape[1] else 0
    where = ref.names[most] if most < len(ref.names) else f"tensor {most}"
    gap = float(gaps[row].max(initial=0.0)) / max(float(scale[row]), TINY)
    return (f"{what} of the candidate parts from the reference's after update {steps[row]} "
            f"({WHAT} {gap:.3g} > {tol:g}, most in {where})")


def _twin_gaps(ref: EmaPrints, twin: EmaPrints | None, steps: np.ndarray) -> np.ndarray | None:
    """The twin's EMA ``|Δsum|/max|p|`` from the reference's at ``steps`` (None: no twin, or it
    lacks a fingerprint there)."""
    if twin is None or any(int(k) not in twin.prints for k in steps):
        return None
    a, b = [ref.prints[int(k)] for k in steps], [twin.prints[int(k)] for k in steps]
    if any(x.shape != y.shape for x, y in zip(a, b, strict=True)):
        return None
    return np.array([np.max(np.abs(y[:, 0] - x[:, 0]), initial=0.0)
                     / max(float(np.max(x[:, 1], initial=0.0)), TINY)
                     for x, y in zip(a, b, strict=True)])
