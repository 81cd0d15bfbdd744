"""Where one process's training stood when it began and when it ended, written into its
description (``rank{R}.json``): when the process started, and, before its first update and at
its end, the first optimizer's state step counter, its scheduler's position, the fingerprint
of its parameters and a GradScaler's loss scale. ``record.folder`` joins the processes of one
rank in one command (a resume: ``python train.py --stop-after 12 --save c.pt && python
train.py --resume c.pt``) in the order they started, and ``checks.continuation`` judges from
these whether each later process carried on where the one before it ended."""

from __future__ import annotations

import hashlib
import os
import random
import sys
import time
from types import ModuleType
from typing import Any

import torch

from lrcheck.record.optimizers import local_tensor, params, scale, state_step, torch_optimizer
from lrcheck.record.roles import ENV_RESUMED
from lrcheck.recorder import fingerprint


def standing(optimizer: torch.optim.Optimizer, scheduler: object,
             scaler: object = None) -> dict[str, Any]:
    """Where a training stands: the optimizer state's step counter (0: no state yet, a fresh
    optimizer or one whose state was not loaded; None: its state keeps none), the
    ``last_epoch`` of ``scheduler`` (None: none stepped on it), the fingerprint of the
    optimizer's parameters (this rank's shards) and the loss scale of ``scaler``, the
    GradScaler that last stepped an optimizer (None: none; 1: disabled)."""
    step = state_step(optimizer, synced=True)
    epoch = getattr(scheduler, "last_epoch", None)
    return {"opt_step": 0.0 if step is None and not optimizer.state else step,
            "sched_epoch": epoch if isinstance(epoch, int) else None,
            "fingerprint": fingerprint(local_tensor(p) for p in params(optimizer)),
            "scale": None if scaler is None else scale(scaler)}


def rng_print() -> int:
    """A fingerprint of torch's default random number generators' state (the CPU's, and the
    current CUDA device's once CUDA is initialised): 48 bits of its hash."""
    digest = hashlib.blake2b(torch.get_rng_state().numpy().tobytes(), digest_size=6)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        digest.update(torch.cuda.get_rng_state().numpy().tobytes())
    return int.from_bytes(digest.digest(), "big")


def _python_print() -> int:
    """Python's ``random``'s state, 48 bits of its hash: of ints and a float, the same in
    every process (a string's would not be)."""
    version, internal, gauss = random.getstate()
    return hash((version, internal, -1.0 if gauss is None else gauss)) & (1 << 48) - 1


def _numpy_print(numpy: ModuleType) -> int | None:
    """NumPy's global generator's (``np.random.get_state``) state, 48 bits of its hash; None
    where it is not NumPy's own Mersenne Twister (a state of another form)."""
    state = numpy.random.get_state()
    if not isinstance(state, tuple) or len(state) != 5:
        return None
    _, keys, pos, has_gauss, gauss = state
    digest = hashlib.blake2b(keys.tobytes(), digest_size=6)
    digest.update(repr((pos, has_gauss, gauss)).encode())
    return int.from_bytes(digest.digest(), "big")


def rng_prints() -> dict[str, int]:
    """The fingerprints of the global random number generators a training draws from
    (``record.restore.RNGS``): torch's (``rng_print``), NumPy's global one (``np.random``'s, where
    NumPy was imported) and Python's ``random``. Read in the pre-hook of each update
    (``record.process``), after the window's forward passes drew from them (a dropout's masks,
    an augmentation's draws), they tell whether a resumed process drew from the streams the
    interrupted one had (``checks.continuation``). A generator of the user's own (a
    ``torch.Generator``, ``np.random.default_rng``'s) cannot be found: not read."""
    out = {"rng": rng_print(), "rng_python": _python_print()}
    numpy = sys.modules.get("numpy")
    drawn = None if numpy is None else _numpy_print(numpy)
    return out if drawn is None else {**out, "rng_numpy": drawn}


class Standing:
    """One process's start time, and where its first optimizer stood before its first update
    and at its end (``described``)."""

    def __init__(self) -> None:
        self.started = time.time()
        self.schedulers: dict[int, object] = {}  # id(optimizer) → the last scheduler stepped
        self.start: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        # Where ``lrcheck run --interrupt-at`` stopped it (``record.interrupt``): the update
        # whose window it cut, the backward passes of that window made and the samples fed;
        # and, in a resumed process, how many tensors held a gradient before its first
        # backward pass (None: not looked at).
        self.cut: dict[str, Any] | None = None
        self.carried: int | None = None

    def stepped(self, optimizer: object, scheduler: object) -> None:
        if scheduler is not None:
            self.schedulers[id(torch_optimizer(optimizer))] = scheduler

    def described(self, optimizers: dict[int, Any], scaler: object = None) -> dict[str, Any]:
        """The keys of the process's description: where the first optimizer (the first of
        ``optimizers``' values, its ``.optimizer``) stood at the first description that has one
        (made in the pre-hook of its first update, before the step), and now (the last
        description is made at the process's end); ``scaler``: the GradScaler that last
        stepped an optimizer."""
        first = next(iter(optimizers.values()), None)
        if first is not None:
            try:  # at exit too, after an error of the user's program: never raise from here
                now = standing(first.optimizer, self.schedulers.get(id(first.optimizer)),
                               scaler)
            except (RuntimeError, ValueError, TypeError):
                now = None
            self.start = self.start or now
            self.end = now
            if now is not None and self.cut is not None and \
                    self.cut["update"] == first.recorder.step:  # not carried on past it
                self.end = {**now, "cut": self.cut}
        if self.start is not None and self.carried is not None:
            self.start = {**self.start, "carried_gradients": self.carried}
        if self.start is not None and os.environ.get(ENV_RESUMED):  # the --resume command's
            self.start = {**self.start, "resumed": True}
        return {"started": self.started, "start": self.start, "end": self.end}
