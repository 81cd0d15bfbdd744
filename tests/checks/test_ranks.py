"""``checks.commands``' checks of a multi-process run's ranks, on hand-made per-rank series:
every rank's LR against rank 0's (``ranks``), and the replicas' parameters (``replicas``)."""

import numpy as np

from lrcheck.checks.commands import check_ranks, check_replicas

TOL = 1e-12


def _lrs(*series):
    return [np.asarray(s, dtype=np.float64).reshape(len(s), -1) for s in series]


def _steps(*series):
    return [np.asarray(s, dtype=np.int64) for s in series]


def test_a_rank_whose_scheduler_did_not_step_fails_at_the_first_update_it_parts():
    lrs = _lrs([0.001, 0.002, 0.003, 0.004], [0.001, 0.001, 0.001, 0.001])
    result = check_ranks("candidate", lrs, _steps([1, 1, 1, 1], [1, 0, 0, 0]), TOL)
    print(result.detail)
    assert result.name == "ranks (candidate)" and result.status == "fail"
    assert result.first_divergence == 1 and result.max_abs_diff == 0.001
    assert result.detail.startswith(
        "rank 1's LR differs from rank 0's from update 1 (0.001 on rank 1, 0.002 on rank 0): "
        "its scheduler did not step (0 scheduler.step() calls on rank 1 against 1 on rank 0 "
        "before update 1)")


def test_equal_ranks_pass_and_say_how_many_updates():
    lrs = _lrs([0.1, 0.05, 0.02], [0.1, 0.05, 0.02 + 1e-15], [0.1, 0.05, 0.02])
    result = check_ranks("reference", lrs, _steps([1, 1, 1], [1, 1, 1], [1, 1, 1]), TOL)
    assert result.status == "pass" and result.first_divergence is None
    assert result.detail == ("the 3 ranks used the same LR at all 3 updates and made the same "
                             "scheduler.step() calls")
    assert check_ranks("reference", lrs[:1], _steps([1, 1, 1]), TOL) is None  # one rank


def test_the_tolerance_is_lr_s_own_and_not_loosened():
    lrs = _lrs([0.1, 0.1], [0.1, 0.1 + 2e-12])
    result = check_ranks("candidate", lrs, _steps([1, 1], [1, 1]), TOL)
    assert result.status == "fail" and result.first_divergence == 1


def test_the_earliest_rank_is_named_and_the_others_listed():
    lrs = _lrs([1.0, 2.0, 3.0], [1.0, 2.0, 9.0], [1.0, 5.0, 6.0], [1.0, 2.0, 7.0])
    result = check_ranks("candidate", lrs, _steps([1, 1, 1], [1, 1, 2], [1, 2, 1], [1, 1, 3]),
                         TOL)
    print(result.detail)
    assert result.first_divergence == 1
    assert result.detail.startswith("rank 2's LR differs from rank 0's from update 1 (5 on "
                                    "rank 2, 2 on rank 0): its scheduler stepped 2 times")
    assert "; ranks 1, 3 too;" in result.detail


def test_steps_that_parted_earlier_are_named_from_their_update():
    # rank 1 skipped a step of a constant stretch at update 1: its LR parts only at update 3
    lrs = _lrs([0.1, 0.1, 0.1, 0.05], [0.1, 0.1, 0.1, 0.1])
    result = check_ranks("candidate", lrs, _steps([1, 1, 1, 1], [1, 0, 1, 1]), TOL)
    print(result.detail)
    assert result.first_divergence == 3
    assert ("its scheduler did not step from update 1 (0 scheduler.step() calls on rank 1 "
            "against 1 on rank 0 before update 1)") in result.detail


