"""``checks.optimizer`` on hand-made settings (``lrcheck.hparams``): the class, every setting
per param group and the state's keys, compared exactly at every aligned update, a setting a
schedule drives too; and the Recorder lines' keys read back, checked."""

import numpy as np
import pytest

from lrcheck.checks.optimizer import check_optimizer
from lrcheck.errors import SpecError
from lrcheck.hparams import OptimizerSettings, counts, read_settings

SGD = "torch.optim.sgd.SGD"


def _sgd(momenta, state=(("momentum_buffer",),), cls=SGD, groups=1):
    """SGD's settings at each update: ``momenta[k]`` in every group."""
    return OptimizerSettings(cls, tuple({"momentum": (m,) * groups, "nesterov": (False,) * groups,
                                         "weight_decay": (0.0,) * groups} for m in momenta),
                             (state * groups,) * len(momenta))


def _pairs(n):
    return np.arange(n), np.arange(n)


def test_the_same_optimizer_passes_and_says_what_it_compared():
    found = check_optimizer(_sgd([0.9] * 4), _sgd([0.9] * 4), _pairs(4), 1e-12)
    assert found is not None and found.status == "pass", found
    assert found.detail == ("SGD in both, with the same momentum, nesterov, weight_decay in "
                            "every param group at all 4 updates; its state keeps "
                            "momentum_buffer in both")


def test_momentum_0_against_0_9_fails_at_update_0_naming_both():
    found = check_optimizer(_sgd([0.9] * 4), _sgd([0.0] * 4, ((),)), _pairs(4), 1e-12)
    assert found is not None and found.status == "fail" and found.first_divergence == 0
    assert found.detail.startswith(
        "the candidate's SGD has momentum 0 in group 0, the reference's 0.9; the candidate's "
        "SGD keeps no state for group 0, the reference's momentum_buffer (from update 0)")
    assert "they differ at 4 of 4 updates" in found.detail


def test_a_momentum_a_schedule_cycles_is_compared_update_by_update():
    cycled = [0.95, 0.9, 0.85, 0.9]
    same = check_optimizer(_sgd(cycled), _sgd(cycled), _pairs(4), 1e-12)
    assert same is not None and same.status == "pass"
    assert "momentum changed over the updates (a schedule), the same in both" in same.detail
    late = check_optimizer(_sgd(cycled), _sgd([0.95, 0.9, 0.9, 0.9]), _pairs(4), 1e-12)
    assert late is not None and late.status == "fail" and late.first_divergence == 2
    assert "momentum 0.9 in group 0, the reference's 0.85 (from update 2)" in late.detail
    assert "they differ at 1 of 4 updates" in late.detail


def test_amsgrad_and_another_class_and_param_groups_are_named():
    adam = OptimizerSettings("torch.optim.adam.Adam", ({"amsgrad": (False,), "betas": (
        (0.9, 0.999),)},), ((("exp_avg", "exp_avg_sq", "step"),),))
    ams = OptimizerSettings("torch.optim.adam.Adam", ({"amsgrad": (True,), "betas": (
        (0.9, 0.999),)},), ((("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"),),))
    found = check_optimizer(adam, ams, _pairs(1), 1e-12)
    assert found is not None and found.status == "fail"
    assert "the candidate's Adam has amsgrad True in group 0, the reference's False" \
        in found.detail
    assert "keeps exp_avg, exp_avg_sq, max_exp_avg_sq, step for group 0" in found.detail
    other = check_optimizer(adam, _sgd([0.9]), _pairs(1), 1e-12)
    assert other is not None and other.status == "fail"
    assert other.detail.startswith(f"the candidate steps {SGD}, the reference "
                                   "torch.optim.adam.Adam")
    groups = check_optimizer(_sgd([0.9]), _sgd([0.9], groups=2), _pairs(1), 1e-12)
    assert groups is not None and "has 2 param groups, the reference's 1" in groups.detail


def test_only_the_aligned_updates_are_compared_and_an_unrecorded_side_is_a_skip():
    ref, cand = _sgd([0.9, 0.9, 0.5]), _sgd([0.9, 0.9])
    found = check_optimizer(ref, cand, (np.array([0, 1]), np.array([0, 1])), 1e-12)
    assert found is not None and found.status == "pass"
    assert check_optimizer(None, None, _pairs(2), 1e-12) is None
    half = check_optimizer(ref, None, _pairs(2), 1e-12)
    assert half is not None and half.status == "skip"
    assert "only the reference recorded" in half.detail


def test_what_counts_leaves_out_the_lr_how_it_is_computed_and_the_schedulers_own():
    assert counts("momentum", 0.9) and counts("amsgrad", False) and counts("betas", (0.9, 0.99))
    for key in ("lr", "foreach", "fused", "initial_lr", "max_momentum", "params"):
        assert not counts(key, 0.1)
    assert not counts("name", "decay") and not counts("betas", ())


def test_the_lines_keys_are_carried_forward_and_checked():
    lines = [{"optimizer": SGD, "hparams": {"momentum": [0.9]}, "state_keys": [[]]},
             {"state_keys": [["momentum_buffer"]]}, {"hparams": {"momentum": [0.8]}}]
    read = [read_settings(line, f"f:{k}") for k, line in enumerate(lines)]
    found = OptimizerSettings.from_records(read)
    assert found is not None and found.cls == SGD and found.short == "SGD"
    assert [s["momentum"] for s in found.settings] == [(0.9,), (0.9,), (0.8,)]
    assert found.state == ((() ,), (("momentum_buffer",),), (("momentum_buffer",),))
    assert OptimizerSettings.from_records([{"lr": [0.1]}]) is None
    with pytest.raises(SpecError, match=r"f:3: the optimizer setting 'momentum' must be"):
        read_settings({"hparams": {"momentum": ["fast"]}}, "f:3")
    with pytest.raises(SpecError, match=r"'state_keys' must list"):
        read_settings({"state_keys": "exp_avg"}, "f:4")
