"""The pure checks on hand-made traces."""

import numpy as np
import pytest

from lrcheck.checks import (
    check_lr,
    check_metrics,
    check_params,
    check_updates,
    not_comparable_reason,
    run_checks,
    verdict,
)
from lrcheck.spec import RunSpec, Tolerances
from lrcheck.trace import EpochMetrics, RunTrace, SkippedStep, UpdateRecord


def trace(lrs, *, params=None, losses=None, spec=None, acc=0.9, f1=0.9, layers=(), stopped=None):
    n = len(lrs)
    losses = losses if losses is not None else [1.0] * n
    updates = [UpdateRecord(k, tuple(np.atleast_1d(lr)), losses[k], 32 * (k + 1), k, 0)
               for k, lr in enumerate(lrs)]
    params = np.asarray(params if params is not None else np.ones((n, 3)), dtype=np.float64)
    return RunTrace(spec or RunSpec(bs=32, accum=1), updates,
                    [EpochMetrics(0, n - 1, acc, f1)], params, n, None, tuple(layers),
                    stopped=stopped)


def test_lr_equal_passes_with_the_max_difference():
    result = check_lr(trace([0.1, 0.05]), trace([0.1, 0.05 + 1e-14]), 1e-12)
    assert result.status == "pass"
    assert result.max_abs_diff == pytest.approx(1e-14, rel=0.1)


def test_lr_failure_names_the_first_update_and_both_values():
    ref, cand = trace([0.1, 0.09, 0.08, 0.07]), trace([0.1, 0.09, 0.075, 0.05])
    result = check_lr(ref, cand, 1e-12)
    assert result.status == "fail"
    assert result.first_divergence == 2
    assert "update 2" in result.detail and "0.08" in result.detail and "0.075" in result.detail
    assert result.max_abs_diff == pytest.approx(0.02)


def test_lr_tolerance_is_scaled_by_max_1_lr():
    assert check_lr(trace([100.0]), trace([100.0 + 5e-11]), 1e-12).status == "pass"
    assert check_lr(trace([100.0]), trace([100.0 + 5e-10]), 1e-12).status == "fail"


def test_lr_names_the_param_group():
    result = check_lr(trace([[0.1, 0.1]]), trace([[0.1, 0.2]]), 1e-12)
    assert result.status == "fail" and "param group 1" in result.detail


def test_lr_equal_prefix_but_different_lengths_fails():
    result = check_lr(trace([0.1, 0.1]), trace([0.1, 0.1, 0.1]), 1e-12)
    assert result.status == "fail" and result.first_divergence == 2


def test_updates():
    assert check_updates(trace([0.1] * 3), trace([0.1] * 3)).status == "pass"
    result = check_updates(trace([0.1] * 3), trace([0.1] * 6))
    assert result.status == "fail" and "3" in result.detail and "6" in result.detail
    stopped = check_updates(trace([0.1] * 3), trace([0.1] * 2, stopped="scheduler refused"))
    assert stopped.status == "fail" and "scheduler refused" in stopped.detail


