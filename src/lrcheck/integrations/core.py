"""What every framework callback records, in one place: per optimizer update, its micro-batches
(each one's mean loss, loss items, samples, sample ids, and the weight its mean had in the
gradient), the LR every param group used (read just before ``optimizer.step()``), and at the
update's end the loss over all ranks as a mean over its items. A ``Sink`` takes each update: a
Recorder file with a parameter fingerprint (``FileSink``, one's own runs) or lrcheck's
``Recording`` (``runner.frameworks.common.RecordingSink``, ``lrcheck compare --framework``).

The weight is measured, not assumed: a hook on each micro-batch's mean loss receives, during the
backward pass, the derivative of what the framework back-propagates with respect to that mean —
the weight the framework gave it (``1/accum`` when it divides each micro-batch's mean by the
accumulation steps) — and DDP's average over the ranks divides it by the world size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
import torch.distributed as dist

from lrcheck.plan.windows import MicroBatch, Window
from lrcheck.recorder import Recorder, fingerprint


def world_and_rank() -> tuple[int, int]:
    """This process's (world size, rank) in the default process group; (1, 0) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


class Sink(Protocol):
    def before_step(self, optimizer: torch.optim.Optimizer, scheduler_steps: int | None) -> None:
        """Just before ``optimizer.step()``."""

    def update(self, loss: float | None, samples: int, epoch: int | None,
               window: Window) -> None:
        """An update is done: its loss over every rank (None: no micro-batch had one), its
        samples over every rank, its epoch, and this rank's micro-batches."""


class _Micro:
    """One micro-batch of this rank, while its update runs; ``weight`` fills in during the
    backward pass."""

    __slots__ = ("ids", "scale", "weight")

    def __init__(self, ids: np.ndarray, scale: float = 1.0) -> None:
        self.ids, self.scale = ids, scale
        self.weight: torch.Tensor | None = None

    def take(self, grad: torch.Tensor) -> None:
        self.weight = grad.detach().reshape(()) * self.scale


class Tap:
    """Collects one update at a time and hands it to ``sink``: ``micro_batch`` for every
    forward that trains, ``before_step`` just before ``optimizer.step()``, ``end_update`` once
    the step is done."""

    def __init__(self, sink: Sink, device: torch.device | str | None = None,
                 processes: tuple[int, int] | None = None) -> None:
        self.sink = sink
        # (world, rank): the framework's own view of the processes where it has one (a run of
        # world 1 may train inside a process group, as the reference rank 0 trains alone).
        self.world, self.rank = processes or world_and_rank()
        self.device = device
        self._micro: list[_Micro] = []
        self._sums: torch.Tensor | None = None  # loss · items, items, samples, micro-batches

    def micro_batch(self, loss: torch.Tensor | None, items: int | torch.Tensor, samples: int,
                    ids: torch.Tensor | np.ndarray | Sequence[int] | None = None, *,
                    scale: float = 1.0) -> None:
        """A micro-batch this rank trains: ``loss`` its mean over its ``items`` loss items
        times ``scale`` (the tensor that is back-propagated from, so its weight can be
        measured; None when there is no loss), over ``samples`` samples with ``ids``. A loss
        already divided by the window's items (Transformers' ``num_items_in_batch``) is the
        mean times ``items / window items``: the mean's weight is then the measured one times
        ``scale``."""
        micro = _Micro(np.asarray(ids.cpu() if isinstance(ids, torch.Tensor) else
                                  (ids if ids is not None else ()), dtype=np.int64), scale)
        self._micro.append(micro)
        if loss is None:
            row = torch.tensor([0.0, 0.0, float(samples), 1.0], dtype=torch.float64)
        else:
            if loss.requires_grad:
                loss.register_hook(micro.take)
            n = torch.as_tensor(items, dtype=torch.float64, device=loss.device)
            row = torch.stack([loss.detach().to(torch.float64) / scale * n, n,
                               torch.tensor(float(samples), dtype=torch.float64,
                                            device=loss.device),
                               torch.ones((), dtype=torch.float64, device=loss.device)])
        self._sums = row if self._sums is None else self._sums + row.to(self._sums.device)

    def before_step(self, optimizer: torch.optim.Optimizer,
                    scheduler_steps: int | None = None) -> None:
        self.sink.before_step(optimizer, scheduler_steps)

    def end_update(self, epoch: int | None = None) -> None:
        """The update is done: its loss and samples over every rank to the sink (one all-reduce
        under several processes)."""
        sums = self._sums if self._sums is not None else torch.zeros(4, dtype=torch.float64)
        if self.world > 1:
            if self.device is not None:
                sums = sums.to(self.device)
            dist.all_reduce(sums)
        loss_items, items, samples, _ = sums.tolist()
        window = tuple(MicroBatch(self.rank, m.ids,
                                  None if m.weight is None else float(m.weight) / self.world)
                       for m in self._micro)
        self._micro, self._sums = [], None
        self.sink.update(loss_items / items if items else None, int(samples), epoch, window)

    def gathered(self, windows: list[Window]) -> list[Window] | None:
        """Every rank's ``windows`` merged, update by update, on rank 0 (None on the others);
        one collective under several processes."""
        if self.world == 1:
            return windows
        parts: list[list[Window]] = [[] for _ in range(self.world)] if self.rank == 0 else []
        dist.gather_object(windows, parts if self.rank == 0 else None, dst=0)
        if self.rank != 0:
            return None
        count = max(len(p) for p in parts)
        return [tuple(m for p in parts if k < len(p) for m in p[k]) for k in range(count)]


