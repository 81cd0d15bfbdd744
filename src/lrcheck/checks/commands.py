"""The checks only a run ``lrcheck record`` recorded has: the steps a GradScaler skipped, the
gradient norm, and (a run of several ranks) whether the replicas agree and every rank used
rank 0's LR and made its calls per update."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np

from lrcheck.checks.cadence import RANK_CALLS, rank_cadence
from lrcheck.checks.effects import TWIN_COMMAND, against_twin, jump_or_drift, relative
from lrcheck.checks.status import FAIL, PASS, SKIP, WARN, CheckResult
from lrcheck.trace import RunTrace
from lrcheck.words import plural


def check_skips(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray]
                ) -> CheckResult | None:
    """``scaler-skips``: the GradScaler skipped the same number of steps before each aligned
    update in both runs (None: neither run recorded skips). Not lrcheck's own loop's
    ``skipped-steps`` (``checks.causes``), which asks whether the schedule held still on a
    skipped step."""
    if ref.skips is None or cand.skips is None:
        return None
    a = np.array([ref.skips[int(i)] for i in pairs[0]], dtype=np.int64)
    b = np.array([cand.skips[int(j)] for j in pairs[1]], dtype=np.int64)
    if not a.any() and not b.any():
        return CheckResult("scaler-skips", SKIP, None, None,
                           "no optimizer step was skipped by a GradScaler in either run")
    apart = np.flatnonzero(a != b)
    if len(apart):
        k = int(pairs[0][apart[0]])
        return CheckResult("scaler-skips", FAIL, float(abs(int(b[apart[0]]) - int(a[apart[0]]))),
                           k, f"before update {k} the GradScaler skipped {int(b[apart[0]])} "
                              f"step(s) in the candidate, {int(a[apart[0]])} in the reference")
    return CheckResult("scaler-skips", PASS, 0.0, None,
                       f"the GradScaler skipped {int(a.sum())} step(s) in each run, before "
                       "the same updates")


def check_grad_norm(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray],
                    tol: float, twin: RunTrace | None = None) -> CheckResult | None:
    """``grad-norm``: the gradient norm of the updates where both runs took one, judged as
    ``params`` is (against the reference command's ``twin`` where there is one, else as a
    jump against the drift); None where neither run recorded one."""
    if ref.grad_norms is None or cand.grad_norms is None:
        return None
    both = [(int(i), ref.grad_norms[int(i)], cand.grad_norms[int(j)])
            for i, j in zip(*pairs, strict=True)
            if ref.grad_norms[int(i)] is not None and cand.grad_norms[int(j)] is not None]
    if not both:
        return CheckResult("grad-norm", SKIP, None, None,
                           "no update has a gradient norm in both runs")
    steps = np.array([k for k, _, _ in both])
    a = np.array([x for _, x, _ in both], dtype=np.float64)
    b = np.array([y for _, _, y in both], dtype=np.float64)
    diff, scale = np.abs(b - a), np.maximum(np.abs(a), 1e-300)
    result = relative("grad-norm", diff, scale, tol, None, steps, "|Δ‖g‖|/‖g‖")
    norms = None if twin is None else twin.grad_norms
    own = None if norms is None else [norms[k] if k < len(norms) else None for k in steps]
    if result.status == FAIL and own is not None and all(x is not None for x in own):
        floor = np.abs(np.array(own, dtype=np.float64) - a) / scale
        return against_twin(result, diff / scale, floor, tol, steps, TWIN_COMMAND,
                            len(pairs[0]))
    return jump_or_drift(result, diff, scale, tol, steps)


def check_replicas(name: str, gaps: Sequence[tuple[float, ...]] | None, ranks: int,
                   tol: float) -> CheckResult | None:
    """``replicas``: the parameter fingerprints of every rank of a replicated run (DDP) agree
    with rank 0's within ``tol`` (``gaps``: at each fingerprinted update, in order, the largest
    ``|Δsum|/max|p|``, the update, the rank and, where not rank 0, the rank it is a replica of:
    the one holding the same shards, ``record.placed``); a failure is placed at the first
    update beyond ``tol``, the largest gap named beside it. None for a run of one rank, one
    sharded with no replica, or one without fingerprints."""
    if not gaps:
        return None
    worst = max(gaps, key=lambda g: (np.nan_to_num(g[0], nan=np.inf), -g[1]))
    first = next((g for g in gaps if not g[0] <= tol), None)  # NaN fails too
    if first is not None:
        value, update, rank = first[0], int(first[1]), int(first[2])
        of = int(first[3]) if len(first) > 3 else 0
        largest = ("" if worst[1] == update else
                   f"; the largest gap is {worst[0]:.3g}, rank {worst[2]}'s after update "
                   f"{worst[1]}")
        return CheckResult(f"replicas ({name})", FAIL, worst[0], update,
                           f"rank {rank}'s parameters part from rank {of}'s after update {update} "
                           f"(|Δsum|/max|p| {value:.3g} > {tol:g}){largest}: the {ranks} "
                           f"replicas of the {name} do not train in sync")
    whom = "rank 0's" if len(worst) < 4 else "those of the rank holding the same shards"
    return CheckResult(f"replicas ({name})", PASS, worst[0], None,
                       f"the {ranks} ranks' parameters agree with {whom} "
                       f"(|Δsum|/max|p| ≤ {worst[0]:.3g})")


def check_merged(name: str, records: Sequence[Mapping[str, object]]) -> CheckResult | None:
    """``shards``: not judged (a skip) where the ranks' records of an update could not be
    merged into the whole model's (``record.placed.unmerged``: its fingerprint and gradient
    norm left absent, so ``params`` and ``grad-norm`` hold the other updates only, and a check
    judging nothing else skips too); None where every update merged."""
    failed = [(k, why) for k, r in enumerate(records) if isinstance(why := r.get("unmerged"), str)]
    if not failed:
        return None
    k, why = failed[0]
    return CheckResult(f"shards ({name})", SKIP, None, None,
                       f"not judged at {plural(len(failed), 'update')} of the {name}, from "
                       f"update {k}: {why}, so the whole model's parameters and gradient norm "
                       "there are unknown (params, grad-norm and the checks of the merged "
                       "gradient leave those updates out, rank 0's part never taken for them)")


def check_ranks(name: str, lrs: Sequence[np.ndarray], steps: Sequence[np.ndarray | None],
                tol: float, cadence: Sequence[Sequence[dict[str, float]] | None] = ()
                ) -> CheckResult | None:
    """``ranks``: every rank of a multi-process run used rank 0's LR at every update, each
    param group within ``tol·max(1, |lr|)`` as ``lr`` judges (``lrs``: per rank, rank 0 first,
    updates × param groups; ``steps``: per rank, its ``scheduler.step()`` calls before each
    update, None where not counted), and made rank 0's calls per update (``cadence``: per rank,
    the counts ``checks.cadence`` judges, ``rank_cadence``; empty or None where not counted). A
    failure is placed at the first update where a rank's LR or calls part from rank 0's, and
    names the scheduler steps that explain an LR; scheduler steps that differ while every LR is
    equal are a warning. None for a run of one rank."""
    result = _ranks_lr(name, lrs, steps, tol)
    counted = [c for c in cadence if c is not None]
    if result is None or not counted or len(counted) < len(cadence):
        return result
    parted = rank_cadence(counted)
    if parted is None:
        return replace(result, detail=f"{result.detail}; every rank made rank 0's calls per "
                                      f"update ({', '.join(n for _, n in RANK_CALLS)}, the "
                                      "clip's settings, the optimizer's step counter)") \
            if result.status == PASS else result
    k, text = parted
    if result.status == FAIL and result.first_divergence is not None \
            and result.first_divergence <= k:
        return replace(result, detail=f"{result.detail}; {text}")
    lr = f"; {result.detail}" if result.status != PASS else ""
    return CheckResult(f"ranks ({name})", FAIL, None, k,
                       f"{text}: the {len(lrs)} ranks of the {name} do not train alike{lr}")


def _ranks_lr(name: str, lrs: Sequence[np.ndarray], steps: Sequence[np.ndarray | None],
              tol: float) -> CheckResult | None:
    """``check_ranks`` of the LR and the scheduler steps alone."""
    if len(lrs) < 2:
        return None
    base = lrs[0]
    count = base.shape[0]
    parted: list[tuple[int, int, int]] = []  # (update, rank, param group)
    for rank, other in enumerate(lrs[1:], start=1):
        if other.shape != base.shape:
            parted.append((0, rank, -1))
            continue
        bad = np.argwhere(~(np.abs(other - base) <= tol * np.maximum(1.0, np.abs(base))))
        if len(bad):
            parted.append((int(bad[0][0]), rank, int(bad[0][1])))
    counted = all(s is not None for s in steps)
    if not parted:
        steps_apart = _steps_apart(steps) if counted else None
        if steps_apart is not None:
            k, rank = steps_apart
            ours, theirs = _calls(steps, rank, k)
            return CheckResult(f"ranks ({name})", WARN, None, k,
                               f"the {len(lrs)} ranks used the same LR at all "
                               f"{plural(count, 'update')}, but rank {rank} made "
                               f"{plural(ours, 'scheduler.step() call')} before update {k} "
                               f"against {theirs} on rank 0: its scheduler's state is not "
                               "rank 0's")
        calls = " and made the same scheduler.step() calls" if counted else ""
        return CheckResult(f"ranks ({name})", PASS, 0.0, None,
                           f"the {len(lrs)} ranks used the same LR at all "
                           f"{plural(count, 'update')}{calls}")
    k, rank, group = min(parted)
    others = sorted({r for _, r, _ in parted} - {rank})
    also = f"; rank{'s' * (len(others) > 1)} {', '.join(map(str, others))} too" if others else ""
    if group < 0:
        return CheckResult(f"ranks ({name})", FAIL, None, 0,
                           f"rank {rank} has {plural(lrs[rank].shape[1], 'param group')}, "
                           f"rank 0 {base.shape[1]}{also}: the ranks do not train alike")
    mine, zero = float(lrs[rank][k, group]), float(base[k, group])
    where = f" (param group {group})" if base.shape[1] > 1 else ""
    head = (f"rank {rank}'s LR differs from rank 0's from update {k}{where} ({mine:.6g} on "
            f"rank {rank}, {zero:.6g} on rank 0)")
    why = _why(steps, rank, k) if counted else "the scheduler steps were not counted"
    return CheckResult(f"ranks ({name})", FAIL, abs(mine - zero), k,
                       f"{head}: {why}{also}; the {len(lrs)} ranks of the {name} do not train "
                       "alike")


def _steps_apart(steps: Sequence[np.ndarray | None]) -> tuple[int, int] | None:
    """The first update (and the lowest rank there) before which a rank's scheduler steps
    differ from rank 0's; None where they never do."""
    base = steps[0]
    assert base is not None
    found = [(int(np.flatnonzero(s != base)[0]), rank)
             for rank, s in enumerate(steps[1:], start=1)
             if s is not None and (s != base).any()]
    return min(found) if found else None


