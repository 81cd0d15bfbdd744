"""What ``lrcheck record`` reads of an optimizer and its parameters, whatever wraps them: the
tensors (a DTensor's local shard), the wrapper stepping it (DeepSpeed's, Accelerate's), the torch
optimizer behind a wrapper, the state's own step counter."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import torch


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


def params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in optimizer.param_groups for p in g["params"]]


def local_tensor(t: Any) -> torch.Tensor:
    """A DTensor's shard on this rank; any other tensor itself."""
    return t.to_local() if hasattr(t, "to_local") else t  # type: ignore[no-any-return]


def plain(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        return [float(v) for v in value]
    return float(value) if isinstance(value, (int, float, torch.Tensor)) else None


def torch_optimizer(optimizer: Any) -> Any:
    """The torch optimizer behind a wrapper (Accelerate's, DeepSpeed's: ``.optimizer``)."""
    for _ in range(4):
        if isinstance(optimizer, torch.optim.Optimizer) or optimizer is None:
            return optimizer
        optimizer = getattr(optimizer, "optimizer", None)
    return optimizer
