"""What a run recorded: one ``UpdateRecord`` per optimizer update, metrics per epoch, and the
parameters after every update (kept in memory for the ``params`` check, not written to JSON).

A schedule stepped without a model (``lrcheck trace``) can make 100,000s of updates:
``ScheduleTrace`` keeps them as numpy columns and writes a thinned selection and a digest."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypedDict, TypeVar, overload

import numpy as np

from lrcheck.plan.digest import lr_digest, thin_indices
from lrcheck.plan.steps import ScheduleContext
from lrcheck.plan.windows import Window, fed_window, windows_from_json, windows_to_json
from lrcheck.recorder import COUNTS, NUMBERS
from lrcheck.spec import RunSpec

T = TypeVar("T")


# An ``UpdateRecord`` in JSON: result.json's ``updates`` and a worker's hand-off.
class UpdateJson(TypedDict):
    step: int
    lr: list[float]
    loss: float | None
    samples_seen: int
    scheduler_steps: int | None
    epoch: int | None


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

    def to_dict(self) -> UpdateJson:
        return {"step": self.step, "lr": list(self.lr), "loss": self.loss,
                "samples_seen": self.samples_seen, "scheduler_steps": self.scheduler_steps,
                "epoch": self.epoch}

    @classmethod
    def from_dict(cls, data: UpdateJson) -> UpdateRecord:
        return cls(int(data["step"]), tuple(float(v) for v in data["lr"]),
                   _maybe(float, data["loss"]), int(data["samples_seen"]),
                   _maybe(int, data["scheduler_steps"]), _maybe(int, data["epoch"]))


# Called with each update a run records and the run's planned number of updates.
OnUpdate = Callable[[UpdateRecord, int], None]


def _maybe(kind: Callable[[Any], T], value: object) -> T | None:
    return None if value is None else kind(value)


@dataclass(frozen=True)
class Metrics:
    """A run's final evaluation on the test split (result.json's ``metrics``)."""

    accuracy: float
    f1_macro: float

    def to_dict(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "f1_macro": self.f1_macro}


# Each metric's key in ``Metrics.to_dict()`` and its name in reports, in their order.
METRICS = (("accuracy", "accuracy"), ("f1_macro", "macro-F1"))


def metric_values(metrics: Metrics | None) -> dict[str, float]:
    """``metrics`` by key, ``{}`` for a run with no evaluation."""
    return {} if metrics is None else metrics.to_dict()


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int
    after_update: int
    accuracy: float
    f1_macro: float


@dataclass(frozen=True)
class SkippedStep:
    """An update whose step the GradScaler skipped (non-finite fp16 gradients), and the
    ``scheduler.step()`` calls made during it (0 when the schedule held still)."""

    update: int
    scheduler_steps: int


@dataclass(frozen=True)
class Resumed:
    """Where a run was stopped, checkpointed, rebuilt and resumed: in ``update``'s window after
    ``micro_batches_done`` micro-batches (0: after update ``update - 1``); the checkpoint's size."""

    update: int
    micro_batches_done: int | None
    checkpoint_bytes: int


@dataclass(frozen=True)
class RecordedCommand:
    """What a record folder's run.json says of the command ``lrcheck record`` ran: its line, as
    a shell writes it, its world size, and whether ``--samples`` gave its samples per update."""
    line: str
    world_size: int
    samples_known: bool = True

    def label(self) -> str:
        """``python train.py --bs 32 (world 1)``."""
        return f"{self.line} (world {self.world_size})"


