"""Lockstep: the candidate's update k computed from exactly the state the reference's update k
started from, so that each update is compared at the rounding level and no drift accumulates
(docs/design.md, "lrcheck's own loop: effects in lockstep").

Two trainings that differ only in the order of a floating-point sum part at the last bit, and
small batches, a high LR or AdamW amplify that by orders of magnitude over hundreds of updates:
compared free-running, a correct configuration fails a fixed tolerance. In lockstep the
reference records its parameters and its optimizer's state after every update; before each
update the candidate loads them (its own scheduler, GradScaler, data and loss weights stay its
own: the causes, checked exactly, and the skipped steps, checked by ``skipped-steps``), then
trains the update its own way. The difference
after the update is what accumulation (and the processes) computed differently in that one
update: the direct statement "accumulation computes the same update".

The state is not loaded into the first update after a ``--resume-at``: that update starts from
what the candidate's checkpoint restored, so whatever a resume loses shows at that update.
"""

from __future__ import annotations

import mmap
import os
import tempfile
import weakref
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import numpy as np
import torch

from lrcheck.trace import RunTrace

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup


def state_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The optimizer's state (momentum buffers; AdamW's moments and step counts) as flat views,
    parameter by parameter in the param groups' order, keys sorted: the layout a snapshot row
    and ``Lockstep.load`` share. Empty before the first ``optimizer.step()``."""
    tensors = []
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p, {})
            for key in sorted(state):
                value = state[key]
                if isinstance(value, torch.Tensor):
                    tensors.append(value.detach().view(-1))
    return tensors


class StateSnapshots:
    """The optimizer's state after every update of a run, one row per update, kept in an
    unlinked temporary file rather than in memory: a row is written as its update ends
    (``os.pwrite`` of one flat copy, reused) and ``array()`` maps the file, which
    ``Lockstep.load`` reads a row at a time, giving the pages back as it goes. So what lockstep
    holds in memory is O(model), not O(model x updates); the rows live in the page cache. Rows
    are float64 for a float64 run, else float32 (exact for float32, bfloat16 and float16
    values; a float32 step count is exact to 2^24 updates); a row whose update made no step
    (a skipped one) is NaN. A state whose size changes is an error: the rows would not fit the
    candidate's."""

    def __init__(self, updates: int, dtype: torch.dtype, device: torch.device | str) -> None:
        self.updates, self.device = updates, device
        self.dtype = torch.float64 if dtype == torch.float64 else torch.float32
        self.numpy_dtype = np.dtype("float64" if dtype == torch.float64 else "float32")
        self.flat: torch.Tensor | None = None  # the last row, on ``device``
        self.file: IO[bytes] | None = None
        self.written = 0  # rows in the file

    def take(self, optimizer: torch.optim.Optimizer, row: int) -> None:
        tensors = state_tensors(optimizer)
        if not tensors:
            return  # no step made yet (a skipped one): the row stays NaN
        flat = self.join(tensors, row)
        if self.file is None:
            self.file = tempfile.TemporaryFile(prefix="lrcheck-states-")  # noqa: SIM115 - kept
            weakref.finalize(self, self.file.close)  # closed with this, not left to warn
        self._pad(row)
        self._write(row, flat.cpu().numpy())
        self.written = row + 1

    def join(self, tensors: list[torch.Tensor], row: int) -> torch.Tensor:
        """``tensors`` (``state_tensors``) as one flat row on ``device``, in ``dtype``."""
        size = sum(t.numel() for t in tensors)
        if self.flat is None:
            self.flat = torch.empty(size, dtype=self.dtype, device=self.device)
        if size != self.flat.numel():
            raise RuntimeError(f"the optimizer's state changed size at update {row}: "
                               f"{self.flat.numel()} values, now {size}")
        if all(t.dtype == self.dtype and t.device == self.flat.device for t in tensors):
            torch.cat(tensors, out=self.flat)  # straight into the row, no temporary
        else:
            # AdamW's step counts stay on the CPU beside moments on a GPU (unless capturable or
            # fused), and may be of another dtype: each is moved and cast as it is joined.
            self.flat.copy_(torch.cat([t.to(self.flat.device, self.dtype) for t in tensors]))
        return self.flat

    def _write(self, row: int, values: np.ndarray) -> None:
        assert self.file is not None
        data = np.ascontiguousarray(values).data.cast("B")
        offset, done = row * len(data), 0
        while done < len(data):
            done += os.pwrite(self.file.fileno(), data[done:], offset + done)

    def _pad(self, rows: int) -> None:
        """NaN rows up to ``rows`` (updates that made no step)."""
        assert self.flat is not None
        nan = np.full(self.flat.numel(), np.nan, dtype=self.numpy_dtype)
        for row in range(self.written, rows):
            self._write(row, nan)
        self.written = max(self.written, rows)

    def array(self, done: int) -> np.ndarray:
        """The rows of the ``done`` updates made: the file mapped read-only."""
        if self.flat is None or self.file is None or done == 0:
            return np.empty((0, 0))
        self._pad(done)
        self.file.flush()
        # The mapping keeps the (unlinked) file's pages; the file object is closed with this.
        return np.memmap(self.file, dtype=self.numpy_dtype, mode="r",
                         shape=(done, self.flat.numel()))


