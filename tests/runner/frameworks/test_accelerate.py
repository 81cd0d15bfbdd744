"""``--framework accelerate``: the candidate trained through the real HF Accelerate, in one
process, against the plain bs-32 reference (the old ``--policy accelerate`` spelling is
tests/plan/test_frameworks.py's)."""

import pytest
import torch

accelerate = pytest.importorskip(
    "accelerate", reason="the accelerate extra is not installed: pip install 'lrcheck[accelerate]'")
pytestmark = pytest.mark.slow  # every test trains runs through Accelerate

import lrcheck  # noqa: E402
from lrcheck.plan.steps import plan_steps, schedule_context  # noqa: E402

EPOCHS = 2
UPDATES = 1437 // 32 * EPOCHS  # digits: 1437 training samples, 44 full updates of 32 an epoch


def summary(report) -> str:
    return "\n".join(f"{c.name}: {c.status} {c.detail}" for c in report.checks)


def through_accelerate(**candidate):
    return lrcheck.compare(epochs=EPOCHS, framework="accelerate", ref_framework="plain",
                           **candidate)


@pytest.mark.parametrize("accum", [1, 2, 4])
def test_accum_trains_exactly_like_bs_32(accum):
    report = through_accelerate(accum=accum, bs=32 // accum, ref_bs=32)
    assert report.ok, summary(report)
    params = report.check("params")
    assert params.max_rel_diff is not None and params.max_rel_diff <= 1e-9, summary(report)
    assert report.check("lr").max_abs_diff == 0.0
    assert len(report.candidate.updates) == UPDATES
    # scheduler.step() is called after every micro-batch; AcceleratedScheduler moved it once
    # per optimizer update.
    assert [u.scheduler_steps for u in report.candidate.updates[:3]] == [0, 1, 2]
    assert report.candidate.context.total_steps == UPDATES
    assert report.environment["accelerate"] == accelerate.__version__


def test_the_flush_tail_is_accelerates_sync_at_the_end_of_the_dataloader():
    # 1437 = 44·32 + 29: Accelerate closes the window early on the loader's last micro-batch.
    report = through_accelerate(accum=2, bs=16, tail="flush")
    assert report.ok, summary(report)
    updates = report.candidate.updates
    assert len(updates) == 45 * EPOCHS
    assert updates[44].samples_seen - updates[43].samples_seen == 29


def test_a_schedule_sized_in_micro_batches_decays_only_half_way(schedules_file):
    """len(train_loader) * epochs counts micro-batches, but Accelerate steps once per update:
    the run ends near half the peak LR instead of near 0 (accelerate #1160)."""
    report = through_accelerate(accum=2, bs=16, scheduler=f"{schedules_file}:forgets_accum")
    lr = report.check("lr")
    assert lr.status == "fail" and lr.first_divergence == 1, summary(report)
    last_ref, last_cand = report.reference.updates[-1].lr[0], report.candidate.updates[-1].lr[0]
    assert last_ref == pytest.approx(0.05 / 88)
    assert last_cand == pytest.approx(0.05 * 89 / 176)


def test_a_schedule_sized_from_the_prepared_loader_is_right_on_one_process(schedules_file):
    report = through_accelerate(accum=2, bs=16,
                                scheduler=f"{schedules_file}:sized_from_prepared_loader")
    assert report.ok, summary(report)


def test_a_schedule_sized_from_the_prepared_loader_is_world_times_too_short(schedules_file):
    """The arithmetic behind the world-2 failure, without launching processes: on 2 processes
    the prepared loader has the per-rank length, AcceleratedScheduler takes 2 steps a update."""
    from tests.fixtures.schedules import sized_from_prepared_loader

    ctx = schedule_context(plan_steps(1437, 8, 2, 2, EPOCHS, "drop"), "per-update", 0.0,
                           "accelerate")
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.05)
    schedule = sized_from_prepared_loader(optimizer, ctx)
    assert schedule.total_iters == UPDATES
    assert ctx.total_steps == 2 * UPDATES
