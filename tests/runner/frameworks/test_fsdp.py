"""``--framework fsdp``: lrcheck's own loop with the model sharded by FSDP2 on every rank, the
reference through FSDP too (one process, a group of its own), parameters gathered whole."""

import pytest

import lrcheck
from lrcheck.errors import SpecError
from lrcheck.plan.judging import lockstep_reason
from lrcheck.spec import PairSpec, RunSpec


def summary(report) -> str:
    return "\n".join(f"{c.name}: {c.status} {c.detail}" for c in report.checks)


def test_fsdp_takes_the_own_loops_settings_and_refuses_what_it_cannot_do():
    spec = RunSpec(framework="fsdp", policy="per-micro-batch", tail="flush", loss_norm="mean")
    assert spec.tail == "flush" and spec.policy == "per-micro-batch"
    with pytest.raises(SpecError, match="--resume-at applies to lrcheck's own loop"):
        RunSpec(framework="fsdp", resume_at=3)
    with pytest.raises(SpecError, match="--zero-stage applies to --framework deepspeed"):
        RunSpec(framework="fsdp", zero_stage=2)


def test_the_reference_is_fsdp_alone_and_cannot_run_in_lockstep():
    pair = PairSpec.build(RunSpec(framework="fsdp", bs=8, accum=2, world=2))
    assert (pair.reference.framework, pair.reference.world, pair.reference.bs) == ("fsdp", 1, 32)
    assert "shards" in lockstep_reason(pair.reference, pair.candidate)


@pytest.mark.slow
def test_two_ranks_of_accum_2_train_exactly_like_bs_32():
    # synthetic 1600: 1280 training samples, 40 whole windows of 32 an epoch.
    report = lrcheck.compare(framework="fsdp", task="synthetic", samples=1600, bs=8, accum=2,
                             world=2, epochs=2)
    assert report.ok, summary(report)
    assert report.check("params").max_rel_diff <= 1e-9, summary(report)
    assert report.check("data").status == report.check("weights").status == "pass"
    assert len(report.candidate.updates) == 80
    # Gathered whole: the snapshot of every parameter, not of a rank's shard.
    assert report.candidate.params.shape == report.reference.params.shape


@pytest.mark.slow
@pytest.mark.parametrize("norm, ok", [("mean", False), ("global", True)])
def test_tokens_need_the_global_token_count(norm, ok):
    """torchtitan #2206: with variable-length sequences, per-micro-batch means divided by accum
    weight tokens unequally; the global token count (over ranks too) does not."""
    report = lrcheck.compare(framework="fsdp", task="tokens", bs=8, accum=2, world=2, epochs=1,
                             loss_norm=norm)
    assert report.ok is ok, summary(report)
    if not ok:
        weights = report.check("weights")
        assert weights.status == "fail" and weights.first_divergence == 0, summary(report)
        assert report.check("data").status == report.check("lr").status == "pass"
