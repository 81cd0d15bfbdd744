"""``lrcheck diff``: the checks of two runs read from Recorder files, their updates aligned by
``samples_seen``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from lrcheck.checks.cadence import check_cadence
from lrcheck.checks.causes import check_data, check_weights, weight_rtol
from lrcheck.checks.commands import check_grad_norm, check_skips
from lrcheck.checks.effects import TWIN_COMMAND, against_twin, jump_or_drift, loss_scale, relative
from lrcheck.checks.ema import check_ema
from lrcheck.checks.lockstep import check_grads, check_updates, every_rank, moved
from lrcheck.checks.lr import check_lr, lr_resized, lr_with_cause, lr_with_pace
from lrcheck.checks.status import CHECK_NAMES, FAIL, JUDGED_UP_TO, PASS, SKIP, WARN, CheckResult
from lrcheck.checks.tokens import check_token_weights
from lrcheck.plan.judging import Recorded, RecordedJudging
from lrcheck.spec import Tolerances
from lrcheck.stepwise import EmaPrints, RecordedFacts
from lrcheck.trace import RunTrace
from lrcheck.words import plural


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
                       pairs: tuple[np.ndarray, np.ndarray], tol: float,
                       twin: Sequence[np.ndarray | None] | None = None) -> CheckResult:
    """``params`` from parameter fingerprints (``integrations.core.fingerprint``: per tensor its
    sum and largest absolute value, rows of ``(tensors, 2)``) on the aligned updates where both
    files have one: ``max |Δsum| / max maxabs_ref`` over the tensors, at most ``tol``. Beyond
    it: with the reference command's ``twin`` (its fingerprints, update by update), judged
    against the twin's own drift (``effects.against_twin``); without, as a jump or drift."""
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
    result = relative("params", diff, scale, tol, None, steps, what)
    floor = None if twin is None else _twin_gaps(ref, twin, steps)
    if floor is not None and result.status == FAIL:
        result = against_twin(result, diff / np.maximum(scale, 1e-300), floor, tol, steps,
                              TWIN_COMMAND, len(pairs[0]))
    else:
        result = jump_or_drift(result, diff, scale, tol, steps)
    first = ""
    if steps[0] == 0:
        gap0 = diff[0] / max(scale[0], 1e-300)
        why = ("the floor of the order of a float sum" if gap0 <= tol
               else "already beyond the tolerance: the runs part at their first update")
        first = (f"; after update 0, which both runs start from the same weights, {what} is "
                 f"{gap0:.3g}, {why}")
    return replace(result, detail=f"{result.detail}; from parameter fingerprints: {what} is, "
                                  "over the tensors, the change of a tensor's sum over the "
                                  "largest |p| of the reference, not an element's relative "
                                  f"gap{first}")


def _twin_gaps(ref: Sequence[np.ndarray | None], twin: Sequence[np.ndarray | None],
               steps: np.ndarray) -> np.ndarray | None:
    """The twin's ``|Δsum|/max|p|`` from the reference at ``steps`` (None: the twin lacks a
    fingerprint there, or is not the same model)."""
    out = np.empty(len(steps))
    for row, i in enumerate(steps):
        a = ref[int(i)]
        b = twin[int(i)] if int(i) < len(twin) else None
        if a is None or b is None or a.shape != b.shape:
            return None
        out[row] = np.max(np.abs(b[:, 0] - a[:, 0]), initial=0.0) / max(
            float(np.max(a[:, 1], initial=0.0)), 1e-300)
    return out


