"""The fixed sets a run's settings choose from, as ``str`` Enums, and the checks every option
goes through. ``RunSpec`` holds these members, the command line offers them as its choices
(``--help`` lists them), and a member is its value wherever a spec is written or compared:
``Dtype.FLOAT32 == "float32"``, ``f"{Dtype.FLOAT32}"`` is ``float32``, and ``result.json``, a
suite's TOML and the hand-off to torchrun workers carry the plain string.

Registry-backed choices (task, scheduler, policy, framework) are not here: their registries
(``experiments``, ``plan``) are the list.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import TypeVar

from lrcheck.errors import SpecError


class Choice(str, Enum):
    """A ``str`` Enum that reads, prints and repr's as its value (Python 3.10 has no
    ``StrEnum``), so that messages and file names are those of the plain string."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    def __repr__(self) -> str:
        return repr(self.value)


class Tail(Choice):
    """What happens to the samples left over at an epoch's end."""

    DROP = "drop"
    FLUSH = "flush"
    CARRY = "carry"


class LossNorm(Choice):
    """``global``: sum / samples of the whole effective batch; ``mean``: per-micro-batch mean /
    accum."""

    GLOBAL = "global"
    MEAN = "mean"


class Dtype(Choice):
    FLOAT64 = "float64"
    FLOAT32 = "float32"


class Device(Choice):
    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


class Amp(Choice):
    """``--amp``: ``fp16``, float16 autocast and a GradScaler (lrcheck's own loop); ``bf16``,
    DeepSpeed's ``bf16.enabled``: the model in bfloat16, float32 master weights in its
    optimizer wrapper (``--framework deepspeed``)."""

    OFF = "off"
    FP16 = "fp16"
    BF16 = "bf16"


class Optimizer(Choice):
    SGD = "sgd"
    ADAMW = "adamw"


class TrainerLoss(Choice):
    """``--trainer-loss``: how the Transformers Trainer scales a micro-batch's loss. ``mean``:
    the model's forward takes no ``num_items_in_batch`` (a model of one's own), so the Trainer
    divides each micro-batch's mean by the micro-batches in the window; ``num-items``: the
    forward takes it and sums over the window's items (transformers' models, trainer.py
    ``_get_num_items_in_batch``)."""

    MEAN = "mean"
    NUM_ITEMS = "num-items"


class LightningSampler(Choice):
    """``--lightning-sampler``: ``distributed``, Lightning's default
    (use_distributed_sampler=True), wraps lrcheck's sampler in a DistributedSampler, which pads
    uneven ranks; ``own``: every rank gets its own share of lrcheck's order
    (use_distributed_sampler=False)."""

    DISTRIBUTED = "distributed"
    OWN = "own"


C = TypeVar("C", bound=Choice)


def choose(flag: str, value: object, choices: type[C]) -> C:
    """``value`` as a member of ``choices``; a ``SpecError`` naming ``flag`` and every choice
    when it is none of them."""
    try:
        return choices(value)
    except ValueError:
        raise SpecError(f"{flag} {value!r} is not known; choose one of: "
                        f"{', '.join(choices)}") from None


def one_of(flag: str, value: str, choices: tuple[str, ...] | list[str]) -> None:
    """A registry's choice (a task, a policy, a framework): ``value`` is one of ``choices``."""
    if value not in choices:
        raise SpecError(f"{flag} {value!r} is not known; choose one of: {', '.join(choices)}")


def at_least(flag: str, value: int, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise SpecError(f"{flag} must be a whole number >= {low}, got {value!r}")


def check_timeout(timeout: float | None) -> None:
    """``--timeout`` (``compare(timeout=...)``): seconds > 0, or None for no limit."""
    if timeout is None:
        return
    if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool)
            and not math.isnan(timeout) and timeout > 0):
        raise SpecError(f"--timeout must be a number of seconds > 0, got {timeout!r}")