def test_params_relative_to_the_largest_parameter():
    ref = trace([0.1, 0.1], params=[[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    close = trace([0.1, 0.1], params=[[1.0, 2.0, 4.0], [1.0, 2.0, 4.0 + 2e-9]])
    far = trace([0.1, 0.1], params=[[1.0, 2.0, 4.0], [1.0, 2.0 + 1e-6, 4.0]])
    assert check_params(ref, close, 1e-9, None).status == "pass"
    result = check_params(ref, far, 1e-9, None)
    assert result.status == "fail" and result.first_divergence == 1
    assert result.max_rel_diff == pytest.approx(1e-6 / 4, rel=1e-3)


def test_not_comparable_turns_failures_into_warnings_with_the_reason():
    ref = trace([0.1], params=[[1.0, 1.0, 1.0]], layers=("BatchNorm1d",), spec=RunSpec(bs=32))
    cand = trace([0.1], params=[[1.1, 1.0, 1.0]], layers=("BatchNorm1d",),
                 spec=RunSpec(bs=16, accum=2), acc=0.95)
    reason = not_comparable_reason(ref, cand)
    assert reason is not None and "BatchNorm" in reason and "16" in reason and "32" in reason
    results = {r.name: r for r in run_checks(ref, cand, Tolerances())}
    assert results["params"].status == "warn" and "BatchNorm" in results["params"].detail
    assert results["metrics"].status == "warn" and "(+0.0500)" in results["metrics"].detail
    assert results["lr"].status == "pass"
    assert verdict(list(results.values())) == "pass"


def test_batchnorm_with_the_same_per_forward_batch_is_comparable():
    ref = trace([0.1], layers=("BatchNorm1d",), spec=RunSpec(bs=16, world=1))
    assert not_comparable_reason(ref, trace([0.1], layers=("BatchNorm1d",),
                                            spec=RunSpec(bs=16, world=1))) is None


def test_metrics_tolerance_is_absolute():
    assert check_metrics(trace([0.1]), trace([0.1], acc=0.905), 0.01, None).status == "pass"
    result = check_metrics(trace([0.1]), trace([0.1], f1=0.8), 0.01, None)
    assert result.status == "fail" and "macro-F1" in result.detail


def test_verdict_fails_on_any_failed_check():
    results = run_checks(trace([0.1, 0.1]), trace([0.1, 0.2]), Tolerances())
    assert [r.name for r in results] == ["updates", "data", "weights", "lr", "params", "loss",
                                                        "metrics"]
    assert verdict(results) == "fail"


def test_skipped_steps_and_lr_aligned_by_applied_updates():
    from lrcheck.checks import check_skipped_steps

    ref = trace([0.3, 0.2, 0.1])
    cand = trace([0.3, 0.3, 0.2, 0.1])  # update 1 was skipped and the schedule held still
    cand.skipped = [SkippedStep(update=1, scheduler_steps=0)]
    assert check_lr(ref, cand, 1e-12).status == "pass"
    assert check_skipped_steps(ref, cand).status == "pass"
    moved = trace([0.3, 0.3, 0.1, 0.05])
    moved.skipped = [SkippedStep(update=1, scheduler_steps=1)]
    lr = check_lr(ref, moved, 1e-12)
    assert lr.status == "fail" and lr.first_divergence == 2  # the candidate's own numbering
    skipped = check_skipped_steps(ref, moved)
    assert skipped.status == "fail" and skipped.first_divergence == 1
    assert check_skipped_steps(ref, ref).status == "skip"


def test_a_run_that_diverged_to_nan_fails_instead_of_passing():
    ref = trace([0.1, 0.1], params=[[1.0, 1.0, 1.0]] * 2, losses=[1.0, 0.5])
    cand = trace([0.1, float("nan")], params=[[1.0, 1.0, 1.0], [float("nan")] * 3],
                 losses=[1.0, float("nan")])
    for result in (check_params(ref, cand, 1e-9, None), check_lr(ref, cand, 1e-12)):
        assert result.status == "fail" and result.first_divergence == 1, result
    assert "not finite" in check_params(ref, cand, 1e-9, None).detail


def test_both_runs_stopped_says_both_with_each_reason():
    same = "scheduler.step() raised RuntimeError at update 2: no"
    ref = trace([0.1, 0.1, 0.1], stopped=same)
    cand = trace([0.1, 0.1, 0.1], stopped=same)
    ref.planned_updates = cand.planned_updates = 44
    result = check_updates(ref, cand)
    assert result.status == "fail" and result.first_divergence == 3
    assert result.detail == (f"both runs stopped, the reference after 3 of 44 updates and the "
                             f"candidate after 3 of 44: {same}")
    other = trace([0.1, 0.1], stopped="scheduler.step() raised ValueError at update 1: x")
    other.planned_updates = 44
    detail = check_updates(ref, other).detail
    assert detail.startswith("both runs stopped: the reference after 3 of 44 updates (" + same)
    assert "the candidate after 2 of 44 updates (scheduler.step() raised ValueError" in detail


def test_a_nan_lr_in_both_runs_is_said_so():
    nan = float("nan")
    result = check_lr(trace([0.1, nan, nan]), trace([0.1, nan, nan]), 1e-12)
    assert result.status == "fail" and result.first_divergence == 1
    assert result.detail.startswith("the LR is not finite in both runs from update 1: nan")
    assert "differs" not in result.detail
    one = check_lr(trace([0.1, 0.1]), trace([0.1, nan]), 1e-12)
    assert one.status == "fail" and "reference 0.1, candidate nan" in one.detail


def test_counts_of_one_are_singular():
    one = check_lr(trace([0.1]), trace([0.1]), 1e-12)
    assert one.detail == "equal at all 1 update (1 param group)"
    two = check_lr(trace([(0.1, 0.2)] * 2), trace([(0.1, 0.2)] * 2), 1e-12)
    assert two.detail == "equal at all 2 updates (2 param groups)"
    assert check_params(trace([0.1]), trace([0.1]), 1e-9, None).detail.endswith("over 1 update")
    assert check_updates(trace([0.1]), trace([0.1, 0.1])).detail == \
        "reference made 1 optimizer update, candidate 2"
