"""The lockstep exchange's size, place and waits (``record.lockstep``): the reference sizes it
from its model before its first update and puts its states in the first folder that holds them
with a margin, else lockstep is off, saying so; every wait has a deadline."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from lrcheck.procs.owner import gone
from lrcheck.record.roles import ENV_WAIT

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


# How long one side waits for the other at one update, unless ``roles.ENV_WAIT`` says otherwise:
# generous (an update of the other side may take minutes), the stall timeout of ``lrcheck run``.
# Before the other side's first update (its start: a model loaded, a dataset tokenized), longer.
WAIT_S, START_S = 600.0, 3600.0


def wait(ready: Callable[[], bool], release: Path, what: str, started: bool = True,
          peer: str | None = None) -> bool:
    """Poll ``ready`` until it holds (True) or ``release`` exists, or the process ``peer``
    (``procs.owner.identity``) has ended, and it still does not; a ``TimeoutError`` naming
    ``what`` after ``WAIT_S`` seconds (``START_S`` until the other side has ``started``;
    ``roles.ENV_WAIT`` for both where set)."""
    delay, limit = 0.0002, wait_s(WAIT_S if started else START_S)
    deadline = time.monotonic() + limit
    while not ready():
        if release.exists() or (peer is not None and delay >= 0.01 and gone(peer)):
            return ready()
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {limit:g} s for {what} ({ENV_WAIT} sets how long)")
        time.sleep(delay)
        delay = min(delay * 2, 0.01)
    return True


def wait_s(default: float) -> float:
    try:
        return float(os.environ.get(ENV_WAIT, "") or default)
    except ValueError:
        return default


def text_of(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return "(its reason could not be read)"


def dense(t: torch.Tensor) -> torch.Tensor:
    """``t``, dense (a sparse gradient, an ``nn.Embedding(sparse=True)``'s, made whole)."""
    return t.to_dense() if t.is_sparse else t
