import numpy as np
import pytest

from lrcheck.plan.order import (
    dealt_order,
    epoch_permutation,
    global_batches,
    micro_batches,
    rank_share,
)
from lrcheck.plan.steps import plan_steps

CONFIGS = [(32, 1, 1), (16, 2, 1), (8, 4, 1), (8, 2, 2), (4, 4, 2), (2, 4, 4), (5, 3, 3), (1, 1, 7)]


@pytest.mark.parametrize("bs,accum,world", CONFIGS)
def test_micro_batches_over_all_ranks_are_exactly_the_global_batch(bs, accum, world):
    effective = bs * accum * world
    for batch in global_batches(503, effective, 2, seed=3, tail="flush"):
        pieces = [rank_share(m, r, world) for m in micro_batches(batch.indices, bs, world)
                  for r in range(world)]
        joined = np.concatenate(pieces)
        assert sorted(joined.tolist()) == sorted(batch.indices.tolist())
        assert len(joined) == len(batch.indices)
        full = len(batch.indices) == effective
        if full:
            assert all(len(p) == bs for p in pieces)


def test_permutation_depends_on_seed_and_epoch_only():
    a = epoch_permutation(0, 0, 100)
    assert sorted(a.tolist()) == list(range(100))
    assert np.array_equal(a, epoch_permutation(0, 0, 100))
    assert not np.array_equal(a, epoch_permutation(0, 1, 100))
    assert not np.array_equal(a, epoch_permutation(1, 0, 100))


@pytest.mark.parametrize("tail", ["drop", "flush", "carry"])
def test_global_batches_are_the_same_for_every_split_of_the_effective_batch(tail):
    n, effective, epochs = 211, 24, 3
    ref = [b.indices for b in global_batches(n, effective, epochs, 5, tail)]
    plan = plan_steps(n, 24, 1, 1, epochs, tail)
    assert len(ref) == plan.total_updates
    for bs, accum, world in [(12, 2, 1), (6, 2, 2), (4, 3, 2)]:
        cand = [b.indices for b in global_batches(n, bs * accum * world, epochs, 5, tail)]
        assert len(cand) == len(ref)
        assert all(np.array_equal(a, b) for a, b in zip(ref, cand, strict=True))


def test_drop_uses_each_sample_at_most_once_per_epoch_and_flush_uses_all():
    n, effective = 100, 32
    drop = [b for b in global_batches(n, effective, 1, 0, "drop")]
    assert [len(b.indices) for b in drop] == [32, 32, 32]
    flush = [b for b in global_batches(n, effective, 1, 0, "flush")]
    assert [len(b.indices) for b in flush] == [32, 32, 32, 4]
    assert sorted(np.concatenate([b.indices for b in flush]).tolist()) == list(range(n))
    assert [b.ends_epoch for b in flush] == [False, False, False, True]


def test_carry_opens_the_next_epoch_with_the_leftovers():
    n, effective = 100, 32
    batches = list(global_batches(n, effective, 2, 0, "carry"))
    assert len(batches) == 200 // 32
    leftover = epoch_permutation(0, 0, n)[96:]
    assert np.array_equal(batches[3].indices[:4], leftover)
    assert np.array_equal(batches[3].indices[4:], epoch_permutation(0, 1, n)[:28])
    assert [b.epoch for b in batches] == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("bs,accum,world", CONFIGS)
def test_dealt_order_hands_each_rank_its_share_when_batches_are_dealt_round_robin(bs, accum, world):
    """Accelerate's prepared loader without split_batches gives rank r batches r, r+world, …"""
    for batch in global_batches(503, bs * accum * world, 1, seed=3, tail="drop"):
        stream = dealt_order(batch.indices, bs, world)
        loader = [stream[i:i + bs] for i in range(0, len(stream), bs)]
        for r in range(world):
            mine = loader[r::world]
            want = [rank_share(m, r, world) for m in micro_batches(batch.indices, bs, world)]
            assert len(mine) == accum
            assert all(np.array_equal(a, b) for a, b in zip(mine, want, strict=True))


def test_a_global_batch_that_is_one_micro_batch_is_not_sliced():
    indices = np.arange(32)
    assert micro_batches(indices, 32, 1)[0] is indices
    assert micro_batches(indices, 8, 4)[0] is indices
    assert [len(m) for m in micro_batches(indices, 10, 1)] == [10, 10, 10, 2]
