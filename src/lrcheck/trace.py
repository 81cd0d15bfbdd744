"""What a run recorded: one ``UpdateRecord`` per optimizer update, metrics per epoch, and the
parameters after every update (kept in memory for the ``params`` check, not written to JSON).

A schedule stepped without a model (``lrcheck trace``) can make hundreds of thousands of updates;
``ScheduleTrace`` keeps them as numpy columns and writes a thinned selection to JSON, with a
digest of the whole LR trace.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, overload

import numpy as np

from lrcheck.spec import RunSpec


@dataclass(frozen=True)
class UpdateRecord:
    """Optimizer update ``step``: the LR of every param group read just before
    ``optimizer.step()``, the training loss over the whole effective batch, samples seen after
    it, and how many times ``scheduler.step()`` had run when the LR was read. A trace read from
    a Recorder file has None for what the file does not record (the scheduler steps, the epoch,
    a loss the user did not pass)."""

    step: int
    lr: tuple[float, ...]
    loss: float | None
    samples_seen: int
    scheduler_steps: int | None
    epoch: int | None

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "lr": list(self.lr), "loss": self.loss,
                "samples_seen": self.samples_seen, "scheduler_steps": self.scheduler_steps,
                "epoch": self.epoch}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UpdateRecord:
        return cls(int(data["step"]), tuple(float(v) for v in data["lr"]),
                   _maybe(float, data["loss"]), int(data["samples_seen"]),
                   _maybe(int, data["scheduler_steps"]), _maybe(int, data["epoch"]))


# Called with each update a run records and the run's planned number of updates.
OnUpdate = Callable[[UpdateRecord, int], None]


def _maybe(kind: type, value: Any) -> Any:
    return None if value is None else kind(value)


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int
    after_update: int
    accuracy: float
    f1_macro: float


@dataclass
class RunTrace:
    """Everything one run recorded. ``stopped`` holds the reason when the run ended before its
    planned ``planned_updates`` (a scheduler that refused to step, say). A run lrcheck did not
    train itself (``lrcheck diff``) has no ``spec`` but the ``source`` file it was read from."""

    spec: RunSpec | None
    updates: Sequence[UpdateRecord]
    epochs: list[EpochMetrics]
    params: np.ndarray
    planned_updates: int
    context: dict[str, int]
    not_comparable: tuple[str, ...] = ()
    stopped: str | None = None
    seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    source: str | None = None

    @property
    def metrics(self) -> dict[str, float] | None:
        if not self.epochs:
            return None
        last = self.epochs[-1]
        return {"accuracy": last.accuracy, "f1_macro": last.f1_macro}

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]], source: str) -> RunTrace:
        """A run read from a Recorder file (``lrcheck.recorder.read_records``): its updates in
        the file's order, nothing else."""
        updates = [UpdateRecord(r["step"], tuple(r["lr"]), r["loss"], r["samples_seen"], None,
                                None) for r in records]
        return cls(spec=None, updates=updates, epochs=[], params=np.empty((0, 0)),
                   planned_updates=len(updates), context={}, source=source)

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
            spec=RunSpec(**data["spec"]) if isinstance(data["spec"], dict) else None,
            updates=[UpdateRecord.from_dict(u) for u in data["updates"]],
            epochs=[EpochMetrics(**e) for e in data["epochs"]],
            params=params,
            planned_updates=int(data["planned_updates"]),
            context=dict(data["schedule_context"]),
            not_comparable=tuple(data["not_comparable"]),
            stopped=data["stopped"],
            seconds=float(data["seconds"]),
            extra={k: v for k, v in data.items() if k not in own},
            source=None if isinstance(data["spec"], dict) else data["spec"],
        )

    def updates_json(self) -> list[dict[str, Any]]:
        """The ``updates`` of ``result.json``: every update."""
        return [u.to_dict() for u in self.updates]

    def to_dict(self) -> dict[str, Any]:
        return {
            # A trace read from a file has the file's path where a RunSpec would be.
            "spec": self.spec.to_dict() if self.spec is not None else self.source,
            "updates": self.updates_json(),
            "metrics": self.metrics,
            "epochs": [asdict(e) for e in self.epochs],
            "planned_updates": self.planned_updates,
            "schedule_context": self.context,
            "not_comparable": list(self.not_comparable),
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
            **self.extra,
        }

