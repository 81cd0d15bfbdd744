"""``gradient (candidate)`` (``checks.probes``) on synthetic records: each tensor's gradient
dotted with its probe against the reference's, relative to the tensor's norm; a candidate
merged from several ranks' records only (``grad_sq_ranks``)."""

import math

from lrcheck.checks.probes import check_probes, dot_gaps

REFERENCE = {"grad_dots": [0.3, -0.2, 0.0], "grad_sqs": [1.0, 4.0, 0.25]}


def _candidate(dots, squares=(1.0, 4.0, 0.25)):
    return {"grad_dots": list(dots), "grad_sqs": list(squares), "grad_sq_ranks": [2.6, 2.65]}


def test_each_tensor_s_gap_is_relative_to_its_norm_and_a_tensor_not_measured_is_left_out():
    gaps = dot_gaps(_candidate([0.3, -0.2 + 2e-3, None]), REFERENCE)
    assert gaps is not None and gaps[0] == 0.0 and math.isclose(gaps[1], 1e-3) and gaps[2] is None
    assert dot_gaps(_candidate([0.3, -0.2]), REFERENCE) is None  # not as many tensors


def test_the_same_dot_products_pass_at_every_update_and_the_worst_gap_is_said():
    check = check_probes([_candidate([0.3, -0.2, 1e-12])] * 2, [REFERENCE] * 2, 1e-9)
    assert check is not None and check.status == "pass" and check.max_abs_diff == 2e-12
    assert "at 2 updates" in check.detail and "≤ 2e-12" in check.detail, check.detail


def test_a_scaled_tensor_names_its_norm_and_nan_fails():
    scaled = _candidate([0.3, -0.4, 0.0], (1.0, 16.0, 0.25))
    check = check_probes([_candidate(REFERENCE["grad_dots"]), scaled], [REFERENCE] * 2, 1e-9)
    assert check is not None and check.status == "fail" and check.first_divergence == 1
    assert "tensor 1's gradient" in check.detail and "its norm 2 times" in check.detail, \
        check.detail
    check = check_probes([_candidate([math.nan, -0.2, 0.0])], [REFERENCE], 1e-9)
    assert check is not None and check.status == "fail" and "tensor 0's" in check.detail