def test_an_lr_set_otherwise_on_a_rank_says_its_scheduler_stepped_alike():
    lrs = _lrs([0.1, 0.1], [0.2, 0.2])
    result = check_ranks("candidate", lrs, _steps([1, 0], [1, 0]), TOL)
    assert result.first_divergence == 0
    assert "its scheduler stepped as rank 0's did (1 scheduler.step() call each up to " \
           "update 0): its LR was set otherwise" in result.detail
    uncounted = check_ranks("candidate", lrs, [None, None], TOL)
    assert uncounted.status == "fail" and "were not counted" in uncounted.detail


def test_param_groups_are_named_and_their_number_compared():
    lrs = [np.array([[0.1, 0.2], [0.1, 0.2]]), np.array([[0.1, 0.2], [0.1, 0.3]])]
    result = check_ranks("candidate", lrs, _steps([1, 1], [1, 1]), TOL)
    assert result.first_divergence == 1 and "(param group 1)" in result.detail
    fewer = [np.array([[0.1, 0.2]]), np.array([[0.1]])]
    result = check_ranks("candidate", fewer, _steps([1], [1]), TOL)
    assert result.status == "fail" and "rank 1 has 1 param group, rank 0 2" in result.detail


def test_a_nan_lr_on_a_rank_fails():
    result = check_ranks("candidate", _lrs([0.1, 0.1], [0.1, np.nan]), _steps([1, 1], [1, 1]),
                         TOL)
    assert result.status == "fail" and result.first_divergence == 1


def test_equal_lrs_with_other_scheduler_steps_are_a_warning():
    lrs = _lrs([0.1, 0.1, 0.1], [0.1, 0.1, 0.1])
    result = check_ranks("candidate", lrs, _steps([1, 1, 1], [1, 0, 0]), TOL)
    print(result.detail)
    assert result.status == "warn" and result.first_divergence == 1
    assert "rank 1 made 0 scheduler.step() calls before update 1 against 1 on rank 0" \
        in result.detail


def test_replicas_are_placed_at_the_first_update_beyond_the_tolerance_with_the_worst_beside():
    gaps = [(0.0, 0, 1), (3e-5, 1, 1), (0.01, 2, 1), (0.38, 31, 1), (0.2, 32, 1)]
    result = check_replicas("candidate", gaps, 2, 1e-5)
    print(result.detail)
    assert result.status == "fail" and result.first_divergence == 1
    assert result.max_abs_diff == 0.38
    assert result.detail == ("rank 1's parameters part from rank 0's after update 1 "
                             "(|Δsum|/max|p| 3e-05 > 1e-05); the largest gap is 0.38, rank 1's "
                             "after update 31: the 2 replicas of the candidate do not train in "
                             "sync")


def test_replicas_within_the_tolerance_pass_and_a_nan_gap_fails():
    assert check_replicas("reference", [(1e-7, 0, 1), (2e-7, 5, 1)], 2, 1e-5).status == "pass"
    assert check_replicas("reference", None, 2, 1e-5) is None
    nan = check_replicas("reference", [(0.0, 0, 1), (float("nan"), 3, 1)], 2, 1e-5)
    assert nan.status == "fail" and nan.first_divergence == 3
    once = check_replicas("reference", [(0.0, 0, 1), (0.5, 3, 2)], 4, 1e-5)
    assert once.detail.startswith("rank 2's parameters part from rank 0's after update 3 "
                                  "(|Δsum|/max|p| 0.5 > 1e-05): the 4 replicas")


def _calls(updates=3, **per_update):
    """A rank's calls per update: 2 micro-batches, all reaching the update, clipped once at
    max_norm 1, the optimizer's counter at k + 1; ``per_update``: a key's values instead."""
    rows = [{"backward": 2, "reached": 2, "zero_grad": 1, "clip_grad_norm": 1, "max_norm": 1.0,
             "clip_grad_value": 0, "ema_update": 0, "scaler_update": 0, "opt_step": k + 1.0}
            for k in range(updates)]
    for key, values in per_update.items():
        for row, value in zip(rows, values, strict=True):
            row[key] = value
    return rows