DIGEST_BITS = 40


def lr_digest(lrs: np.ndarray) -> str:
    """``sha256:`` of an LR trace (updates x param groups) in a canonical form: the shape, then
    every value's binary exponent and its mantissa rounded to ``DIGEST_BITS`` bits (about 12
    significant digits) as little-endian int64, so that last-bit differences of the maths
    library between machines do not change it."""
    rows = np.asarray(lrs, dtype=np.float64).reshape(len(lrs), -1)
    mantissa, exponent = np.frexp(rows)
    digest = hashlib.sha256(f"{rows.shape[0]}x{rows.shape[1]}\n".encode())
    digest.update(np.round(mantissa * 2.0 ** DIGEST_BITS).astype("<i8").tobytes())
    digest.update(exponent.astype("<i8").tobytes())
    return "sha256:" + digest.hexdigest()


def thin_indices(n: int, limit: int, pinned: Iterable[int] = (), around: int = 2) -> np.ndarray:
    """At most about ``limit`` evenly spaced indices of ``range(n)``, always with the first and
    the last, plus ``around`` on either side of every index in ``pinned``."""
    if n <= limit:
        return np.arange(n)
    even = np.linspace(0, n - 1, limit).astype(np.int64)
    near = [np.arange(max(0, p - around), min(n, p + around + 1)) for p in pinned]
    return np.unique(np.concatenate([even, *near]))


class UpdateColumns(Sequence[UpdateRecord]):
    """Per-update records stored as numpy columns (no loss: nothing is trained). Indexing gives
    ``UpdateRecord`` objects, built on demand, so the checks and reports read it like a list."""

    def __init__(self, lr: np.ndarray, samples_seen: np.ndarray, scheduler_steps: np.ndarray,
                 epoch: np.ndarray) -> None:
        self.lr = np.asarray(lr, dtype=np.float64).reshape(len(samples_seen), -1)
        self.samples_seen = np.asarray(samples_seen, dtype=np.int64)
        self.scheduler_steps = np.asarray(scheduler_steps, dtype=np.int64)
        self.epoch = np.asarray(epoch, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.samples_seen)

    @overload
    def __getitem__(self, k: int) -> UpdateRecord: ...

    @overload
    def __getitem__(self, k: slice) -> list[UpdateRecord]: ...

    def __getitem__(self, k: int | slice) -> UpdateRecord | list[UpdateRecord]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        k = range(len(self))[k]
        return UpdateRecord(k, tuple(self.lr[k].tolist()), float("nan"),
                            int(self.samples_seen[k]), int(self.scheduler_steps[k]),
                            int(self.epoch[k]))

    def __iter__(self) -> Iterator[UpdateRecord]:
        return (self[k] for k in range(len(self)))


MAX_STORED_UPDATES = 2000


@dataclass
class ScheduleTrace(RunTrace):
    """A run's schedule stepped without a model (``lrcheck trace``): ``updates`` is an
    ``UpdateColumns``. In JSON, ``updates`` holds every update when there are at most
    ``MAX_STORED_UPDATES``, else an evenly spaced selection with the first and last updates and
    those around ``pinned`` (the first divergence); ``updates_stored`` says which, and
    ``lr_digest`` covers the whole trace."""

    pinned: tuple[int, ...] = ()

    def lrs(self) -> np.ndarray:
        return self.updates.lr  # type: ignore[attr-defined]

    def losses(self) -> np.ndarray:
        return np.full(len(self.updates), np.nan)

    def updates_json(self) -> list[dict[str, Any]]:
        keep = thin_indices(len(self.updates), MAX_STORED_UPDATES, self.pinned)
        return [{**self.updates[int(k)].to_dict(), "loss": None} for k in keep]

    def to_dict(self) -> dict[str, Any]:
        n = len(self.updates)
        stored = len(thin_indices(n, MAX_STORED_UPDATES, self.pinned))
        return {**super().to_dict(),
                "updates_stored": {"total": n, "stored": stored,
                                   "selection": "all" if stored == n else
                                   "evenly spaced, with the first, the last and 2 either side "
                                   "of the first divergence"},
                "lr_digest": lr_digest(self.lrs())}
