"""``checks.ema``: the EMA models of two recorded runs compared from their fingerprints, after
every update both runs fingerprinted them."""

import numpy as np

from lrcheck.checks.ema import check_ema
from lrcheck.checks.status import FAIL, PASS, SKIP, WARN
from lrcheck.stepwise import EmaPrints

NAMES = ("0.weight", "0.bias")


def _ema(gaps=(), updates=4, name="AveragedModel", shift=None):
    """An EMA of two tensors fingerprinted after ``updates`` updates, tensor 1's sum moved by
    ``gaps[k]`` after update k (``shift``: a dict of such moves instead)."""
    moved = dict(enumerate(gaps)) if shift is None else shift
    return EmaPrints(name, f"{name}.update_parameters", NAMES,
                     {k: np.array([[1.0 + 0.1 * k, 2.0], [0.5 + moved.get(k, 0.0), 1.0]])
                      for k in range(updates)})


def _pairs(n=4):
    return np.arange(n), np.arange(n)


def test_neither_run_with_an_ema_is_skipped_and_one_alone_fails():
    found = check_ema(None, None, _pairs(), 1e-4, True)
    assert found.status == SKIP and found.detail.startswith("no EMA: neither run updated")
    found = check_ema(_ema(), None, _pairs(), 1e-4, True)
    assert found.status == FAIL
    assert found.detail.startswith("only the reference updated an EMA model (AveragedModel, by "
                                   "AveragedModel.update_parameters): the candidate has none")


def test_equal_emas_pass_with_the_updates_compared():
    found = check_ema(_ema(), _ema(), _pairs(), 1e-4, True)
    assert found.status == PASS, found.detail
    assert found.detail == ("the EMA (AveragedModel) agrees in both runs: max |Δsum|/max|p| 0 ≤ "
                            "0.0001 after 4 fingerprinted updates (the last 3)")


def test_in_lockstep_the_first_update_beyond_the_tolerance_fails_naming_the_tensor():
    found = check_ema(_ema(), _ema([0.0, 1e-5, 0.3, 0.3]), _pairs(), 1e-4, True)
    assert (found.status, found.first_divergence) == (FAIL, 2)
    assert found.detail.startswith(
        "the EMA (AveragedModel) of the candidate parts from the reference's after update 2 "
        "(|Δsum|/max|p| 0.15 > 0.0001, most in 0.bias); in lockstep the candidate's weights are "
        "the reference's after every update and its EMA its own")


def test_free_running_a_jump_fails_and_a_smooth_drift_warns():
    jump = check_ema(_ema(), _ema([0.0, 0.0, 0.3, 0.3]), _pairs(), 1e-4, False)
    assert (jump.status, jump.first_divergence) == (FAIL, 2)
    assert "free-running:" in jump.detail and "it jumped at update 2" in jump.detail
    drift = check_ema(_ema(), _ema([2e-4, 4e-4, 8e-4, 1.6e-3]), _pairs(), 1e-4, False)
    assert drift.status == WARN and "numerical drift, not a failure" in drift.detail


def test_free_running_against_the_twin_drift_within_its_own_passes():
    twin = _ema([2e-4, 4e-4, 8e-4, 1.6e-3])
    found = check_ema(_ema(), _ema([3e-4, 6e-4, 1e-3, 2e-3]), _pairs(), 1e-4, False, twin)
    assert found.status == PASS and "the twin reference's own drift" in found.detail
    found = check_ema(_ema(), _ema([3e-4, 6e-4, 0.3, 0.3]), _pairs(), 1e-4, False, twin)
    assert (found.status, found.first_divergence) == (FAIL, 2)


def test_only_updates_both_runs_fingerprinted_are_compared():
    cand = _ema(shift={1: 0.3})
    del cand.prints[1]  # the candidate's after update 1 was not fingerprinted
    assert check_ema(_ema(), cand, _pairs(), 1e-4, True).status == PASS
    empty = EmaPrints("AveragedModel", "AveragedModel.update_parameters", NAMES, {})
    found = check_ema(_ema(), empty, _pairs(), 1e-4, True)
    assert found.status == SKIP and "not fingerprinted" in found.detail


def test_emas_of_other_models_fail_and_other_classes_are_named():
    other = EmaPrints("timm's ModelEmaV2", "timm's ModelEmaV2.update", ("w",),
                      {k: np.array([[1.0, 1.0]]) for k in range(4)})
    found = check_ema(_ema(), other, _pairs(), 1e-4, True)
    assert found.status == FAIL and "not the same model" in found.detail
    found = check_ema(_ema(), _ema(name="timm's ModelEmaV3"), _pairs(), 1e-4, True)
    assert found.detail.startswith("the EMA (AveragedModel; timm's ModelEmaV3) agrees")