@dataclass
class RunTrace:
    """Everything one run recorded. ``stopped`` holds the reason when the run ended before its
    planned ``planned_updates`` (a scheduler that refused to step, say). A run lrcheck did not
    train itself (``lrcheck diff``) has no ``spec`` but the ``source`` file it was read from, and
    no ``context`` (the ``ScheduleContext`` its schedule was built with; ``{}`` in JSON), nor has a
    run interrupted before it finished (``partial``).

    What only some runs have is None in the others, and then absent from ``to_dict``: ``warnings``
    (what torch warned while lrcheck ran it), ``resumed`` (``--resume-at``), ``skipped`` (every run
    with a GradScaler: its skipped steps, maybe none), ``wall_seconds`` (a run launched through
    torchrun: its wall time, start-up included), ``launch`` (set where how it ran is not what its
    spec says: the reference trained on rank 0 of the candidate's job), ``schedule`` (a schedule
    stepped without a model), ``windows`` (a trained run: the samples behind each update as fed,
    and their weights; ``plan/windows.py``) and ``fingerprints`` (a Recorder file with parameter
    fingerprints: per update, None where none was recorded, else per parameter tensor its sum and
    largest absolute value as rows of shape ``(tensors, 2)``; not in JSON), ``optimizer_states`` (a
    reference of lrcheck's own loop: the optimizer's state after every update, ``runner.lockstep``;
    not in JSON) and ``lockstep`` (a candidate run in lockstep with its reference: how many of its
    updates started from the reference's state). A run ``lrcheck record`` recorded may have
    ``grad_norms`` (per update, None where not taken) and ``skips`` (per update, the steps a
    GradScaler skipped before it); neither in JSON; a run read from a record folder, its
    ``command``, its ``windows`` where its process saw the training forwards (``record.taps``),
    ``unweighed``: why some of their loss weights were not measured, and ``loss_dtype``: the
    coarsest type a measured loss was computed in."""

    spec: RunSpec | None
    updates: Sequence[UpdateRecord]
    epochs: list[EpochMetrics]
    params: np.ndarray
    planned_updates: int
    context: ScheduleContext | None
    not_comparable: tuple[str, ...] = ()
    stopped: str | None = None
    seconds: float = 0.0
    warnings: tuple[str, ...] | None = None
    resumed: Resumed | None = None
    skipped: list[SkippedStep] | None = None
    wall_seconds: float | None = None
    launch: str | None = None
    schedule: ScheduleTrace | None = None
    source: str | None = None
    windows: list[Window] | None = None
    fingerprints: list[np.ndarray | None] | None = None
    optimizer_states: np.ndarray | None = None
    lockstep: int | None = None
    grad_norms: list[float | None] | None = None
    skips: list[int] | None = None
    command: RecordedCommand | None = None
    cadence: list[dict[str, float]] | None = None
    unweighed: str | None = None
    loss_dtype: str | None = None

    @property
    def metrics(self) -> Metrics | None:
        """The last epoch's evaluation; None for a run with none (a schedule, a file)."""
        if not self.epochs:
            return None
        last = self.epochs[-1]
        return Metrics(last.accuracy, last.f1_macro)

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]], source: str,
                     command: RecordedCommand | None = None) -> RunTrace:
        """A run read from a Recorder file (``lrcheck.recorder.read_records``): its updates in
        the file's order and, where the file has them, their parameter fingerprints, the
        ``scheduler.step()`` calls (``lrcheck record``'s per-update counts, summed into the
        count when each LR was read), the GradScaler-skipped steps before each update
        (``skips``) and gradient norms."""
        counted = all("scheduler_steps" in r for r in records)
        steps = np.cumsum([r.get("scheduler_steps", 0) for r in records]).tolist()
        updates = [UpdateRecord(r["step"], tuple(r["lr"]), r["loss"], r["samples_seen"],
                                int(steps[k]) if counted else None, None)
                   for k, r in enumerate(records)]
        fingerprints: list[np.ndarray | None] | None = None
        if any("fingerprint" in r for r in records):
            fingerprints = [None if "fingerprint" not in r else
                            np.asarray(r["fingerprint"], dtype=np.float64).reshape(-1, 2)
                            for r in records]
        grad_norms = ([None if "grad_sq" not in r else float(np.sqrt(r["grad_sq"]))
                       for r in records] if any("grad_sq" in r for r in records) else None)
        skips = [int(r["skipped"]) for r in records] if all("skipped" in r for r in records) \
            else None
        cadence = ([{key: r[key] for key in (*COUNTS[2:], *NUMBERS) if key in r} for r in records]
                   if all("backward" in r for r in records) else None)
        windows = ([fed_window(r["fed"]) for r in records]
                   if records and all("fed" in r for r in records) else None)
        return cls(spec=None, updates=updates, epochs=[], params=np.empty((0, 0)),
                   planned_updates=len(updates), context=None, source=source,
                   fingerprints=fingerprints, grad_norms=grad_norms, skips=skips,
                   command=command, cadence=cadence, windows=windows,
                   unweighed=next((r["fed_why"] for r in records if r.get("fed_why")), None),
                   loss_dtype=_coarsest(r.get("fed_dtype") for r in records))

    def lrs(self) -> np.ndarray:
        """LR per update and param group, shape ``(updates, groups)``."""
        if self.schedule is not None:
            return self.schedule.columns.lr
        lrs = np.array([u.lr for u in self.updates], dtype=np.float64)
        return lrs.reshape(len(self.updates), -1)

    def losses(self) -> np.ndarray:
        if self.schedule is not None:  # nothing was trained
            return np.full(len(self.updates), np.nan)
        return np.array([u.loss for u in self.updates], dtype=np.float64)

    @classmethod
    def partial(cls, spec: RunSpec, updates: list[UpdateRecord], planned_updates: int,
                stopped: str) -> RunTrace:
        """What an interrupted run had recorded: its updates, no parameters, no evaluation."""
        return cls(spec=spec, updates=list(updates), epochs=[], params=np.empty((0, 0)),
                   planned_updates=planned_updates, context=None, stopped=stopped)

    @classmethod
    def from_dict(cls, data: dict[str, Any], params: np.ndarray) -> RunTrace:
        """The inverse of ``to_dict`` for a trained run (``runner.ranks.handoff``); its
        parameters, not in JSON, come as ``params``."""
        resumed, skipped = data.get("resumed"), data.get("skipped")
        return cls(
            spec=RunSpec(**data["spec"]) if isinstance(data["spec"], dict) else None,
            updates=[UpdateRecord.from_dict(u) for u in data["updates"]],
            epochs=[EpochMetrics(**e) for e in data["epochs"]],
            params=params,
            planned_updates=int(data["planned_updates"]),
            context=(ScheduleContext(**data["schedule_context"]) if data["schedule_context"]
                     else None),
            not_comparable=tuple(data["not_comparable"]),
            stopped=data["stopped"],
            seconds=float(data["seconds"]),
            warnings=_maybe(tuple, data.get("warnings")),
            resumed=None if resumed is None else Resumed(**resumed),
            skipped=None if skipped is None else [SkippedStep(**s) for s in skipped],
            wall_seconds=_maybe(float, data.get("wall_seconds")),
            launch=data.get("launch"),
            source=None if isinstance(data["spec"], dict) else data["spec"],
            windows=None if "windows" not in data else windows_from_json(data["windows"]),
            lockstep=_maybe(int, data.get("lockstep")),
        )

    def to_dict(self, pinned: Iterable[int] = (), windows: bool = False) -> dict[str, object]:
        """The run in ``result.json``. ``pinned``: updates a schedule's thinned ``updates``
        keeps with their neighbours (where the checks found the runs part). ``windows``: with
        the samples behind every update (a worker's hand-off; a report leaves them out)."""
        optional = {
            "resumed": None if self.resumed is None else asdict(self.resumed),
            "skipped": None if self.skipped is None else [asdict(s) for s in self.skipped],
            "scheduler_steps": None if self.schedule is None else self.schedule.scheduler_steps,
            "warnings": None if self.warnings is None else list(self.warnings),
            "wall_seconds": self.wall_seconds,
            "launch": self.launch,
            "lockstep": self.lockstep,
            "command": None if self.command is None else asdict(self.command),
        }
        return {
            # A trace read from a file has the file's path where a RunSpec would be.
            "spec": self.spec.to_dict() if self.spec is not None else self.source,
            "updates": (self.schedule.updates_json(pinned) if self.schedule is not None
                        else [u.to_dict() for u in self.updates]),
            "metrics": None if self.metrics is None else self.metrics.to_dict(),
            "epochs": [asdict(e) for e in self.epochs],
            "planned_updates": self.planned_updates,
            "schedule_context": {} if self.context is None else self.context.to_dict(),
            "not_comparable": list(self.not_comparable),
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
            **{key: value for key, value in optional.items() if value is not None},
            **(self.schedule.summary(pinned) if self.schedule is not None else {}),
            **({"windows": windows_to_json(self.windows)}
               if windows and self.windows is not None else {}),
        }