def test_a_rank_whose_calls_part_from_rank_0_s_fails_where_they_part():
    lrs, steps = _lrs([0.1, 0.1, 0.1], [0.1, 0.1, 0.1]), _steps([1, 1, 1], [1, 1, 1])
    found = check_ranks("candidate", lrs, steps, TOL, [_calls(), _calls(clip_grad_norm=[0] * 3)])
    assert (found.status, found.first_divergence) == ("fail", 0)
    assert found.detail == ("rank 1's clip_grad_norm_ ran 0 times per update against rank 0's 1 "
                            "(from update 0): the 2 ranks of the candidate do not train alike")
    found = check_ranks("candidate", lrs, steps, TOL,
                        [_calls(), _calls(reached=[2, 1, 2], max_norm=[1.0, 1.0, 0.5],
                                          opt_step=[1.0, 2.0, 2.0])])
    assert found.first_divergence == 1 and found.detail.startswith(
        "1 of rank 1's 2 backward passes reached update 1, 2 of 2 on rank 0 (at 1 of 3 "
        "updates, first update 1):")
    found = check_ranks("candidate", lrs, steps, TOL,
                        [_calls(), _calls(max_norm=[1.0, 1.0, 0.5], opt_step=[1.0, 2.0, 2.0])])
    assert found.first_divergence == 2
    assert ("rank 1's clip_grad_norm_'s max_norm is 0.5 against rank 0's 1 (from update 2); "
            "rank 1's optimizer step counter is 2 after update 2 against rank 0's 3 "
            "(from update 2)") in found.detail


def test_equal_calls_pass_and_an_earlier_lr_comes_first():
    lrs, steps = _lrs([0.1, 0.1, 0.1], [0.1, 0.1, 0.1]), _steps([1, 1, 1], [1, 1, 1])
    found = check_ranks("candidate", lrs, steps, TOL, [_calls(), _calls()])
    assert found.status == "pass" and found.detail.endswith(
        "; every rank made rank 0's calls per update (backward, clip_grad_norm_, "
        "clip_grad_value_, EMA update, GradScaler.update, the clip's settings, the optimizer's "
        "step counter)")
    parted = _lrs([0.1, 0.2, 0.3], [0.1, 0.1, 0.1])
    found = check_ranks("candidate", parted, _steps([1, 1, 1], [1, 0, 0]), TOL,
                        [_calls(), _calls(clip_grad_norm=[1, 1, 0])])
    assert found.first_divergence == 1 and found.detail.startswith("rank 1's LR differs")
    assert found.detail.endswith("; rank 1's clip_grad_norm_ ran 0 times per update against "
                                 "rank 0's 1 (from update 2)")
    found = check_ranks("candidate", parted, _steps([1, 1, 1], [1, 0, 0]), TOL,
                        [_calls(), _calls(backward=[3, 2, 2])])
    assert found.first_divergence == 0 and found.detail.startswith(
        "rank 1's backward ran 3 times per update against rank 0's 2 (at 1 of 3 updates, first "
        "update 0): the 2 ranks of the candidate do not train alike; rank 1's LR differs")
    assert check_ranks("candidate", lrs, steps, TOL, [_calls(), None]).detail.endswith(
        "scheduler.step() calls")  # a rank whose calls were not counted: the LR alone


def test_a_recording_switched_off_is_a_warning_naming_the_side_the_update_and_the_reason():
    from lrcheck.checks.commands import check_recording

    assert check_recording("reference", [{"rank": 0, "recording_off": None}]) is None
    off = {"reason": "optimizer.step's pre-hook raised TypeError: x", "after": 3}
    result = check_recording("candidate", [{"rank": 1, "recording_off": off}])
    assert result is not None and result.name == "recording (candidate)"
    assert result.status == "warn" and result.first_divergence == 3
    assert "rank 1" in result.detail and "after 3 update(s)" in result.detail
    assert "TypeError: x" in result.detail and "not judged" in result.detail
