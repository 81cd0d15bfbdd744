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

from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    """The optimizer's state after every update of a run, one row per update in the run's
    ``dtype`` (a float32 step count is exact to 2^24 updates), on ``device``, allocated at the
    first snapshot, when the state exists. A state whose size changes is an error: the rows
    would not fit the candidate's."""

    def __init__(self, updates: int, dtype: torch.dtype, device: torch.device | str) -> None:
        self.updates, self.dtype, self.device = updates, dtype, device
        self.rows: torch.Tensor | None = None
        self.beyond: list[torch.Tensor] = []

    def take(self, optimizer: torch.optim.Optimizer, row: int) -> None:
        tensors = state_tensors(optimizer)
        if not tensors:
            return  # no step made yet (a skipped one): the row stays NaN
        size = sum(t.numel() for t in tensors)
        if self.rows is None:
            self.rows = torch.full((self.updates, size), float("nan"), dtype=self.dtype,
                                   device=self.device)
        if size != self.rows.shape[1]:
            raise RuntimeError(f"the optimizer's state changed size at update {row}: "
                               f"{self.rows.shape[1]} values, now {size}")
        if all(t.dtype == self.dtype and t.device == self.rows.device for t in tensors):
            flat = self.rows[row] if row < self.updates else None
            if flat is not None:
                torch.cat(tensors, out=flat)  # straight into the row, no temporary
                return
        # AdamW's step counts stay on the CPU beside moments on a GPU (unless capturable or
        # fused), and may be of another dtype: each is moved and cast as it is joined.
        joined = torch.cat([t.to(self.rows.device, self.dtype) for t in tensors])
        if row < self.updates:
            self.rows[row].copy_(joined)
        else:
            self.beyond.append(joined)

    def array(self, done: int) -> np.ndarray:
        """The rows of the ``done`` updates made, on the host."""
        if self.rows is None:
            return np.empty((0, 0))
        rows = self.rows[:done - len(self.beyond)]
        if self.beyond:
            rows = torch.cat([rows, torch.stack(self.beyond)])
        return rows.cpu().numpy()


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
        self.loaded += 1


def _copy_into(targets: list[torch.Tensor], row: np.ndarray) -> None:
    source = torch.from_numpy(np.ascontiguousarray(row))
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
