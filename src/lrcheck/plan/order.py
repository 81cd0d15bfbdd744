"""The data order that makes exact equality possible (docs/design.md, "Why exact equality is
possible, and how data flows").

Epoch ``e`` has one permutation from a generator seeded by ``(seed, e)``; global batch ``k`` is
the next ``E`` indices of it; micro-batch ``m`` of an update is the next ``bs·world`` indices of
the global batch, and rank ``r`` takes every ``world``-th of those starting at ``r``. Over all
micro-batches and ranks that is exactly the global batch, whatever ``bs``, ``accum`` and
``world`` are.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np

if TYPE_CHECKING:
    import torch

# A numpy array or a torch tensor of sample indices: the cuts below are plain slices, which the
# loop takes on the device, without a copy from the host per micro-batch.
Indices = TypeVar("Indices", np.ndarray, "torch.Tensor")


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """The order of the ``n`` training samples in ``epoch``; the same for every configuration."""
    return np.random.default_rng([seed, epoch]).permutation(n)


@dataclass(frozen=True)
class GlobalBatch:
    """The samples behind one optimizer update, over all ranks and micro-batches."""

    update: int
    epoch: int
    indices: np.ndarray
    ends_epoch: bool


def global_batches(n: int, effective: int, epochs: int, seed: int,
                   tail: str, reverse: bool = False) -> Iterator[GlobalBatch]:
    """Every update's global batch in order, for the tails of ``steps.plan_steps``;
    ``reverse``: each batch's samples in reverse order (a reference's noise-floor twin: the
    same samples behind every update, summed in another order)."""
    update = 0
    carried = np.empty(0, dtype=np.int64)
    for epoch in range(epochs):
        order = epoch_permutation(seed, epoch, n)
        if tail == "carry":
            order = np.concatenate([carried, order])
        full, left = divmod(len(order), effective)
        cuts = [order[k * effective:(k + 1) * effective] for k in range(full)]
        if tail == "flush" and left:
            cuts.append(order[full * effective:])
        carried = order[full * effective:] if tail == "carry" else carried
        for k, indices in enumerate(cuts):
            yield GlobalBatch(update, epoch, indices[::-1].copy() if reverse else indices,
                              ends_epoch=k == len(cuts) - 1)
            update += 1


def micro_batches(indices: Indices, bs: int, world: int) -> list[Indices]:
    """The global batch cut into micro-batches of ``bs·world`` (the last may be short); a batch
    that is one micro-batch is itself, not a view of itself."""
    step = bs * world
    if len(indices) <= step:
        return [indices]
    return [indices[m:m + step] for m in range(0, len(indices), step)]


def rank_share(micro_batch: Indices, rank: int, world: int) -> Indices:
    """Rank ``rank``'s part of one micro-batch: every ``world``-th sample starting at ``rank``
    (the micro-batch itself in a single process: no view to make on every micro-batch)."""
    return micro_batch if world == 1 else micro_batch[rank::world]


def dealt_order(indices: np.ndarray, bs: int, world: int) -> np.ndarray:
    """The global batch as one stream such that cutting it into batches of ``bs`` and dealing
    them round-robin to ``world`` processes (what Accelerate's prepared dataloader does without
    ``split_batches``) hands every rank its ``rank_share`` of each full micro-batch."""
    return np.concatenate([rank_share(m, r, world) for m in micro_batches(indices, bs, world)
                           for r in range(world)])
