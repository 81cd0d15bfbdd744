"""The lockstep exchange's size and place (``record.lockstep``): the reference sizes it from
its model before its first update and puts its states in the first folder that holds them with a
margin, else lockstep is off, saying so."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import torch

# Updates the reference may run ahead of the slowest candidate rank: two states on disk.
DEPTH = 2
# The room the exchange's states must leave free where they go: their size times MARGIN.
MARGIN = 1.5


def need(params: Sequence[torch.Tensor], state_bytes: int = 0) -> int:
    """The bytes the exchange holds at most: the initial parameters, and DEPTH + 1 states of
    parameters, gradients and optimizer state (``state_bytes``; 0, before the optimizer's first
    step: estimated as two tensors a parameter, Adam's moments)."""
    size = sum(p.numel() * p.element_size() for p in params)
    return size + (DEPTH + 1) * (2 * size + (state_bytes or 2 * size))


def place(needed: int, free: Sequence[tuple[Path, int]]) -> Path | None:
    """The first folder of ``free`` (each with its free bytes) that holds ``needed`` bytes
    with the margin (``MARGIN``); None where none does."""
    return next((folder for folder, room in free if room > needed * MARGIN), None)


def state_bytes(optimizer: torch.optim.Optimizer | None) -> int:
    if optimizer is None:
        return 0
    return sum(v.numel() * v.element_size() for entry in optimizer.state.values()
               for v in entry.values() if torch.is_tensor(v))


def free_space(folders: Sequence[Path]) -> list[tuple[Path, int]]:
    found = []
    for folder in folders:
        try:
            found.append((folder, shutil.disk_usage(folder).free))
        except OSError:
            continue
    return found