def check_evidence(ref: RunTrace, cand: RunTrace, facts: RecordedFacts) -> CheckResult:
    """``evidence``: a pass proves something only where something was compared — at least 2
    updates in each run, an LR that is not 0 throughout, and (where it was measured)
    parameters that moved and a gradient that was not zero."""
    for who, trace in (("reference", ref), ("candidate", cand)):
        if len(trace.updates) < 2:
            return CheckResult("evidence", FAIL, None, None,
                               f"the {who} made {plural(len(trace.updates), 'update')}: a pass "
                               "needs at least 2 compared, or it would prove nothing")
    if not np.any(ref.lrs()) and not np.any(cand.lrs()):
        return CheckResult("evidence", FAIL, 0.0, None,
                           f"the LR is 0 at all {len(ref.updates)} updates of both runs: "
                           "neither trained, so this pass would prove nothing")
    gaps = facts.lockstep
    if gaps is not None and len(gaps.steps):
        moves, grads = moved(gaps)
        n = len(gaps.steps)
        if not grads:
            return CheckResult("evidence", FAIL, 0.0, None,
                               f"the gradient is zero at all {n} updates compared: this pass "
                               "would prove nothing")
        if not moves:
            return CheckResult("evidence", FAIL, 0.0, None,
                               f"neither run moved its parameters in {plural(n, 'update')}: "
                               "this pass would prove nothing")
        return CheckResult("evidence", PASS, None, None,
                           f"the reference's parameters moved at {moves} of {n} updates "
                           f"compared, its gradient nonzero at {grads}")
    prints = [p for p in (ref.fingerprints or []) if p is not None]
    if len(prints) >= 2 and all(np.array_equal(prints[0], p) for p in prints[1:]):
        return CheckResult("evidence", FAIL, 0.0, None,
                           f"the reference's parameters are the same at all {len(prints)} "
                           "fingerprints: they never moved, so this pass would prove nothing")
    return CheckResult("evidence", PASS, None, None,
                       f"{len(ref.updates)} updates, the LR not 0 throughout"
                       + ("; the parameters moved between fingerprints" if len(prints) >= 2
                          else "; whether the parameters moved was not recorded"))


def _not_comparable(result: CheckResult | None, reason: str | None) -> CheckResult | None:
    """An effect of runs with stochastic layers: a warning with the ``reason``, not a verdict."""
    if result is None or reason is None or result.status == SKIP or result.status == WARN:
        return result
    return replace(result, status=WARN, detail=f"not comparable: {reason}; {result.detail}")


def recorded_checks(ref: RunTrace, cand: RunTrace, tol: Tolerances,
                    more: Sequence[CheckResult] = (),
                    incomplete: Sequence[str] = (),
                    facts: RecordedFacts | None = None,
                    ema: tuple[EmaPrints | None, EmaPrints | None, EmaPrints | None] | None = None
                    ) -> list[CheckResult]:
    """``lrcheck diff``: two runs read from Recorder files, their updates aligned by
    ``samples_seen``. ``updates``, ``lr``, ``loss`` (where both files recorded one) and
    ``params`` (where both recorded a parameter fingerprint) apply; ``data`` and ``metrics``
    are not recorded. Runs ``lrcheck record`` recorded add ``scaler-skips``, ``cadence``
    (``checks.cadence``), ``ema-params`` (``checks.ema``, where ``ema`` holds both folders'
    EMA and the twin's) and ``grad-norm`` (``checks.commands``), and ``more`` (the ranks'
    and the replicas' agreement) follows.
    Where the candidate ran in lockstep (``facts.judging``), ``params`` and ``grads`` are
    judged update by update from the same state (``checks.lockstep``) instead of
    fingerprints and gradient norms; where lockstep stopped, the updates after it free-running
    (``then_free``; ``grad-norm``); ``evidence`` says whether a pass proves anything."""
    facts = facts or RecordedFacts()
    pairs = align(ref, cand)
    ref_at, cand_at = pairs
    loss = _loss(ref, cand, pairs, tol.loss)
    lr = lr_resized(lr_with_pace(lr_with_cause(check_lr(ref, cand, tol.lr, pairs), ref, cand),
                                 ref, cand, ref_at, cand_at), ref, cand, facts.resumes, pairs)
    skipped = {name: CheckResult(name, SKIP, None, None, "not recorded in a Recorder file")
               for name in ("data", "weights", "params", "metrics")}
    if ref.windows is not None and cand.windows is not None:  # lrcheck record saw the forwards
        skipped["data"], skipped["weights"] = check_data(ref, cand), check_weights(ref, cand)
    found = {**skipped, "updates": _ended(check_aligned_updates(ref, cand, pairs), incomplete),
             "lr": lr, "loss": loss}
    reason, judging = facts.stochastic, facts.judging
    fingerprints = _fingerprints(ref, cand, pairs, tol.params, facts.twin) or found["params"]
    found["params"], grads, later = _effects(ref, cand, pairs, tol.params, facts, fingerprints,
                                             _cause(more))
    found["loss"] = _not_comparable(found["loss"], reason) or found["loss"]
    lockstep = judging.mode is not Recorded.FREE
    kind = next((e.call for e in (ema or ())[:2] if e is not None), None)
    tokens = (None if ref.windows is None or cand.windows is None else
              check_token_weights(ref.windows, cand.windows, pairs, weight_rtol(ref, cand)))
    if tokens is not None and facts.held:
        tokens = replace(tokens, detail=f"{tokens.detail}; {facts.held}")
    extra = [tokens, check_skips(ref, cand, pairs),
             check_cadence(ref, cand, pairs, lockstep, kind),
             None if ema is None else check_ema(ema[0], ema[1], pairs, tol.params, lockstep,
                                                ema[2]),
             _not_comparable(grads, reason), later,
             check_evidence(ref, cand, facts)]
    causes = [c for c in more if c.name == "optimizer"]  # beside the LR, the other cause
    named = [found[name] for name in CHECK_NAMES]
    at = CHECK_NAMES.index("lr") + 1
    return (named[:at] + causes + named[at:] + [c for c in extra if c is not None]
            + [c for c in more if c.name != "optimizer"])


