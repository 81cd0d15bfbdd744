"""``checks.lockstep`` on hand-made lockstep gaps: the bound of the recorded type, the first
update beyond it with its tensor named, rounding-noise tensors left out and named, the
weights the runs started from, and dropout making the effects a warning."""

import numpy as np
import pytest

from lrcheck.checks.lockstep import BOUNDS, check_grads, check_updates, rounding_noise
from lrcheck.stepwise import StepGaps, widened

NAMES = ("w", "k.bias")


def _gaps(rows, dtype="float32", init_gap=0.0, born_equal=None):
    """``rows``: per update, per tensor (grad_diff, grad_ref, param_diff, update_ref, ulp)."""
    arr = widened(np.array(rows, dtype=np.float64))
    return StepGaps(NAMES, dtype, dtype, np.arange(len(arr)), arr, init_gap, born_equal)


CLEAN = [(1e-8, 1.0, 1e-9, 1e-2, 1e-7), (0.0, 0.0, 0.0, 0.0, 1e-8)]


def test_a_gap_at_the_rounding_level_passes_and_one_of_1e_3_fails_at_its_update():
    ok = _gaps([CLEAN] * 3)
    assert check_grads(ok, None).status == "pass" and check_updates(ok, None).status == "pass"
    bad = _gaps([CLEAN, [(1e-3, 1.0, 1e-9, 1e-2, 1e-7), CLEAN[1]], CLEAN])
    grads = check_grads(bad, None)
    print(grads.detail)
    assert grads.status == "fail" and grads.first_divergence == 1
    assert "most in w (0.001 of its own)" in grads.detail
    moved = _gaps([CLEAN, CLEAN, [(1e-8, 1.0, 1e-5, 1e-2, 1e-7), CLEAN[1]]])
    params = check_updates(moved, None)
    print(params.detail)
    assert params.status == "fail" and params.first_divergence == 2


def test_the_bound_is_the_recorded_type_s():
    # 1e-6 of the gradient: rounding in float32, far beyond it in float64.
    rows = [[(1e-6, 1.0, 1e-9, 1e-2, 1e-7), CLEAN[1]]] * 2
    assert check_grads(_gaps(rows, "float32"), None).status == "pass"
    assert check_grads(_gaps(rows, "float64"), None).status == "fail"
    assert BOUNDS["float64"].grad < 1e-6 < BOUNDS["float32"].grad < 1e-3


def test_a_tensor_with_a_gradient_of_pure_rounding_noise_is_left_out_and_named():
    noisy = (4e-10, 3e-10, 5e-3, 6e-3, 1e-8)  # AdamW: a step of a sizeable part of the LR
    gaps = _gaps([[CLEAN[0], noisy]] * 4)
    assert rounding_noise(gaps, BOUNDS["float32"])[:, 1].all()
    for check in (check_grads, check_updates):
        result = check(gaps, None, "AdamW")
        print(result.detail)
        assert result.status == "pass"
        assert "k.bias get only rounding noise as a gradient" in result.detail
        assert "AdamW's steps on them are not compared" in result.detail
    # The same step on a tensor with a real gradient is a failure.
    real = _gaps([[CLEAN[0], (1e-8, 0.5, 5e-3, 6e-3, 1e-8)]] * 4)
    assert check_updates(real, None).status == "fail"


def test_a_difference_under_the_rounding_floor_of_the_values_is_no_failure():
    # An update far below one ulp of the parameters: both runs round it to the same values or
    # one ulp apart, which says nothing about the update.
    tiny = _gaps([[(1e-9, 1.0, 1e-7, 1e-6, 2e-7), CLEAN[1]]] * 2)
    assert check_updates(tiny, None).status == "pass"


@pytest.mark.parametrize(("born_equal", "words"), [
    (False, "start from different weights"), (None, "start from different weights"),
    (True, "changed them in place before its first step")])
