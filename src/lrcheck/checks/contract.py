"""Every check of a comparison in the order of the contract, each failure diagnosed with what was
special about the update where the runs first part."""

from __future__ import annotations

from dataclasses import replace

from lrcheck.checks.causes import (
    check_data,
    check_skipped_steps,
    check_updates,
    check_weights,
    not_comparable_reason,
)
from lrcheck.checks.effects import check_loss, check_metrics, check_params
from lrcheck.checks.lr import check_lr, lr_with_cause, lr_with_pace
from lrcheck.checks.status import CHECK_NAMES, FAIL, SKIP, CheckResult
from lrcheck.diagnosis import diagnose
from lrcheck.spec import Tolerances
from lrcheck.trace import RunTrace


def run_checks(ref: RunTrace, cand: RunTrace, tol: Tolerances,
               twin: RunTrace | None = None) -> list[CheckResult]:
    """Every check of the contract, in the order of ``CHECK_NAMES``; ``skipped-steps`` too when
    the runs used a GradScaler (``--amp fp16``)."""
    reason = not_comparable_reason(ref, cand)
    data = check_data(ref, cand)
    lr = lr_with_pace(lr_with_cause(check_lr(ref, cand, tol.lr), ref, cand), ref, cand)
    weights = _diagnosed(check_weights(ref, cand), ref, cand, [data, lr])
    causes = [data, weights, lr]
    params = _diagnosed(check_params(ref, cand, tol.params, reason, twin, causes), ref, cand,
                        causes)
    checks = [
        check_updates(ref, cand),
        data,
        weights,
        lr,
        params,
        _diagnosed(check_loss(ref, cand, tol.loss, reason, twin, causes), ref, cand, causes,
                   params),
        check_metrics(ref, cand, tol.metrics, reason, twin),
    ]
    if cand.skipped is not None or ref.skipped is not None:
        checks.append(check_skipped_steps(ref, cand))
    return checks


SIMULATED = ("updates", "lr")


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
    lr = lr_with_pace(check_lr(ref, cand, tol.lr), ref, cand)
    found = {name: CheckResult(name, SKIP, None, None,
                               "not measured: lrcheck trace steps the schedule without a model")
             for name in CHECK_NAMES if name not in SIMULATED}
    found.update(updates=check_updates(ref, cand), lr=lr)
    return [found[name] for name in CHECK_NAMES]
