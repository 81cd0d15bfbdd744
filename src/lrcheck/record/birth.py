"""The fingerprint of each optimizer's parameters when it was made, which a lockstep pair's
candidate compares with the reference's (the twin's nudge is ``optimizers.nudge``)."""

from __future__ import annotations

import functools
from typing import Any

import torch

from lrcheck.record import guard, optimizers
from lrcheck.recorder import fingerprint

# In a lockstep pair, the fingerprint of an optimizer's parameters when it was made, set on it:
# the weights before anything the user's loop does to them.
BORN = "_lrcheck_born"


def fingerprint_at_birth() -> None:
    """Wrap ``Optimizer.__init__`` so that each optimizer keeps (``BORN``) the fingerprint of
    its parameters as they were when it was made."""
    original = torch.optim.Optimizer.__init__
    if getattr(original, "_lrcheck", False):
        return

    @functools.wraps(original)
    def init(self: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if not hasattr(self, BORN):
            guard.RECORDING("the optimizer's fingerprint at birth", _born)(self)

    def _born(optimizer: torch.optim.Optimizer) -> None:
        setattr(optimizer, BORN, fingerprint(optimizers.local_tensor(p)
                                             for p in optimizers.params(optimizer)))

    init._lrcheck = True  # type: ignore[attr-defined]
    torch.optim.Optimizer.__init__ = init  # type: ignore[method-assign]