def _give_back(rows: np.ndarray, done: int) -> None:
    """The pages of a mapped ``rows`` (``StateSnapshots.array``) before row ``done`` dropped from
    this process's memory (read again from the page cache if a row is read again)."""
    mapped = getattr(rows, "_mmap", None)
    if mapped is None or not hasattr(mmap, "MADV_DONTNEED") or rows.ndim != 2:
        return
    end = done * rows.shape[1] * rows.itemsize // mmap.PAGESIZE * mmap.PAGESIZE
    if end > 0:
        mapped.madvise(mmap.MADV_DONTNEED, 0, end)


@dataclass
class Lockstep:
    """The reference's parameters (``params[k]``: after update k, flat, in the layout of
    ``Recording``'s snapshots) and optimizer state (``states[k]``: ``state_tensors`` after
    update k) that the candidate's updates start from. ``loaded``: how many updates did."""

    params: np.ndarray
    states: np.ndarray
    loaded: int = 0

    def load(self, net: torch.nn.Module, optimizer: torch.optim.Optimizer, update: int) -> None:
        """Before ``update``: the reference's parameters and optimizer state after ``update - 1``
        into ``net`` and ``optimizer`` (nothing before update 0, which every run starts from the
        same build, nor past the reference's last update)."""
        k = update - 1
        if k < 0 or k >= min(len(self.params), len(self.states)):
            return
        targets = state_tensors(optimizer)
        if sum(t.numel() for t in targets) != self.states.shape[1]:
            return  # the candidate's state is not the reference's shape (no step yet, say)
        with torch.no_grad():
            _copy_into([p.detach().view(-1) for p in net.parameters()], self.params[k])
            _copy_into(targets, self.states[k])
        _give_back(self.states, k)  # the rows before this one: read
        self.loaded += 1


def _copy_into(targets: list[torch.Tensor], row: np.ndarray) -> None:
    source = torch.from_numpy(np.array(row))  # a copy: a mapped row is read-only
    offset = 0
    for t in targets:
        n = t.numel()
        t.copy_(source[offset:offset + n].to(t.device, t.dtype))
        offset += n


def lockstep_from(reference: RunTrace | None) -> Lockstep | None:
    """The states a reference recorded (``keep_states``) for a candidate to load, if any."""
    if reference is None or reference.optimizer_states is None:
        return None
    return Lockstep(reference.params, reference.optimizer_states)


def broadcast(lockstep: Lockstep | None, rank: int, device: str,
              group: ProcessGroup | None = None) -> Lockstep:
    """Rank 0's ``lockstep`` on every rank of the process group (one broadcast of the shapes,
    two of the arrays; on ``device``, which nccl needs): the reference trained on rank 0
    alone."""
    import torch.distributed as dist

    shapes = torch.zeros(4, dtype=torch.int64, device=device)
    if rank == 0:
        lockstep = lockstep or Lockstep(np.empty((0, 0)), np.empty((0, 0)))
        shapes = torch.tensor([*lockstep.params.shape, *lockstep.states.shape],
                              dtype=torch.int64, device=device)
    dist.broadcast(shapes, 0, group=group)
    p_rows, p_cols, s_rows, s_cols = (int(v) for v in shapes)
    arrays = []
    for rows, cols, name in ((p_rows, p_cols, "params"), (s_rows, s_cols, "states")):
        if rank == 0:
            assert lockstep is not None
            t = torch.from_numpy(np.ascontiguousarray(getattr(lockstep, name),
                                                      dtype=np.float64))
        else:
            t = torch.empty((rows, cols), dtype=torch.float64)
        t = t.to(device)
        dist.broadcast(t, 0, group=group)
        arrays.append(t.cpu().numpy())
    if rank == 0:
        assert lockstep is not None
        return lockstep
    return Lockstep(arrays[0], arrays[1])
