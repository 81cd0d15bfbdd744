"""``--amp fp16``: float16 autocast, and a ``torch.amp.GradScaler`` that skips the optimizer
steps whose gradients are not finite."""

from __future__ import annotations

import contextlib

import torch

from lrcheck.spec import RunSpec

# A low initial scale, so that only the injected overflows make the GradScaler skip a step (at
# GradScaler's default of 2**16 this model's first fp16 gradients overflow by themselves).
AMP_INIT_SCALE = 2.0 ** 8


def make_scaler(spec: RunSpec, device: str) -> torch.amp.GradScaler | None:
    """The GradScaler of ``--amp fp16``, or None."""
    if spec.amp != "fp16":
        return None
    return torch.amp.GradScaler(device, init_scale=AMP_INIT_SCALE)


def amp_autocast(spec: RunSpec, device: str) -> contextlib.AbstractContextManager[object]:
    """float16 autocast for ``--amp fp16``, else a context that does nothing."""
    if spec.amp != "fp16":
        return contextlib.nullcontext()
    return torch.autocast(device, dtype=torch.float16)


def optimizer_step(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> bool:
    """``optimizer.step()``, through the scaler when there is one; True when the scaler skipped
    the step because the gradients were not finite (its scale then drops)."""
    if scaler is None:
        optimizer.step()
        return False
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() < before
