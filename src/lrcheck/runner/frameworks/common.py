"""What every framework run needs, written once; an adapter says only what its framework does
(how its trainer is built, how it trains).

- ``framework_process(spec, name, accelerate=...)``: the framework imported (or the install
  command), a run of world 1 kept out of the torchrun job it may be started in (``alone``), and
  — for the frameworks that run on Accelerate — Accelerate's process-wide state cleared after;
- ``FrameworkRun.start``: the plan, the schedule context and the ``Recording``, and lrcheck's
  global batches, which reach the framework as a sampler (``order``) over a dataset whose every
  item carries its sample id (``dataset``);
- ``FrameworkRun.check_processes``: the processes the framework found are the ones lrcheck
  planned;
- ``FrameworkRun.finish``: the trace, with the samples every rank really fed (``core.Tap``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from lrcheck.errors import RunError
from lrcheck.experiments.tasks import Dataset
from lrcheck.plan.frameworks import require_framework
from lrcheck.plan.order import GlobalBatch, dealt_order, global_batches, micro_batches, rank_share
from lrcheck.plan.steps import ScheduleContext, StepPlan
from lrcheck.plan.windows import Window
from lrcheck.runner.build import as_input
from lrcheck.runner.recording import Recording
from lrcheck.spec import RunSpec
from lrcheck.spec.resolve import is_resolved
from lrcheck.trace import OnUpdate, RunTrace

if TYPE_CHECKING:
    from lrcheck.integrations.core import Tap

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
    def streams(self) -> list[np.ndarray]:
        """Each epoch's stream of sample ids."""
        return self._streams

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


def reset_accelerate() -> None:
    """Accelerate keeps its state in process-wide singletons; the next run (another accum,
    another device) needs them cleared, as Accelerate's own test case does."""
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


@contextlib.contextmanager
def framework_process(spec: RunSpec, *, accelerate: bool = False) -> Iterator[None]:
    """The block a framework trains ``spec`` in: its package imported first (a ``SpecError``
    naming the install command), torchrun's variables hidden from a run of world 1
    (``alone``); ``accelerate``: the framework runs on Accelerate, whose state is cleared
    afterwards, however the block ends."""
    require_framework(spec.framework)
    try:
        with alone(spec.world):
            yield
    finally:
        if accelerate:
            reset_accelerate()


@dataclass
class FrameworkRun:
    """One run of ``spec`` through a framework: its ``recording`` (which holds the plan and the
    schedule context) and lrcheck's global ``batches``, the order the framework is fed."""

    spec: RunSpec
    data: Dataset
    recording: Recording
    batches: list[GlobalBatch]

    @classmethod
    def start(cls, spec: RunSpec, data: Dataset, *, device: torch.device | str,
              on_update: OnUpdate | None) -> FrameworkRun:
        if not is_resolved(spec):  # PairSpec.build resolves every run it makes
            raise ValueError(f"a RunSpec of --framework {spec.framework} that is not resolved "
                             "reached the runner: pass spec.resolve(spec)[0]")
        recording = Recording.for_run(spec, data, device=device, on_update=on_update)
        plan = recording.plan
        batches = list(global_batches(plan.num_samples, plan.effective_batch, spec.epochs,
                                      spec.seed, spec.tail, spec.twin))
        return cls(spec, data, recording, batches)

    @property
    def plan(self) -> StepPlan:
        return self.recording.plan

    @property
    def ctx(self) -> ScheduleContext:
        """The schedule context so far (a framework that sizes its schedule itself replaces
        ``recording.ctx`` once it has)."""
        return self.recording.ctx

    def order(self, *, dealt: bool = True, rank: int | None = None) -> PlannedOrder:
        """lrcheck's order as a sampler (``PlannedOrder``'s ``dealt`` and ``rank``)."""
        return PlannedOrder(self.batches, self.spec.bs, self.spec.world, self.spec.epochs,
                            dealt=dealt, rank=rank)

    def dataset(self) -> IdDataset:
        return IdDataset(self.data, self.recording.dtype)

    def check_processes(self, framework: str, world: int, rank: int, planned_rank: int) -> None:
        """A ``RunError`` unless ``framework`` found process ``rank`` of ``world``: the rank
        lrcheck planned, of ``spec.world``."""
        if (world, rank) != (self.spec.world, planned_rank):
            raise RunError(f"{framework} sees process {rank} of {world}, lrcheck planned rank "
                           f"{planned_rank} of {self.spec.world}")

    def finish(self, tap: Tap | None) -> RunTrace:
        """The trace, with the windows every rank fed merged on rank 0 (one collective under
        several processes); ``tap``: the recording callback's, which the framework started."""
        assert tap is not None, "the framework never started its recording callback"
        return self.recording.finish(tap.gathered(self.recording.windows))


class RecordingSink:
    """Updates into lrcheck's ``Recording`` (``lrcheck compare --framework``): the parameters
    after each update as snapshots, the windows kept for the ``data`` check."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.samples_seen = 0

    def before_step(self, optimizer: torch.optim.Optimizer, scheduler_steps: int | None) -> None:
        self.recording.before_step(optimizer, scheduler_steps or 0)

    def update(self, loss: float | None, samples: int, epoch: int | None,
               window: Window) -> None:
        self.samples_seen += samples
        self.recording.update(len(self.recording.updates),
                              float("nan") if loss is None else loss, self.samples_seen,
                              epoch or 0, window)


@contextlib.contextmanager
def process_group(world: int, device: torch.device | str) -> Iterator[None]:
    """A process group for the block: the default group lrcheck's torchrun worker made, of
    ``world`` processes, or — a run of one process outside any (the reference, trained after the
    candidate's job or in lrcheck's own process) — a group of one on an in-memory store, left
    afterwards. FSDP's device mesh and DeepSpeed's engine both need one, even alone."""
    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_world_size() != world:
            raise RunError(f"a run of {world} process(es) inside a process group of "
                           f"{dist.get_world_size()}: lrcheck planned another world")
        yield
        return
    if world != 1:
        raise RunError(f"a run of {world} processes needs the process group of its torchrun job")
    backend = "nccl" if torch.device(device).type == "cuda" else "gloo"
    from torch.distributed import HashStore  # type: ignore[attr-defined]

    dist.init_process_group(backend, store=HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
