"""What ``lrcheck record`` reads of an optimizer and its parameters, whatever wraps them: the
tensors (a DTensor's local shard), the wrapper stepping it (DeepSpeed's, Accelerate's), the torch
optimizer behind a wrapper, the state's own step counter; and the numbers a line holds (a
setting, a norm; a GradScaler's loss scale); the optimizer's class, settings and state's keys
(``Settings``)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, SupportsFloat

import torch

from lrcheck.hparams import CLASS, SETTINGS, STATE, counts
from lrcheck.recorder import json_number


def state_step(optimizer: torch.optim.Optimizer, synced: bool) -> float | None:
    """The optimizer state's own step counter (AdamW's ``state[p]["step"]``) of the first
    parameter that has one; None where none has (SGD) or it is on a device and not ``synced``."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            state = optimizer.state.get(p)
            if not state or "step" not in state:
                continue
            step = state["step"]
            if isinstance(step, torch.Tensor):
                if step.numel() != 1 or not (synced or step.device.type == "cpu"):
                    return None
                return float(step)
            return float(step) if isinstance(step, (int, float)) else None
    return None


def name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def stepped_by(optimizer: torch.optim.Optimizer) -> type | None:
    """The class of the wrapper whose ``step`` is stepping ``optimizer`` (its ``.optimizer``:
    DeepSpeed's, Accelerate's), found among the callers of the pre-hook; None: stepped
    directly."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(12):
        frame = frame.f_back if frame is not None else None
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if owner is not None and owner is not optimizer and \
                getattr(owner, "optimizer", None) is optimizer:
            return type(owner)
    return None


# torch.distributed.checkpoint's get_state_dict / set_state_dict make a fresh optimizer's state
# by stepping it once with zero gradients and LR 0 (``_init_optim_state``): no update.
DCP_STATE = "torch.distributed.checkpoint.state_dict"


def real_steps(*hooks: Callable[..., None]) -> tuple[Callable[..., None], ...]:
    """``hooks`` (the optimizer step's pre- and post-hook), each skipping the steps made
    inside ``DCP_STATE``'s ``_init_optim_state``, found among the callers."""
    def initialising() -> bool:
        module = sys.modules.get(DCP_STATE)
        init = getattr(getattr(module, "_init_optim_state", None), "__code__", None)
        frame: FrameType | None = sys._getframe(2) if init is not None else None
        for _ in range(12):
            if frame is None:
                return False
            if frame.f_code is init:
                return True
            frame = frame.f_back
        return False

    def real(hook: Callable[..., None]) -> Callable[..., None]:
        def step(*args: object) -> None:
            if not initialising():
                hook(*args)
        return step

    return tuple(real(hook) for hook in hooks)


def params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in optimizer.param_groups for p in g["params"]]


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank; any other tensor itself."""
    local = getattr(t, "to_local", None)
    found: torch.Tensor = local() if callable(local) else t
    return found


def nudge(params: list[torch.Tensor]) -> None:
    """Every floating-point parameter (this rank's shard of it) one unit in the last place up:
    a twin's start, the floor of a free-running pair's drift."""
    with torch.no_grad():
        for p in params:
            local = local_tensor(p)
            if local.is_floating_point() and local.numel():
                local.copy_(torch.nextafter(local, torch.full_like(local, float("inf"))))


def torch_optimizer(optimizer: object) -> object:
    """The torch optimizer behind a wrapper (Accelerate's, DeepSpeed's: ``.optimizer``)."""
    for _ in range(4):
        if isinstance(optimizer, torch.optim.Optimizer) or optimizer is None:
            return optimizer
        optimizer = getattr(optimizer, "optimizer", None)
    return optimizer


def number(value: object) -> float | str | None:
    """A setting or norm as a Recorder line holds it (not finite: its string); None: not a
    number."""
    if not isinstance(value, SupportsFloat):
        return None
    try:
        return json_number(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def scale(scaler: Any) -> float:
    """The loss scale of the GradScaler that last stepped an optimizer (1: none, or disabled)."""
    try:
        return float(scaler.get_scale()) if scaler is not None and scaler.is_enabled() else 1.0
    except (AttributeError, TypeError, RuntimeError):
        return 1.0


def _setting(value: object) -> object:
    """A param group's setting as a Recorder line holds it (a one-element tensor: its number)."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else None
    if isinstance(value, (tuple, list)):
        return [_setting(v) for v in value]
    if isinstance(value, bool):
        return value
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


class Settings:
    """The optimizer's keys of its Recorder lines (``lrcheck.hparams``): its class on the first
    line; its settings (read in the pre-hook, as the step is about to use them) and its state's
    keys per param group (read after the step), each where it changed since the last line."""

    def __init__(self, cls: str) -> None:
        self.cls = cls
        self.read: dict[str, list[Any]] = {}
        self.last: dict[str, Any] = {}

    def before(self, optimizer: torch.optim.Optimizer) -> None:
        groups = optimizer.param_groups
        found = {key: [_setting(g.get(key)) for g in groups] for key in groups[0]}
        self.read = {key: values for key, values in found.items()
                     if all(counts(key, v) for v in values)}

    def line(self, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
        state = [sorted({str(key) for p in g["params"] for key in optimizer.state.get(p, {})})
                 for g in optimizer.param_groups]
        now = {SETTINGS: self.read, STATE: state}
        out = {key: value for key, value in now.items() if self.last.get(key) != value}
        if not self.last:
            out[CLASS] = self.cls
        self.last = now
        return out


def stored(t: torch.Tensor) -> torch.Tensor:
    """The values ``t`` stores: a sparse gradient's (an ``nn.Embedding(sparse=True)``'s),
    coalesced, whose norm is the gradient's; a dense tensor itself."""
    return t.coalesce().values() if t.is_sparse else t
