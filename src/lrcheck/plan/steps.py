"""Step arithmetic: how many micro-batches and optimizer updates a run makes, per tail, and the
``ScheduleContext`` a scheduler factory receives. Pure functions of a few integers, so they also
serve ``lrcheck trace`` for runs far too large to train.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from lrcheck.errors import SpecError
from lrcheck.plan.frameworks import FRAMEWORKS, PLAIN
from lrcheck.plan.policies import POLICIES

if TYPE_CHECKING:  # numpy stays off the import path of `lrcheck --help`
    import numpy as np


@dataclass(frozen=True)
class ScheduleContext:
    """What a schedule factory ``make(optimizer, ctx)`` is told (docs/design.md, "Schedulers").

    ``micro_batches_per_epoch`` is what ``len(train_loader)`` gives on one rank; ``total_steps``
    and ``warmup_steps`` are in the policy's own unit (optimizer updates; micro-batches for
    ``per-micro-batch-scaled``; updates of the single-process loader, updates x world, for
    ``accelerate``). Factories that compute lengths from the raw fields instead are
    where accumulation and world-size bugs live, and lrcheck shows them.
    """

    micro_batches_per_epoch: int
    epochs: int
    accum_steps: int
    world_size: int
    micro_batch_size: int
    num_samples: int
    updates_per_epoch: int
    total_updates: int
    total_steps: int
    warmup_steps: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class StepPlan:
    """How a run of ``epochs`` over ``num_samples`` splits into updates and micro-batches."""

    num_samples: int
    micro_batch_size: int
    accum: int
    world: int
    epochs: int
    tail: str
    updates_per_epoch: int
    total_updates: int
    micro_batches_per_epoch: int
    total_micro_batches: int

    @property
    def effective_batch(self) -> int:
        return self.micro_batch_size * self.accum * self.world


def batch_breakdown(bs: int, accum: int, world: int) -> str:
    """An effective batch in the words of the flags that make it: ``bs 8 · accum 2 · nproc 2 =
    32``."""
    return f"bs {bs} · accum {accum} · nproc {world} = {bs * accum * world}"


def plan_steps(num_samples: int, bs: int, accum: int, world: int, epochs: int,
               tail: str) -> StepPlan:
    """Counts for one run.

    - ``drop``: ``n // E`` updates per epoch; the last ``n % E`` samples of each epoch are unused.
    - ``flush``: one more, short update per epoch from the leftover samples, split into
      ``ceil(left / (bs·world))`` micro-batches (the last one ragged).
    - ``carry``: the epochs form one stream cut every ``E`` samples, so leftovers open the next
      epoch's first update; ``updates_per_epoch`` is the nominal ``n // E`` and whatever is left
      after the last epoch is dropped.
    """
    effective = bs * accum * world
    if num_samples < effective:
        raise SpecError(
            f"the training set has {num_samples} samples, fewer than one effective batch "
            f"({batch_breakdown(bs, accum, world)}); lower --bs or --accum"
        )
    per_forward = bs * world
    full, left = divmod(num_samples, effective)
    if tail == "drop":
        per_epoch, micro = full, full * accum
        total = per_epoch * epochs
        total_micro = micro * epochs
    elif tail == "flush":
        extra = math.ceil(left / per_forward)
        per_epoch, micro = full + (left > 0), full * accum + extra
        total = per_epoch * epochs
        total_micro = micro * epochs
    elif tail == "carry":
        per_epoch, micro = full, num_samples // per_forward
        total = num_samples * epochs // effective
        total_micro = total * accum
    else:
        raise SpecError(f"--tail {tail!r} is not known; choose one of: drop, flush, carry")
    return StepPlan(num_samples, bs, accum, world, epochs, tail, per_epoch, total, micro,
                    total_micro)


def schedule_context(plan: StepPlan, policy: str, warmup: float,
                     framework: str = PLAIN) -> ScheduleContext:
    """The context for ``plan`` under ``policy`` (trained through ``framework``) with ``warmup``
    as a fraction of the run."""
    warmup_updates = round(warmup * plan.total_updates)
    if POLICIES[policy].lengths_in_micro_batches:
        total_steps, warmup_steps = plan.total_micro_batches, warmup_updates * plan.accum
    elif FRAMEWORKS[framework].lengths_times_world:
        total_steps, warmup_steps = plan.total_updates * plan.world, warmup_updates * plan.world
    else:
        total_steps, warmup_steps = plan.total_updates, warmup_updates
    return ScheduleContext(
        micro_batches_per_epoch=plan.micro_batches_per_epoch,
        epochs=plan.epochs,
        accum_steps=plan.accum,
        world_size=plan.world,
        micro_batch_size=plan.micro_batch_size,
        num_samples=plan.num_samples,
        updates_per_epoch=plan.updates_per_epoch,
        total_updates=plan.total_updates,
        total_steps=total_steps,
        warmup_steps=warmup_steps,
    )


@dataclass(frozen=True)
class UpdateRun:
    """``count`` consecutive updates of epoch ``epoch``, each over ``samples`` samples split
    into ``micro_batches`` micro-batches per process."""

    epoch: int
    count: int
    samples: int
    micro_batches: int


def update_runs(plan: StepPlan) -> list[UpdateRun]:
    """The updates of ``plan`` in order, as runs of equal updates: the same sizes
    ``order.global_batches`` and ``order.micro_batches`` produce, without building any
    permutation, so that ``lrcheck trace`` can walk runs of billions of samples."""
    effective, per_forward = plan.effective_batch, plan.micro_batch_size * plan.world
    runs: list[UpdateRun] = []
    carried = 0
    for epoch in range(plan.epochs):
        full, left = divmod(carried + plan.num_samples, effective)
        runs.append(UpdateRun(epoch, full, effective, plan.accum))
        if plan.tail == "flush" and left:
            runs.append(UpdateRun(epoch, 1, left, math.ceil(left / per_forward)))
        carried = left if plan.tail == "carry" else 0
    return [run for run in runs if run.count]


@dataclass(frozen=True)
class UpdateCounters:
    """Per update, as ``plain.train`` counts them: samples seen after it, ``scheduler.step()``
    calls made when its LR is read, and its epoch; and the calls made by the end of the last."""

    samples_seen: np.ndarray
    steps_at_read: np.ndarray
    epoch: np.ndarray
    steps_made: int


def update_counters(runs: list[UpdateRun], updates: int,
                    every_micro_batch: bool) -> UpdateCounters:
    """The counters of the first ``updates`` updates of ``runs`` when ``scheduler.step()`` runs
    after every micro-batch (``every_micro_batch``) or once per update."""
    import numpy as np

    left, counts = updates, []
    for run in runs:
        counts.append(min(run.count, left))
        left -= counts[-1]
    micro = np.array([run.micro_batches for run in runs], dtype=np.int64)
    per_update = np.repeat(micro if every_micro_batch else np.ones_like(micro), counts)
    made = np.cumsum(per_update)
    return UpdateCounters(
        samples_seen=np.cumsum(np.repeat([run.samples for run in runs], counts)).astype(np.int64),
        steps_at_read=made - 1,
        epoch=np.repeat([run.epoch for run in runs], counts).astype(np.int64),
        steps_made=int(made[-1]) if len(made) else 0,
    )

