"""What the adapters of frameworks that own the training loop share: the training split as a
dataset whose every item carries its sample id, lrcheck's data order as a sampler the framework
drives, and a single-process run kept out of the torchrun job it may be started in."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numpy as np
import torch

from lrcheck.experiments.tasks import Dataset
from lrcheck.plan.order import GlobalBatch, dealt_order, micro_batches, rank_share
from lrcheck.runner.build import as_input

# What torchrun puts in a worker's environment; a framework that finds them sets up (or joins)
# a process group.
TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                      "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                      "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT",
                      "TORCHELASTIC_MAX_RESTARTS", "GROUP_WORLD_SIZE")


@contextlib.contextmanager
def alone(world: int) -> Iterator[None]:
    """A run of ``world`` 1 does not see torchrun's variables (the reference that rank 0 trains
    after the candidate's job, say), so the framework does not join a process group; restored
    afterwards. With ``world`` > 1, nothing changes."""
    if world > 1:
        yield
        return
    saved = {k: os.environ.pop(k) for k in TORCHRUN_VARIABLES if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


class IdDataset(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """The training split: item ``i`` is ``{"x", "labels", "ids"}``, ``ids`` being ``i``, so
    what a framework feeds can be told sample by sample."""

    def __init__(self, data: Dataset, dtype: torch.dtype) -> None:
        self.x = as_input(data.x_train, dtype, "cpu")
        self.y = torch.as_tensor(data.y_train)
        self.ids = torch.arange(len(self.y))

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i], "ids": self.ids[i]}

    def __getitems__(self, indices: list[int]) -> list[dict[str, torch.Tensor]]:
        return [self[i] for i in indices]


class PlannedOrder(torch.utils.data.Sampler[int]):
    """lrcheck's data order as a sampler with ``set_epoch``: epoch ``e``'s stream of samples.
    ``dealt`` (Accelerate's prepared loaders without ``split_batches``: batches of ``bs`` dealt
    round-robin to the ``world`` processes): each global batch ordered so that every rank gets
    exactly its ``rank_share`` of each micro-batch (``order.dealt_order``); otherwise the global
    batches one after the other (a ``DistributedSampler`` without shuffling, which gives rank
    ``r`` every ``world``-th sample from ``r``, cuts the same shares). ``rank`` (not dealt): only
    that rank's stream, its ``rank_share`` of every micro-batch in turn, for a loader of ``bs``
    on each process that nothing shards further. A framework that never calls ``set_epoch``
    gets the next epoch at each new pass."""

    def __init__(self, batches: list[GlobalBatch], bs: int, world: int, epochs: int,
                 dealt: bool = True, rank: int | None = None) -> None:
        def stream(indices: np.ndarray) -> np.ndarray:
            if rank is not None:
                return np.concatenate([rank_share(m, rank, world)
                                       for m in micro_batches(indices, bs, world)])
            return dealt_order(indices, bs, world) if dealt else indices

        self._streams = [np.concatenate([stream(b.indices) for b in batches if b.epoch == e])
                         for e in range(epochs)]
        self.epoch = 0
        self._set = False

    @property
    def lengths(self) -> list[int]:
        """Samples in each epoch's stream."""
        return [len(s) for s in self._streams]

    def set_epoch(self, epoch: int) -> None:
        self.epoch, self._set = epoch, True

    def __iter__(self) -> Iterator[int]:
        epoch = min(self.epoch, len(self._streams) - 1)
        if not self._set:  # nobody told us the epoch: the next pass is the next epoch
            self.epoch += 1
        self._set = False
        return iter(self._streams[epoch].tolist())

    def __len__(self) -> int:
        return len(self._streams[min(self.epoch, len(self._streams) - 1)])