def _fingerprints(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray],
                  tol: float, twin: RunTrace | None) -> CheckResult | None:
    """``params`` from the fingerprints (None where neither file has any)."""
    if ref.fingerprints is not None and cand.fingerprints is not None:
        return check_fingerprints(ref.fingerprints, cand.fingerprints, pairs, tol,
                                  None if twin is None else twin.fingerprints)
    if ref.fingerprints is not None or cand.fingerprints is not None:
        who = "reference" if ref.fingerprints is not None else "candidate"
        return CheckResult("params", SKIP, None, None,
                           f"not recorded: only the {who} file has parameter fingerprints")
    return None


def _loss(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray],
          tol: float) -> CheckResult:
    """``loss`` on the aligned updates where both files recorded one."""
    ref_at, cand_at = pairs
    a, b = ref.losses()[ref_at], cand.losses()[cand_at]
    recorded = np.array([ref.updates[int(i)].loss is not None
                         and cand.updates[int(j)].loss is not None
                         for i, j in zip(ref_at, cand_at, strict=True)], dtype=bool)
    if not recorded.any():
        return CheckResult("loss", SKIP, None, None,
                           "not recorded: no update has a loss in both files")
    diff, scale = np.abs(b[recorded] - a[recorded]), loss_scale(a[recorded])
    return jump_or_drift(relative("loss", diff, scale, tol, None, ref_at[recorded]),
                         diff, scale, tol, ref_at[recorded])


def _ended(updates: CheckResult, incomplete: Sequence[str]) -> CheckResult:
    """The ``updates`` check, failed where a run's record is incomplete (its reasons first)."""
    if not incomplete:
        return updates
    return replace(updates, status=FAIL, detail="; ".join([*incomplete, updates.detail]))


def _effects(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray], tol: float,
             facts: RecordedFacts, fingerprints: CheckResult, cause: str | None
             ) -> tuple[CheckResult, CheckResult | None, CheckResult | None]:
    """``params``, ``grads`` (or, free-running, ``grad-norm``) and the ``grad-norm`` of the
    updates after lockstep stopped, as ``facts.judging`` says (``fingerprints``: ``params``
    judged free-running from the fingerprints, at every update)."""
    twin, judging, reason = facts.twin, facts.judging, facts.stochastic
    if facts.lockstep is not None and judging.mode is not Recorded.FREE:
        ranks = (facts.lockstep, *facts.other_ranks)
        locked = every_rank([check_updates(g, reason, facts.optimizer) for g in ranks])
        grads = every_rank([check_grads(g, reason, facts.optimizer) for g in ranks])
        if judging.free_from is None:
            return locked, grads, None
        after = _after(pairs, judging.free_from)
        free = _not_comparable(_fingerprints(ref, cand, after, tol, twin), reason)
        norms = check_grad_norm(ref, cand, after, tol, twin)
        if norms is not None and not norms.detail.startswith(JUDGED_UP_TO):  # --strict's
            norms = replace(norms, detail=f"free-running from update {judging.free_from}, "
                                          f"after lockstep stopped: {norms.detail}")
        return (then_free(locked, free, judging, len(cand.updates),
                          _fingerprinted(ref, cand, after), cause), grads,
                _not_comparable(norms, reason))
    params = _not_comparable(fingerprints, reason) or fingerprints
    if judging.why and params.status != SKIP:
        judge = "against the twin's drift" if twin is not None else "no twin: as a jump or drift"
        params = replace(params, detail=f"free-running ({judging.why}; judged {judge}): "
                                        f"{params.detail}")
    return params, check_grad_norm(ref, cand, pairs, tol, twin), None


