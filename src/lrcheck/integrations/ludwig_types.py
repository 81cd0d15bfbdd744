"""What lrcheck uses of Ludwig's objects (0.11), which carry no types: the trainer its callbacks
are given, its distributed strategy and scheduler, the progress tracker and the training set as
Protocols, its model as the torch module it is. For type checking only (imported under
``TYPE_CHECKING``): nothing here imports Ludwig or runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch


class Model(torch.nn.Module):
    """Ludwig's ECD model, a torch module: called on the input features, it returns its outputs
    by name (``"label::logits"``); ``train_loss`` is what ``LrcheckCallback`` wraps for the
    run."""

    train_loss: Callable[..., tuple[torch.Tensor, object]]


class Distributed(Protocol):
    def size(self) -> int: ...

    def rank(self) -> int: ...


class StepInfo(Protocol):
    num_training_steps: int
    num_warmup_steps: float


class Scheduler(Protocol):
    """Ludwig's LR scheduler: what it sized the schedule with (``_train_scheduler``, torch's
    own, is read through ``getattr``)."""

    step_info: StepInfo


class Trainer(Protocol):
    model: Model
    optimizer: torch.optim.Optimizer
    scheduler: Scheduler
    distributed: Distributed
    device: torch.device | str
    received_sigint: bool

    def set_steps_to_1_or_quit(self, signum: int, frame: object) -> None: ...


class ProgressTracker(Protocol):
    epoch: int


class Dataset(Protocol):
    """A processed training set: its batcher fetches each micro-batch's rows with ``get``."""

    get: Callable[..., object]