def _calls(steps: Sequence[np.ndarray | None], rank: int, k: int) -> tuple[int, int]:
    mine, zero = steps[rank], steps[0]
    assert mine is not None and zero is not None
    return int(mine[k]), int(zero[k])


def _why(steps: Sequence[np.ndarray | None], rank: int, k: int) -> str:
    """What rank ``rank``'s scheduler steps say about its LR parting at update ``k``."""
    mine, zero = steps[rank], steps[0]
    assert mine is not None and zero is not None
    apart = np.flatnonzero(mine[:k + 1] != zero[:k + 1])
    if not len(apart):
        return (f"its scheduler stepped as rank 0's did "
                f"({plural(int(zero[:k + 1].sum()), 'scheduler.step() call')} each up to "
                f"update {k}): its LR was set otherwise")
    j = int(apart[0])
    ours, theirs = int(mine[j]), int(zero[j])
    did = ("did not step" if ours == 0 else
           f"stepped {plural(ours, 'time')}" if ours > theirs else
           f"stepped only {plural(ours, 'time')}")
    when = "" if j == k else f" from update {j}"
    return (f"its scheduler {did}{when} ({ours} scheduler.step() call{'s' * (ours != 1)} on "
            f"rank {rank} against {theirs} on rank 0 before update {j})")


def check_recording(who: str, processes: Sequence[dict[str, object]]) -> CheckResult | None:
    """``recording (who)``: a WARN where the recording of some process of ``who``'s command was
    switched off by its guard (``record.guard``: an error in one of its hooks; the training went
    on), saying after how many updates and why: what came after was not recorded, so not
    judged. None where every process recorded to its end."""
    offs = [(p.get("rank", 0), off) for p in processes
            if isinstance(off := p.get("recording_off"), dict)]
    if not offs:
        return None
    rank, off = offs[0]
    return CheckResult(f"recording ({who})", WARN, None, off.get("after"),
                       f"the recording of rank {rank} of the {who}'s command was switched off "
                       f"after {off.get('after')} update(s), the training going on: "
                       f"{off.get('reason')}; its later updates were not recorded, so not "
                       f"judged" + (f" ({len(offs)} processes)" if len(offs) > 1 else ""))

