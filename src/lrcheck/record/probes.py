"""A fingerprint of the gradient per element that survives sharding: per tensor, the dot product
of its gradient with a fixed pseudo-random tensor of the tensor's global shape (the probe,
seeded by the shape alone, so every rank and a one-process reference draw the same; unit norm,
so the dot product is at most the gradient's norm). A rank holding a shard of a ``DTensor``
dots its shard with the probe's same slice (``distribute_tensor`` of the probe on the
parameter's mesh and placements, each rank keeping its own slice: no communication), so the
shards' dot products summed, each shard once (``record.placed``), are the whole gradient's.
A gradient permuted or mis-sliced keeps its norm but not its dot product.

Each probe's slice is drawn once per parameter and kept (float64, the size of the rank's
shard). ``None`` for a tensor whose slice is not known (a ``Partial`` placement, a gradient
placed unlike its parameter, a sparse gradient)."""

from __future__ import annotations

import weakref
import zlib
from collections.abc import Sequence

import torch

from lrcheck.record.optimizers import local_tensor

# Per parameter (by id, with a weak reference to tell a new tensor at a reused id): its slice.
_PROBES: dict[int, tuple[weakref.ref[torch.Tensor], torch.Tensor | None]] = {}


def probe(shape: Sequence[int]) -> torch.Tensor:
    """The probe of a tensor of global ``shape``: standard normal draws (float64, CPU) seeded
    by the shape, scaled to unit norm."""
    seed = zlib.crc32(repr(tuple(int(n) for n in shape)).encode())
    drawn = torch.randn(tuple(shape), dtype=torch.float64,
                        generator=torch.Generator().manual_seed(seed))
    norm = torch.linalg.vector_norm(drawn)
    return drawn / norm if norm > 0 else drawn


def _slice(p: torch.Tensor) -> torch.Tensor | None:
    """This rank's slice of ``p``'s probe, on its device (None: not known)."""
    mesh, placements = getattr(p, "device_mesh", None), getattr(p, "placements", None)
    whole = probe(p.shape)
    if mesh is None or placements is None:
        return whole.to(p.device)
    if any(getattr(x, "is_partial", lambda: False)() for x in placements):
        return None
    from torch.distributed.tensor import distribute_tensor

    local = distribute_tensor(whole.to(local_tensor(p).device), mesh, placements,
                              src_data_rank=None)
    return local_tensor(local).detach()


def _dot(p: torch.Tensor) -> torch.Tensor | None:
    """``p``'s gradient (its local shard) dotted with its probe's slice, in float64."""
    grad = p.grad
    if grad is None or grad.is_sparse or \
            getattr(grad, "placements", None) != getattr(p, "placements", None):
        return None
    held = _PROBES.get(id(p))
    if held is None or held[0]() is not p:
        try:
            mine = _slice(p)
        except (RuntimeError, ValueError, NotImplementedError):  # a placement not split so
            mine = None
        _PROBES[id(p)] = held = weakref.ref(p), mine
        weakref.finalize(p, _PROBES.pop, id(p), None)
    mine, local = held[1], local_tensor(grad).detach()
    if mine is None or mine.shape != local.shape:
        return None
    return torch.sum(local.to(torch.float64) * mine.to(local.device))


def grad_dots(params: Sequence[torch.Tensor]) -> list[float | None]:
    """Per tensor, this rank's gradient shard dotted with its probe's slice (0: no gradient;
    None: not known); one transfer."""
    with torch.no_grad():
        found = [torch.zeros((), dtype=torch.float64) if p.grad is None else _dot(p)
                 for p in params]
    known = [x for x in found if x is not None]
    values = torch.stack([x.to(known[0].device) for x in known]).tolist() if known else []
    it = iter(values)
    return [None if x is None else float(next(it)) for x in found]