FLOATS = ("float64", "float32", "float16", "bfloat16")  # the finest first


def _coarsest(kinds: Iterable[str | None], order: tuple[str, ...] = FLOATS) -> str | None:
    """The coarsest of the floating-point type names given (None: none given)."""
    found = [k for k in kinds if k]
    return max(found, key=lambda k: order.index(k) if k in order else 1) if found else None


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


@dataclass(frozen=True)
class ScheduleTrace:
    """What a run whose schedule was stepped without a model (``lrcheck trace``) adds to its
    ``RunTrace`` (as ``RunTrace.schedule``): its updates as ``columns`` (the same object as the
    trace's ``updates``) and the ``scheduler.step()`` calls it made.

    In JSON, ``updates`` holds every update when there are at most ``MAX_STORED_UPDATES``, else
    an evenly spaced selection with the first and last updates and those around the ``pinned``
    ones (where the checks found the runs part); ``updates_stored`` says which, and
    ``lr_digest`` covers the whole trace."""

    columns: UpdateColumns
    scheduler_steps: int

    def updates_json(self, pinned: Iterable[int] = ()) -> list[UpdateJson]:
        keep = thin_indices(len(self.columns), MAX_STORED_UPDATES, pinned)
        return [{**self.columns[int(k)].to_dict(), "loss": None} for k in keep]

    def summary(self, pinned: Iterable[int] = ()) -> dict[str, object]:
        """``updates_stored`` and ``lr_digest``."""
        n = len(self.columns)
        stored = len(thin_indices(n, MAX_STORED_UPDATES, pinned))
        return {"updates_stored": {"total": n, "stored": stored,
                                   "selection": "all" if stored == n else
                                   "evenly spaced, with the first, the last and 2 either side "
                                   "of the first divergence"},
                "lr_digest": lr_digest(self.columns.lr)}


def simulated_trace(spec: RunSpec, columns: UpdateColumns, scheduler_steps: int, *,
                    planned_updates: int, context: ScheduleContext | None, stopped: str | None,
                    seconds: float) -> RunTrace:
    """The ``RunTrace`` of a schedule stepped without a model: ``columns`` as its updates, no
    parameters, no evaluation."""
    return RunTrace(spec=spec, updates=columns, epochs=[],
                    params=np.empty((len(columns), 0)), planned_updates=planned_updates,
                    context=context, stopped=stopped, seconds=seconds,
                    schedule=ScheduleTrace(columns, scheduler_steps))