def test_other_starting_weights_are_said_for_what_they_are(born_equal, words):
    result = check_updates(_gaps([CLEAN] * 3, init_gap=3e-5, born_equal=born_equal), None)
    print(result.detail)
    assert result.status == "fail" and result.first_divergence == 0 and words in result.detail
    # Update 0's gradient came from other weights: it is not judged, the later ones are.
    assert check_grads(_gaps([[(1.0, 1.0, 0, 1e-2, 1e-7), CLEAN[1]], CLEAN], init_gap=3e-5),
                       None).status == "pass"


def test_dropout_makes_the_effects_a_warning_with_the_reason():
    bad = _gaps([[(1e-2, 1.0, 1e-4, 1e-2, 1e-7), CLEAN[1]]] * 2)
    for check in (check_grads, check_updates):
        result = check(bad, "dropout p=0.1 active in 1 module")
        assert result.status == "warn" and "not comparable: dropout p=0.1" in result.detail


def test_where_lockstep_stopped_is_said():
    gaps = StepGaps(NAMES, "float32", "float32", np.arange(2), widened(np.array([CLEAN] * 2)), 0.0,
                    None, "the reference ended after 2 update(s)", 2)
    result = check_grads(gaps, None)
    assert "lockstep stopped after update 2: the reference ended after 2 update(s)" in \
        result.detail


def test_a_twin_that_decorrelates_says_up_to_where_and_strict_makes_it_a_failure():
    from lrcheck.checks.effects import TWIN_COMMAND, against_twin, relative
    from lrcheck.checks.status import strictly

    steps = np.array([0, 50, 100, 150])
    rel = np.array([1e-6, 1e-3, 0.2, 0.4])
    twin = np.array([1e-6, 5e-4, 0.15, 0.3])  # drifted 0.1 apart by update 100
    failed = relative("params", rel, np.ones(4), 1e-4, None, steps)
    warned = against_twin(failed, rel, twin, 1e-4, steps, TWIN_COMMAND, 200)
    print(warned.detail)
    assert warned.status == "warn" and warned.first_divergence == 100
    assert warned.detail.startswith("effects judged up to update 100 of 200")
    [strict] = strictly([warned])
    assert strict.status == "fail" and strict.first_divergence == 100
    assert strict.detail.startswith("--strict: effects judged up to update 100")
    # Every other warning stays one.
    other = relative("params", rel, np.ones(4), 1e-4, "dropout p=0.1 active", steps)
    assert strictly([other]) == [other]


def test_every_rank_is_judged_and_the_first_to_fail_is_named():
    from lrcheck.checks.lockstep import every_rank

    good, bad = _gaps([CLEAN] * 3), _gaps([CLEAN, [(1e-2, 1.0, 1e-9, 1e-2, 1e-7), CLEAN[1]],
                                           CLEAN])
    result = every_rank([check_grads(good, None), check_grads(bad, None)])
    assert result.status == "fail" and result.first_divergence == 1
    assert result.detail.startswith("rank 1 of 2: ")
    both = every_rank([check_grads(good, None)] * 2)
    assert both.status == "pass" and both.detail.endswith("the same judged on each of the 2 ranks")


BF16 = {"precision": "bfloat16", "why": "bf16 autocast on cpu"}


def _judged(rows, compute, sizes=(), names=NAMES):
    """``rows``: per update, per tensor, all of ``COLUMNS``; both runs computed in
    ``compute``."""
    arr = np.array(rows, dtype=np.float64)
    return StepGaps(names, "float32", "float32", np.arange(len(arr)), arr, 0.0,
                    compute=compute, reference_compute=compute, sizes=tuple(sizes))


def _row(rel, scale, n=1000, ref=1.0, update=1e-2):
    """A tensor's columns where the gradient is ``rel`` apart, relative, and its coordinates'
    relative gaps average ``scale``; the update as large, its gap rounding-sized."""
    return (rel * ref, ref, 1e-9, update, 1e-7, scale * ref * ref, 0.0, 0, scale * n, n, 0.0, n)


