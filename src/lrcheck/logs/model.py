"""What a run's own logs say (docs/logs.md): a log a framework or a user's loop wrote —
TensorBoard events, the Transformers Trainer's ``trainer_state.json``, Lightning's ``metrics.csv``,
an MLflow file store — read by ``logs.read`` into a ``LoggedRun``: its tags mapped to the
quantities lrcheck knows (``Quantity``), at the steps they were logged, and what a step means
(``StepMeaning``). Nothing here reads a file or judges: ``logs.read`` reads, ``logs.truth``
holds a log against a recording, ``logs.pairs`` reads two logs and ``checks.logs`` compares
them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lrcheck.words import Word


class Quantity(Word):
    """What a logged tag measures, as lrcheck names it."""

    LR = "lr"
    LOSS = "loss"
    GRAD_NORM = "grad_norm"
    SAMPLES = "samples"  # samples seen so far, where a log has them


class LogFormat(Word):
    """Which writer's files a log was read from."""

    TENSORBOARD = "tensorboard"
    TRAINER_STATE = "trainer_state"
    LIGHTNING_CSV = "lightning_csv"
    CSV = "csv"  # another CSV file, given by name: a W&B run's history exported, ...
    MLFLOW = "mlflow"


class StepUnit(Word):
    """What one logged step counts."""

    UPDATE = "update"
    MICRO_BATCH = "micro-batch"
    SAMPLE = "sample"


class LossIs(Word):
    """What one logged loss value is: one update's, the mean over the logging window (the
    Trainer's, ``logging_steps`` > 1), or the update's last micro-batch's (Lightning's step
    ``self.log``)."""

    UPDATE = "update"
    WINDOW = "window mean"
    MICRO_BATCH = "last micro-batch"


@dataclass(frozen=True)
class Series:
    """One tag as logged: ``steps`` as the log numbers them (not yet update indices) and the
    ``values`` at them, in the order written; ``dtype``: the precision the format stores
    (TensorBoard scalars are float32)."""

    quantity: Quantity
    tag: str
    steps: tuple[int, ...]
    values: tuple[float, ...]
    dtype: str = "float64"

    def __post_init__(self) -> None:
        if len(self.steps) != len(self.values):
            raise ValueError(f"{self.tag}: {len(self.steps)} steps but {len(self.values)} values")


@dataclass(frozen=True)
class StepMeaning:
    """How a logged step maps to lrcheck's update index ``k`` (counted from 0): ``unit`` an
    update, a micro-batch or a sample (``per_update`` of them each; 0: not known yet, the
    recording says it), ``first`` the logged step of update 0's value (0 or 1; a sample
    count: the samples seen after update 0); ``how`` says whether it was detected (and from
    what), inferred, found from the recording or stated by the user."""

    unit: StepUnit = StepUnit.UPDATE
    first: int = 0
    per_update: int = 1
    how: str = "assumed: steps count updates from 0"

    def update(self, step: int) -> int:
        """The update index ``k`` of logged ``step`` (a micro-batch step maps to the update it
        is part of)."""
        return (step - self.first) // max(self.per_update, 1)


@dataclass(frozen=True)
class LoggedRun:
    """One run's log: ``path`` the file or folder read, ``format`` its writer, ``series`` by
    quantity, ``steps`` what a step means, ``unmapped`` the tags seen that map to no quantity
    (shown as "incomparable" when only one side has them), ``every`` the logging interval in
    steps where it is regular, and ``limits``: what this log cannot prove, each a sentence
    ("values stored as float32", "logged every 10 updates", "the loss averaged over each
    logging window")."""

    path: Path
    format: LogFormat
    series: dict[Quantity, Series]
    steps: StepMeaning = field(default_factory=StepMeaning)
    unmapped: tuple[str, ...] = ()
    every: int | None = None
    limits: tuple[str, ...] = ()
    # The LR of the param groups after the first (Lightning's ``lr-<Optimizer>/pg2``, ...);
    # ``series[Quantity.LR]`` is group 0's.
    lr_groups: tuple[Series, ...] = ()
    # What one logged loss is (``LossIs``), and the micro-batches per update where the log
    # shows them (the Trainer's gradient_accumulation_steps, Lightning's LR monitor rows per
    # step); None: it does not.
    loss_is: LossIs = field(default_factory=lambda: LossIs.UPDATE)
    accum: int | None = None

    def tags(self) -> tuple[str, ...]:
        """Every tag read: the mapped ones' and the unmapped."""
        return (*(s.tag for s in self.series.values()), *(s.tag for s in self.lr_groups),
                *self.unmapped)

    def at_updates(self, quantity: Quantity) -> tuple[np.ndarray, np.ndarray]:
        """The update indices (int64, 0-based) and values (float64) ``quantity`` was logged
        at; empty arrays where it was not logged. A step logged twice keeps its last value."""
        series = self.series.get(quantity)
        if series is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        return self.series_at_updates(series)

    def series_at_updates(self, series: Series) -> tuple[np.ndarray, np.ndarray]:
        """``at_updates`` of one series (a param group's LR, say)."""
        last = {self.steps.update(s): v for s, v in zip(series.steps, series.values, strict=True)}
        ks = np.array(sorted(last), dtype=np.int64)
        return ks, np.array([last[int(k)] for k in ks], dtype=np.float64)


@dataclass(frozen=True)
class Reading:
    """What the user stated of how to read a log (``--tag``, ``--log-steps``): the tag of a
    quantity, over the tag table; what a step means, over what is detected."""

    tags: dict[Quantity, str] = field(default_factory=dict)
    steps: StepMeaning | None = None

    @property
    def stated(self) -> bool:
        return bool(self.tags) or self.steps is not None
