"""TRL's fused LM head tapped (``tap_trl``): the per-token log-probabilities it returns are
weighed by the samples' tap (``record.taps.Taps.head``; ``record.tokens``)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from lrcheck.record.guard import RECORDING

# Where TRL (1.16) keeps the autograd function of its fused LM head, which its SFT trainer puts in
# the model's forward: the loss never goes through torch's loss functions.
TRL_UTILS = "trl.trainer.utils"


def tap_trl(heard: Callable[[torch.Tensor, object], None]) -> bool:
    """Wrap TRL's fused LM head (``TRL_UTILS``'s ``_ChunkedLogProbFunction.apply``) so that
    ``heard(hidden, out)`` weighs each call's per-token log-probabilities (``Taps.head``);
    False where it has none."""
    utils = sys.modules.get(TRL_UTILS)
    function: Any = getattr(utils, "_ChunkedLogProbFunction", None)
    if utils is None or function is None or getattr(function, "_lrcheck", False):
        return function is not None

    class Tapped:
        """Stands for the function where TRL calls its ``apply``."""

        _lrcheck = True
        wrapped = function

        @staticmethod
        def apply(hidden: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            out = function.apply(hidden, *args, **kwargs)
            RECORDING.run("TRL's fused LM head tap", heard, hidden, out)
            return out

    utils._ChunkedLogProbFunction = Tapped  # type: ignore[attr-defined]
    return True
