"""``stages (candidate)`` (``checks.stages``) on synthetic records: a pipeline run's gradient
norm stage by stage against the reference's same tensors, and a stage scaled by 1/n (n the
micro-batches: twice) named."""

import math

from lrcheck.checks.stages import check_stages, scaled_by, stage_ratios

REFERENCE = {"grad_sqs": [1.0, 3.0, 4.0, 12.0, 0.5]}  # stage 0: 4.0, stage 1: 16.5


def _candidate(stage0=1.0, stage1=1.0, micro=4):
    """A stitched record of 2 stages (2 and 3 tensors), each stage's norm times its factor."""
    return {"grad_sq_stages": [4.0 * stage0 ** 2, 16.5 * stage1 ** 2], "stage_tensors": [2, 3],
            "backward": micro}


def test_each_stage_is_held_against_the_reference_tensors_it_holds():
    ratios = stage_ratios(_candidate(0.5, 1.0), REFERENCE)
    assert ratios is not None and math.isclose(ratios[0], 0.5) and math.isclose(ratios[1], 1.0)
    assert stage_ratios({**_candidate(), "stage_tensors": [2, 2]}, REFERENCE) is None
    assert stage_ratios(_candidate(), {"grad_sq": 20.5}) is None  # not per tensor


def test_the_same_gradients_pass_at_every_update():
    check = check_stages([_candidate()] * 3, [REFERENCE] * 3, 1e-4)
    assert check is not None and check.status == "pass" and check.max_abs_diff <= 1e-15
    assert "at 3 updates" in check.detail


def test_a_stage_scaled_by_one_over_the_micro_batches_again_is_named_at_its_first_update():
    check = check_stages([_candidate(), _candidate(1.0, 0.25)], [REFERENCE] * 2, 1e-4)
    assert check is not None and check.status == "fail" and check.first_divergence == 1
    assert "stage 1's gradients scaled by 1/4 twice" in check.detail, check.detail
    assert "stage 0" not in check.detail and "4 micro-batches" in check.detail


def test_a_scaling_that_is_not_the_micro_batches_is_named_without_twice():
    check = check_stages([_candidate(1 / 3, 2.0)], [REFERENCE], 1e-4)
    assert check is not None and check.status == "fail"
    assert "stage 0's gradients scaled by 1/3;" in check.detail, check.detail
    assert "stage 1's gradients 2 times the reference's" in check.detail
    assert "twice" not in check.detail
    odd = check_stages([_candidate(0.9)], [REFERENCE], 1e-4)
    assert odd is not None and "stage 0's gradient norm is 0.9 times" in odd.detail


def test_scaled_by_finds_n_or_none():
    assert scaled_by(0.25, 1e-9) == 4 and scaled_by(3.0, 1e-9) == -3
    assert scaled_by(0.3, 1e-6) is None and scaled_by(1.0, 1e-6) is None


def test_a_stage_without_gradient_in_both_runs_passes_and_in_one_run_fails_without_a_crash():
    still = {"grad_sqs": [0.0, 0.0, 4.0, 12.0, 0.5]}
    both = check_stages([{**_candidate(), "grad_sq_stages": [0.0, 16.5]}], [still], 1e-4)
    assert both is not None and both.status == "pass"
    one = check_stages([_candidate()], [still], 1e-4)
    assert one is not None and one.status == "fail" and "stage 0" in one.detail
    assert scaled_by(math.inf, 1e-6) is None and scaled_by(math.nan, 1e-6) is None


def test_a_gap_that_only_grew_is_drift_and_one_that_jumped_or_scales_fails():
    """Free-running runs part by rounding: from update 0, where both start from the same
    weights, a gap beyond the bound fails; a gap that grew smoothly past it later warns; one
    that jumped 100× in an update fails there."""
    grown = [_candidate(1 + 1e-7 * 3 ** k) for k in range(12)]  # 1e-7 … 1.8e-2: 2.2e-4 at 7
    drift = check_stages(grown, [REFERENCE] * 12, 1e-4)
    assert drift is not None and drift.status == "warn" and drift.first_divergence == 7
    assert "numerical drift, not a failure" in drift.detail
    jump = check_stages([*grown[:5], _candidate(1.2)], [REFERENCE] * 6, 1e-4)
    assert jump is not None and jump.status == "fail" and jump.first_divergence == 5
    first = check_stages([_candidate(1.001)], [REFERENCE], 1e-4)
    assert first is not None and first.status == "fail" and first.first_divergence == 0


def test_nothing_measured_is_not_judged():
    assert check_stages([{"grad_sq": 1.0}], [REFERENCE], 1e-4) is None


def test_what_the_stitch_took_where_it_could_not_tell_is_said_and_never_silently():
    """Finding 6: names two stages hold, told apart by their fingerprints, are said."""
    told = {"stage_names": "2 names (a, b) held by several stages taken for …"}
    check = check_stages([{**_candidate(), **told}], [REFERENCE], 1e-4)
    assert check is not None and check.status == "pass"
    assert check.detail.endswith("; 2 names (a, b) held by several stages taken for …")
    unmatched = {**_candidate(), "stage_tensors": [2, 2], **told}  # not the reference's count
    check = check_stages([unmatched], [REFERENCE], 1e-4)
    assert check is not None and check.status == "skip" and "held by several" in check.detail
    assert check_stages([{**_candidate(), "stage_tensors": [2, 2]}], [REFERENCE], 1e-4) is None
