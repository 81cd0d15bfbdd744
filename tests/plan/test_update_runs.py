"""The update layout ``lrcheck trace`` walks equals the data order the loop trains on."""

from __future__ import annotations

import numpy as np
import pytest

from lrcheck.plan.order import global_batches, micro_batches
from lrcheck.plan.steps import plan_steps, update_counters, update_runs


def trained_layout(n, bs, accum, world, epochs, tail):
    """(epoch, samples, micro-batches) of every update, as plain.train iterates them."""
    plan = plan_steps(n, bs, accum, world, epochs, tail)
    return [(b.epoch, len(b.indices), len(micro_batches(b.indices, bs, world)))
            for b in global_batches(n, plan.effective_batch, epochs, 0, tail)]


@pytest.mark.parametrize("tail", ["drop", "flush", "carry"])
@pytest.mark.parametrize("n, bs, accum, world, epochs", [
    (100, 4, 3, 1, 3), (97, 2, 2, 2, 4), (64, 8, 2, 2, 2), (30, 3, 1, 1, 5), (143, 5, 4, 3, 3),
])
def test_update_runs_match_the_trained_data_order(n, bs, accum, world, epochs, tail):
    plan = plan_steps(n, bs, accum, world, epochs, tail)
    walked = [(r.epoch, r.samples, r.micro_batches) for r in update_runs(plan)
              for _ in range(r.count)]
    assert walked == trained_layout(n, bs, accum, world, epochs, tail)
    assert len(walked) == plan.total_updates


@pytest.mark.parametrize("every_micro_batch", [False, True])
def test_update_counters_count_steps_and_samples_like_the_loop(every_micro_batch):
    plan = plan_steps(100, 4, 3, 1, 2, "flush")  # 8 updates of 12 samples + 1 of 4, per epoch
    runs = update_runs(plan)
    counters = update_counters(runs, plan.total_updates, every_micro_batch)
    per_update = [m if every_micro_batch else 1 for _, _, m in trained_layout(100, 4, 3, 1, 2,
                                                                              "flush")]
    made = np.cumsum(per_update)
    assert counters.steps_at_read.tolist() == (made - 1).tolist()
    assert counters.steps_made == made[-1]
    assert counters.samples_seen[-1] == 200
    assert counters.epoch.tolist() == [0] * 9 + [1] * 9
    partial = update_counters(runs, 10, every_micro_batch)
    assert len(partial.samples_seen) == 10 and partial.samples_seen[-1] == 112
