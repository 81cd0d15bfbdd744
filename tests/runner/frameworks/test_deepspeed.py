"""``--framework deepspeed``: both runs through ``deepspeed.initialize`` and the engine's own
boundary, loss scaling and scheduler. Where the engine trains differently from the big batch
(deepspeed/runtime/engine.py, 0.19.8; docs/frameworks.md), lrcheck fails at that update and says
why. Every engine starts a process group, seconds each: these tests are marked ``slow`` and
``deepspeed``. lrcheck leaves DeepSpeed's shared-memory all-reduce out (nothing JIT-built, no
buffers in /dev/shm): the two-rank test checks that no buffer of it appeared."""

from pathlib import Path

import pytest
import torch

import lrcheck
from lrcheck.errors import SpecError
from lrcheck.spec import RunSpec

deepspeed = pytest.importorskip(
    "deepspeed", reason="the deepspeed extra is not installed: pip install 'lrcheck[deepspeed]'")

from lrcheck.runner.frameworks.deepspeed import config  # noqa: E402

SHM = Path("/dev/shm")


def summary(report) -> str:
    return "\n".join(f"{c.name}: {c.status} {c.detail}" for c in report.checks)


def through_engine(**candidate):
    options = {"task": "synthetic", "samples": 1600, "bs": 16, "accum": 2, "epochs": 2}
    return lrcheck.compare(framework="deepspeed", dtype="float32", **{**options, **candidate})


def test_float64_is_refused_with_the_reason_and_the_fix():
    with pytest.raises(SpecError, match=r"cannot train --dtype float64.*unsupported grad type.*"
                                        r"add --dtype float32"):
        RunSpec(framework="deepspeed")
    with pytest.raises(SpecError, match="--zero-stage must be one of DeepSpeed's ZeRO stages"):
        RunSpec(framework="deepspeed", dtype="float32", zero_stage=4)
    with pytest.raises(SpecError, match="--tail carry does not apply"):
        RunSpec(framework="deepspeed", dtype="float32", tail="carry")


def test_the_config_is_lrchecks_run():
    cfg = config(RunSpec(framework="deepspeed", dtype="float32", bs=8, accum=4, zero_stage=2))
    assert cfg["train_micro_batch_size_per_gpu"] == 8
    assert cfg["gradient_accumulation_steps"] == 4
    assert cfg["zero_optimization"] == {"stage": 2}
    assert cfg["gradient_clipping"] == 0.0


def test_bf16_is_asked_of_the_engine_and_refused_where_its_accelerator_has_none(monkeypatch):
    assert config(RunSpec(framework="deepspeed", dtype="float32", amp="bf16"))["bf16"] == {
        "enabled": True}
    assert config(RunSpec(framework="deepspeed", dtype="float32"))["bf16"] == {"enabled": False}
    from deepspeed.accelerator import get_accelerator

    monkeypatch.setattr(type(get_accelerator()), "is_bf16_supported", lambda self: False)
    with pytest.raises(SpecError, match=r"--amp bf16: DeepSpeed's cpu accelerator has no "
                                        r"bfloat16 here .*Type bf16 is not supported"):
        through_engine(amp="bf16", epochs=1)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_accum_2_trains_like_bs_32_at_stage_0():
    report = through_engine()
    assert report.ok, summary(report)
    cand = report.candidate
    assert len(cand.updates) == 80
    # The engine divided each micro-batch's mean by GAS, and stepped the schedule once per update.
    assert {m.weight for w in cand.windows for m in w} == {0.5}
    assert [u.scheduler_steps for u in cand.updates[:3]] == [0, 1, 2]
    assert report.environment.frameworks["deepspeed"] == deepspeed.__version__