def _after(pairs: tuple[np.ndarray, np.ndarray], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The aligned updates from the candidate's update ``k`` on."""
    keep = pairs[1] >= k
    return pairs[0][keep], pairs[1][keep]


def _fingerprinted(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray]
                   ) -> list[int]:
    """The reference's updates among ``pairs`` that both runs fingerprinted."""
    a, b = ref.fingerprints or [], cand.fingerprints or []
    return [int(i) for i, j in zip(*pairs, strict=True)
            if i < len(a) and j < len(b) and a[i] is not None and b[j] is not None]


def _cause(more: Sequence[CheckResult]) -> str | None:
    """Why the runs part after lockstep stopped, where a cause says so: the optimizers."""
    found = next((c for c in more if c.name == "optimizer" and c.status == FAIL), None)
    return None if found is None else (f"the optimizers differ from update "
                                       f"{found.first_divergence} (see optimizer), so this is "
                                       "not rounding drift")


def then_free(locked: CheckResult, free: CheckResult | None, judging: RecordedJudging,
              updates: int, fingerprinted: Sequence[int], cause: str | None = None
              ) -> CheckResult:
    """``params`` of a pair whose lockstep stopped (``judging``): ``locked``, its judgement in
    lockstep, and ``free``, the updates after it judged free-running from the fingerprints
    (``fingerprinted``: the updates both runs fingerprinted there; ``cause``: a cause that
    explains a gap there, said first where it is a warning). Never a pass of updates
    nobody compared: where the fingerprints end before the last of ``updates``, a warning
    saying how far the effects were judged, which ``--strict`` fails (``strictly``)."""
    k = judging.free_from
    assert k is not None
    if k >= updates:  # lockstep stopped at the last update: it judged them all
        return locked
    if locked.status == FAIL:
        return replace(locked, detail=f"{locked.detail}; {judging.lead(updates)}")
    last = max(fingerprinted, default=judging.through)
    if free is None or free.status == SKIP or last < updates - 1:
        if free is not None and free.status == FAIL:
            return _free_failed(free, judging, locked)
        unjudged = (f"updates {last + 1} to {updates - 1} have no parameter fingerprint in "
                    "both runs, so nobody compared them")
        return CheckResult("params", WARN, locked.max_abs_diff, last,
                           f"{JUDGED_UP_TO} {last} of {updates}: {judging.lead(updates)}; "
                           f"{unjudged}; {locked.detail}", locked.max_rel_diff)
    if free.status == FAIL:
        return _free_failed(free, judging, locked)
    status = WARN if WARN in (free.status, locked.status) else PASS
    lead = (f"free-running from update {k}, at {len(fingerprinted)} fingerprinted updates: "
            f"{free.detail}; before it, {locked.detail}")
    if free.detail.startswith(JUDGED_UP_TO):
        lead = f"{free.detail}; before update {k}, {locked.detail}"
    elif status == WARN and cause:
        lead = f"{cause}; {lead}"
    return CheckResult("params", status, free.max_abs_diff, free.first_divergence
                       if status != PASS else None, lead, free.max_rel_diff)


def _free_failed(free: CheckResult, judging: RecordedJudging, locked: CheckResult
                 ) -> CheckResult:
    return replace(free, detail=f"free-running from update {judging.free_from}: "
                                f"{free.detail}; before it, {locked.detail}")
