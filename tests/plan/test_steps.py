import pytest

from lrcheck.errors import SpecError
from lrcheck.plan.steps import ScheduleContext, plan_steps, schedule_context

# ScheduleContext's fields, in the order of the table in docs/design.md, "Schedulers".
DESIGN_FIELDS = ["micro_batches_per_epoch", "epochs", "accum_steps", "world_size",
                 "micro_batch_size", "num_samples", "updates_per_epoch", "total_updates",
                 "total_steps", "warmup_steps"]


def test_schedule_context_has_exactly_the_design_fields():
    assert list(ScheduleContext.__dataclass_fields__) == DESIGN_FIELDS


def test_drop():
    plan = plan_steps(1437, 16, 2, 1, 5, "drop")
    assert (plan.updates_per_epoch, plan.total_updates) == (44, 220)
    assert (plan.micro_batches_per_epoch, plan.total_micro_batches) == (88, 440)


def test_flush_adds_one_short_update_with_a_ragged_micro_batch():
    # 1437 = 44 * 32 + 29: the short update has micro-batches of 16 and 13.
    plan = plan_steps(1437, 16, 2, 1, 5, "flush")
    assert (plan.updates_per_epoch, plan.total_updates) == (45, 225)
    assert plan.micro_batches_per_epoch == 88 + 2
    assert plan.total_micro_batches == 450
    # 1437 = 89 * 16 + 13 with accum 1: one extra micro-batch
    assert plan_steps(1437, 16, 1, 1, 1, "flush").micro_batches_per_epoch == 90


def test_carry_counts_the_whole_stream():
    plan = plan_steps(1437, 16, 2, 1, 5, "carry")
    assert plan.total_updates == 1437 * 5 // 32 == 224
    assert plan.updates_per_epoch == 44
    assert plan.micro_batches_per_epoch == 1437 // 16


def test_world_divides_the_micro_batches_each_rank_iterates():
    plan = plan_steps(1437, 8, 2, 2, 1, "drop")
    assert plan.effective_batch == 32
    assert plan.updates_per_epoch == 44
    assert plan.micro_batches_per_epoch == 88


def test_training_set_smaller_than_one_effective_batch_is_bad_input():
    with pytest.raises(SpecError, match=r"142 samples, fewer than one effective batch "
                                        r"\(bs 100 · accum 2 · nproc 1 = 200\)"):
        plan_steps(142, 100, 2, 1, 1, "drop")


@pytest.mark.parametrize("policy,total,warmup", [
    ("per-update", 220, 22), ("per-micro-batch", 220, 22), ("per-micro-batch-scaled", 440, 44)])
def test_policy_decides_the_unit_of_total_and_warmup_steps(policy, total, warmup):
    ctx = schedule_context(plan_steps(1437, 16, 2, 1, 5, "drop"), policy, 0.1)
    assert (ctx.total_steps, ctx.warmup_steps) == (total, warmup)
    assert ctx.total_updates == 220 and ctx.accum_steps == 2 and ctx.num_samples == 1437


def test_accelerate_sizes_the_schedule_in_updates_of_the_single_process_loader():
    """AcceleratedScheduler steps once per process on every update, so the schedule counts the
    updates of the unprepared single-process loader: this run's updates times world."""
    one = schedule_context(plan_steps(1437, 16, 2, 1, 5, "drop"), "per-update", 0.1, "accelerate")
    assert (one.total_steps, one.warmup_steps) == (220, 22)
    two = schedule_context(plan_steps(1437, 8, 2, 2, 5, "drop"), "per-update", 0.1, "accelerate")
    assert two.total_updates == 220 and two.micro_batches_per_epoch == 88
    assert (two.total_steps, two.warmup_steps) == (440, 44)