@pytest.mark.slow
@pytest.mark.deepspeed
def test_two_ranks_at_zero_stage_2():
    before = set(SHM.glob("deepspeed_allreduce_buffer_*"))
    report = through_engine(bs=8, world=2, zero_stage=2)
    # The shm op not built nor initialised on the ranks (runner.frameworks.deepspeed): it would
    # map 69 MB a rank here, never unlinked by DeepSpeed 0.19.
    assert set(SHM.glob("deepspeed_allreduce_buffer_*")) <= before
    assert report.ok, summary(report)
    assert report.candidate.spec.zero_stage == report.reference.spec.zero_stage == 2
    # Both param groups' LR, though ZeRO 2 steps the optimizer one narrowed group at a time.
    assert len(report.candidate.updates[0].lr) == 2


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_partial_window_runs_on_into_the_next_epoch():
    """synthetic 1500: 1200 training samples, 75 micro-batches of 16 an epoch. The engine's
    micro-step counter never resets: update 37 holds epoch 0's last micro-batch and epoch 1's
    first (engine.py is_gradient_accumulation_boundary, DeepSpeed #7439)."""
    report = through_engine(samples=1500)
    data = report.check("data")
    assert data.status == "fail" and data.first_divergence == 37, summary(report)
    assert "ran on into epoch 1" in data.detail and "#7439" in data.detail
    # 150 micro-batches in 75 windows against 2 · 38 updates of the big batch: the epochs'
    # partial windows have merged.
    assert (len(report.reference.updates), len(report.candidate.updates)) == (76, 75)
    assert report.check("updates").status == "fail"
    assert report.check("lr").first_divergence == 75, summary(report)


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_partial_window_weighs_its_micro_batches_equally():
    """synthetic 1550: 1240 training samples, the last window of an epoch 16 + 8: backward
    divides each mean by GAS, 1/2 each, not by their samples (2/3 and 1/3)."""
    report = through_engine(samples=1550, epochs=1)
    weights = report.check("weights")
    assert weights.status == "fail" and weights.first_divergence == 38, summary(report)
    assert "weighted 1/2 instead of by its samples (2/3 and 1/3)" in weights.detail
    assert report.check("data").status == report.check("lr").status == "pass"


@pytest.mark.slow
@pytest.mark.deepspeed
def test_a_loop_that_steps_the_scheduler_too_is_caught():
    """The engine steps the schedule it was given; a loop that also calls scheduler.step() after
    every engine.step() steps it once per micro-batch more (transformers #35484)."""
    report = through_engine(scheduler_stepped_too=True, epochs=1)
    lr = report.check("lr")
    assert lr.status == "fail" and lr.first_divergence == 0, summary(report)
    assert "3 steps per update against 2" in lr.detail
    assert report.check("data").status == report.check("weights").status == "pass"


@pytest.mark.slow
@pytest.mark.deepspeed
def test_bf16_trains_like_bs_32_within_its_calibrated_tolerances():
    """--amp bf16: the module in bfloat16, float32 master weights in the engine's wrapper
    (FP16_UnfusedOptimizer at ZeRO 0), whose construction steps the optimizer once with zero
    gradients (fp16/unfused_optimizer.py initialize_optimizer_states, in both runs): no update
    of lrcheck's, and no scheduler step."""
    report = through_engine(amp="bf16")
    assert report.ok, summary(report)
    cand = report.candidate
    assert len(cand.updates) == len(report.reference.updates) == 80
    assert [u.scheduler_steps for u in cand.updates[:3]] == [0, 1, 2]
    assert cand.skipped == [] and report.check("lr").status == "pass"
    assert report.pair.tolerances.params == 1e-1 and report.pair.tolerances.loss == 5e-2
    # The parameters recorded are the bfloat16 model's (its values, stored as float32).
    first = torch.from_numpy(cand.params[0])
    assert torch.equal(first, first.bfloat16().float())


@pytest.mark.slow
@pytest.mark.deepspeed
def test_bf16_with_the_scheduler_stepped_too_fails_at_update_0():
    report = through_engine(amp="bf16", scheduler_stepped_too=True, epochs=1)
    lr = report.check("lr")
    assert lr.status == "fail" and lr.first_divergence == 0, summary(report)
    assert report.check("data").status == report.check("weights").status == "pass"