def _check_every(every: object) -> None:
    if not (isinstance(every, int) and every >= 1):
        raise ValueError(f"every must be a whole number >= 1, got {every!r}")


Params = Callable[[], Iterable[torch.Tensor]]


class CallbackBase:
    """What every framework's ``LrcheckCallback`` shares: its arguments (a Recorder file
    ``path`` to write, or a ``sink``; a fingerprint every ``every`` >= 1 updates; ``append`` to
    add to an existing file) checked when it is made, and the ``Tap`` it records through, opened
    once the framework has set up its processes (``open_tap``) and closed with its file
    (``close_sink``)."""

    def __init__(self, path: str | Path | None = None, every: int = 1, append: bool = False,
                 sink: Sink | None = None) -> None:
        if path is None and sink is None:
            raise ValueError("LrcheckCallback needs a path to write to (or a sink)")
        _check_every(every)
        self.path, self.every, self.append, self.sink = path, every, append, sink
        self.tap: Tap | None = None
        self._owned: FileSink | None = None

    def open_tap(self, params: Params, processes: tuple[int, int],
                 device: torch.device | str | None) -> Tap:
        """The ``Tap`` of a run whose parameters are ``params()``, on ``processes`` (world,
        rank: the framework's own view), its losses on ``device``: into the sink, or into a
        ``FileSink`` of ``path`` that rank 0 writes."""
        sink = self.sink
        if sink is None:
            assert self.path is not None
            sink = self._owned = FileSink(self.path, params, every=self.every,
                                          append=self.append, rank=processes[1])
        self.tap = Tap(sink, device, processes)
        return self.tap

    def close_sink(self) -> None:
        """The Recorder file this callback opened, closed (a sink it was given stays open)."""
        if self._owned is not None:
            self._owned.close()
            self._owned = None


class FileSink:
    """A Recorder line per update (rank 0 writes): step, samples_seen, the LR of every group,
    the loss, and every ``every``-th update a ``fingerprint`` of ``params()``."""

    def __init__(self, path: str | Path, params: Params, *, every: int = 1,
                 append: bool = False, rank: int | None = None) -> None:
        _check_every(every)
        rank = world_and_rank()[1] if rank is None else rank
        self.recorder = Recorder(path, append=append, enabled=rank == 0)
        self.params, self.every = params, every
        self._lr: list[float] = []

    def before_step(self, optimizer: torch.optim.Optimizer, scheduler_steps: int | None) -> None:
        self._lr = [float(g["lr"]) for g in optimizer.param_groups]

    def update(self, loss: float | None, samples: int, epoch: int | None,
               window: Window) -> None:
        if not self.recorder.enabled:
            return
        fp = (fingerprint(self.params()) if self.recorder.step % self.every == 0 else None)
        self.recorder.log(lr=self._lr, samples=max(samples, 1), loss=loss, fingerprint=fp)

    def close(self) -> None:
        self.recorder.close()
