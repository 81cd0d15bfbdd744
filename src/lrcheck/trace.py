"""What a run recorded: one ``UpdateRecord`` per optimizer update, metrics per epoch, and the
parameters after every update (kept in memory for the ``params`` check, not written to JSON)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from lrcheck.spec import RunSpec


@dataclass(frozen=True)
class UpdateRecord:
    """Optimizer update ``step``: the LR of every param group read just before
    ``optimizer.step()``, the training loss over the whole effective batch, samples seen after
    it, and how many times ``scheduler.step()`` had run when the LR was read."""

    step: int
    lr: tuple[float, ...]
    loss: float
    samples_seen: int
    scheduler_steps: int
    epoch: int

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "lr": list(self.lr), "loss": self.loss,
                "samples_seen": self.samples_seen, "scheduler_steps": self.scheduler_steps,
                "epoch": self.epoch}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UpdateRecord:
        return cls(int(data["step"]), tuple(float(v) for v in data["lr"]), float(data["loss"]),
                   int(data["samples_seen"]), int(data["scheduler_steps"]), int(data["epoch"]))


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int
    after_update: int
    accuracy: float
    f1_macro: float


@dataclass
class RunTrace:
    """Everything one run recorded. ``stopped`` holds the reason when the run ended before its
    planned ``planned_updates`` (a scheduler that refused to step, say)."""

    spec: RunSpec
    updates: list[UpdateRecord]
    epochs: list[EpochMetrics]
    params: np.ndarray
    planned_updates: int
    context: dict[str, int]
    not_comparable: tuple[str, ...] = ()
    stopped: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def metrics(self) -> dict[str, float] | None:
        if not self.epochs:
            return None
        last = self.epochs[-1]
        return {"accuracy": last.accuracy, "f1_macro": last.f1_macro}

    def lrs(self) -> np.ndarray:
        """LR per update and param group, shape ``(updates, groups)``."""
        return np.array([u.lr for u in self.updates], dtype=np.float64).reshape(len(self.updates), -1)

    def losses(self) -> np.ndarray:
        return np.array([u.loss for u in self.updates], dtype=np.float64)

    @classmethod
    def partial(cls, spec: RunSpec, updates: list[UpdateRecord], planned_updates: int,
                stopped: str) -> RunTrace:
        """What an interrupted run had recorded: its updates, no parameters, no evaluation."""
        return cls(spec=spec, updates=list(updates), epochs=[], params=np.empty((0, 0)),
                   planned_updates=planned_updates, context={}, stopped=stopped)

    @classmethod
    def from_dict(cls, data: dict[str, Any], params: np.ndarray) -> RunTrace:
        """The inverse of ``to_dict`` (which leaves the parameters out: they come as ``params``);
        keys ``to_dict`` does not make itself return to ``extra``."""
        own = {"spec", "updates", "metrics", "epochs", "planned_updates", "schedule_context",
               "not_comparable", "stopped", "seconds"}
        return cls(
            spec=RunSpec(**data["spec"]),
            updates=[UpdateRecord.from_dict(u) for u in data["updates"]],
            epochs=[EpochMetrics(**e) for e in data["epochs"]],
            params=params,
            planned_updates=int(data["planned_updates"]),
            context=dict(data["schedule_context"]),
            not_comparable=tuple(data["not_comparable"]),
            stopped=data["stopped"],
            seconds=float(data["seconds"]),
            extra={k: v for k, v in data.items() if k not in own},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_dict(),
            "updates": [u.to_dict() for u in self.updates],
            "metrics": self.metrics,
            "epochs": [asdict(e) for e in self.epochs],
            "planned_updates": self.planned_updates,
            "schedule_context": self.context,
            "not_comparable": list(self.not_comparable),
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
            **self.extra,
        }
