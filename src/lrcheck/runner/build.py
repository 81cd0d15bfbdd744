"""What a run trains with, built the same way by every loop: the data as tensors, and the model,
optimizer and scheduler of a ``RunSpec`` — from the seed, so that every build (a resume's too)
starts from the same weights."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from lrcheck.experiments.schedulers import make_scheduler
from lrcheck.experiments.tasks import TASKS, Dataset
from lrcheck.plan.steps import ScheduleContext
from lrcheck.spec import RunSpec

MOMENTUM = 0.9
WEIGHT_DECAY = {"sgd": 0.0, "adamw": 0.01}


def make_optimizer(spec: RunSpec, model: torch.nn.Module) -> torch.optim.Optimizer:
    """Two param groups, as real recipes have: weights (with weight decay) and the rest."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY[spec.optimizer]},
              {"params": rest, "weight_decay": 0.0}]
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=spec.lr)
    return torch.optim.SGD(groups, lr=spec.lr, momentum=MOMENTUM)


def as_input(array: np.ndarray, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """Features in the run's dtype; integer token ids stay integers."""
    if np.issubdtype(array.dtype, np.integer):
        return torch.as_tensor(array, device=device)
    return torch.as_tensor(array, dtype=dtype, device=device)


@dataclass
class Parts:
    """What a run trains with; a resume saves their state and builds them again from scratch.
    ``model`` is what the loop feeds (``net`` itself, or ``net`` wrapped by DDP); ``scaler`` the
    GradScaler of ``--amp fp16``."""

    net: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler | None = None
    model: torch.nn.Module = field(init=False)

    def __post_init__(self) -> None:
        self.model = self.net


def net_dtype(net: torch.nn.Module) -> torch.dtype:
    """The floating-point type of ``net``'s parameters."""
    return next(net.parameters()).dtype


def build(spec: RunSpec, data: Dataset, ctx: ScheduleContext | None,
          device: str | None, shard: Callable[[torch.nn.Module], None] | None = None) -> Parts:
    """The task's model seeded by ``spec.seed`` in ``spec.dtype`` (on ``device``; None leaves it
    where it was made, for a framework that places it itself), its optimizer, and the schedule
    ``spec.scheduler`` made with ``ctx`` (None: no schedule yet, for a framework that sizes it
    once it knows its own step count). ``shard``: what shards the model in place (FSDP's
    ``fully_shard``), before the optimizer is made on the parameters it leaves."""
    torch.manual_seed(spec.seed)
    net = TASKS[spec.task].build_model(data).to(device, getattr(torch, spec.dtype))
    if spec.twin:
        # The noise-floor twin starts one unit in the last place away from the reference too:
        # the smallest difference there is, which the training then amplifies as it does the
        # candidate's rounding (its samples are also summed in another order: plan/order.py).
        # Under --amp bf16 the unit is bfloat16's: the engine casts the model to it, which
        # would round a float32 unit away.
        unit = torch.bfloat16 if spec.amp == "bf16" else net_dtype(net)
        with torch.no_grad():
            for p in net.parameters():
                low = p.to(unit)
                p.copy_(torch.nextafter(low, torch.full_like(low, float("inf"))))
    if shard is not None:
        shard(net)
    optimizer = make_optimizer(spec, net)
    return Parts(net, optimizer,
                 None if ctx is None else make_scheduler(spec.scheduler, optimizer, ctx))