def test_the_bound_is_the_compute_precision_s_and_the_text_says_what_set_it():
    # bf16 autocast's noise, 2e-3 of the gradient: far beyond float32's bound, within bf16's.
    rows = [[_row(2e-3, 3e-5), _row(2e-3, -3e-5)]] * 3
    result = check_grads(_judged(rows, BF16), None)
    print(result.detail)
    assert result.status == "pass"
    assert "≤ 0.05 (the bound for bf16 autocast on cpu)" in result.detail
    float32 = {"precision": "float32", "why": "float32 inside a float64 model (LlamaRMSNorm "
                                              "computes in float32)"}
    assert "(the bound for float32 inside a float64 model (LlamaRMSNorm" in \
        check_grads(_judged(rows, float32), None).detail
    # Without a recorded precision (a file of an earlier lrcheck): the parameters' type.
    plain = _judged(rows, None)
    assert check_grads(plain, None).status == "fail"
    assert "the bound for the parameters' type, float32" in check_grads(plain, None).detail


def test_a_scale_of_1_001_fails_at_its_update_under_bf16_noise():
    noise = [_row(2e-3, 4e-5), _row(3e-3, -5e-5)]
    scaled = [_row(2e-3 + 1e-3, 1e-3), _row(3e-3, 1e-3)]  # the whole gradient 1.001×
    result = check_grads(_judged([noise, scaled, noise], BF16), None)
    print(result.detail)
    assert result.status == "fail" and result.first_divergence == 1
    assert "the gradient is 1.001× the reference's at update 1: a scale, not rounding" in \
        result.detail
    assert BOUNDS["bfloat16"].scale < 1e-3 < BOUNDS["bfloat16"].grad
    # The update scaled: the parameters' gap along the update.
    n = 1000
    step = (1e-8, 1.0, 1e-5, 1e-2, 1e-9, 0.0, 1e-3 * 1e-4, 0, 0.0, n, 1e-3 * n, n)
    params = check_updates(_judged([[_row(2e-3, 0.0), _row(2e-3, 0.0)], [step, step]], BF16),
                           None)
    print(params.detail)
    assert params.status == "fail" and params.first_divergence == 1
    assert "the update is 1.001× the reference's at update 1" in params.detail


def test_one_tensor_scaled_alone_is_named():
    # Tensor k.bias, 512 elements: its gap all along its own gradient (|cos| 1), 1.002×; the
    # model's mean diluted below the bound by the other's 10⁶ coordinates.
    w = _row(2e-3, 0.0, n=1_000_000)
    k = (2e-3 * 0.5, 0.5, 1e-9, 1e-2, 1e-7, 2e-3 * 0.25, 0.0, 0, 2e-3 * 512, 512, 0.0, 512)
    result = check_grads(_judged([[w, k]], BF16, sizes=(1_000_000, 512)), None)
    print(result.detail)
    assert result.status == "fail"
    assert "k.bias's gradient is 1.002× the reference's at update 0" in result.detail


def test_coordinates_whose_gradient_is_rounding_noise_are_named_with_their_count():
    names = ("w", "blocks.0.qkv.bias")
    clean = (1e-8, 1.0, 1e-9, 1e-2, 1e-7, 0.0, 0.0, 0, 0.0, 100, 0.0, 100)
    fused = (1e-8, 0.5, 1e-9, 1e-2, 1e-7, 0.0, 0.0, 16, 0.0, 48, 0.0, 32)
    result = check_updates(_judged([[clean, fused]] * 3, None, sizes=(100, 48), names=names),
                           None, "AdamW")
    print(result.detail)
    assert result.status == "pass"
    assert "blocks.0.qkv.bias 16 of 48" in result.detail
    assert "AdamW's steps on them are not compared" in result.detail
