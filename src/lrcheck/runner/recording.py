"""The one recording every loop uses — lrcheck's own (``plain``) and each framework's adapter
(``frameworks/``) — so that what a run is checked on is read the same way whoever trains it.

A loop calls, for each optimizer update:

- ``before_step(optimizer, scheduler_steps)`` just before ``optimizer.step()``: the LR every
  param group uses (docs/design.md, "The checks and their tolerances"), and how many times
  ``scheduler.step()`` had run;
- ``step_scheduler(scheduler, update)`` in place of ``scheduler.step()``: a schedule that raises
  ends the run there with the reason in ``stopped`` — a finding, not a crash;
- ``update(step, loss, samples_seen, epoch, window)`` once the update's loss is known (summed
  over the ranks): the ``UpdateRecord``, the parameters after the update, the samples it was
  fed (a framework's, as recorded by ``integrations.core.Tap``) and the progress hook;

and ``end_epoch(net, epoch, after_update)`` after each epoch (accuracy and macro-F1 on the test
split). ``finish(windows)`` returns the ``RunTrace`` (lrcheck's own loop passes its planned
windows, a framework's adapter those gathered from every rank).

Recording stays cheap (BENCHMARKS.md, "How the recording overhead is measured"): the snapshot
of the parameters is one ``torch.cat`` of flat views made once per model into a row of a tensor
allocated once per run, and nothing here waits for the device more than once per update.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

import numpy as np
import torch

from lrcheck.experiments.scores import accuracy, macro_f1
from lrcheck.experiments.tasks import IGNORE_INDEX, TASKS, Dataset
from lrcheck.plan.steps import ScheduleContext, StepPlan, plan_steps, schedule_context
from lrcheck.plan.windows import Window, by_items
from lrcheck.runner.build import as_input
from lrcheck.runner.lockstep import StateSnapshots
from lrcheck.runner.startup import release
from lrcheck.spec import RunSpec
from lrcheck.trace import EpochMetrics, OnUpdate, Resumed, RunTrace, SkippedStep, UpdateRecord

# Layers whose output for a sample depends on the other samples in its forward, or on an RNG.
BATCH_DEPENDENT = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.dropout._DropoutNd)


def batch_dependent_layers(net: torch.nn.Module) -> tuple[str, ...]:
    """The names of ``net``'s layer types that make it not comparable across batch splits."""
    return tuple(sorted({type(m).__name__ for m in net.modules()
                         if isinstance(m, BATCH_DEPENDENT)}))


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: np.ndarray) -> tuple[float, float]:
    """Accuracy and macro-F1 on the test split, over samples or over (non-padding) tokens."""
    model.eval()
    with torch.no_grad():
        pred = model(x).argmax(dim=-1).cpu().numpy()
    model.train()
    keep = y != IGNORE_INDEX
    y, pred = y[keep], pred[keep]
    return accuracy(y, pred), macro_f1(y, pred)


class Steps(Protocol):
    """A learning-rate schedule as a loop drives it: torch's ``LRScheduler``, or a framework's
    wrapper of one (Accelerate's ``AcceleratedScheduler``)."""

    def step(self) -> None: ...


def run_plan(spec: RunSpec, data: Dataset) -> StepPlan:
    """The updates ``spec`` makes on ``data``'s training split."""
    return plan_steps(len(data.y_train), spec.bs, spec.accum, spec.world, spec.epochs, spec.tail)


def step_failure(exc: BaseException, update: int) -> str:
    """Why a run stopped when ``scheduler.step()`` raised during update ``update``."""
    return f"scheduler.step() raised {type(exc).__name__} at update {update}: {exc}"


class Recording:
    """What one run of ``spec`` (planned as ``plan``, its schedule told ``ctx``) used at every
    update, on ``device``; ``on_update`` is called with each record and the planned number of
    updates. ``resumed``: where a loop that checkpointed and resumed the run did so."""

    def __init__(self, spec: RunSpec, plan: StepPlan, ctx: ScheduleContext, data: Dataset, *,
                 device: torch.device | str, on_update: OnUpdate | None = None,
                 keep_states: bool = False) -> None:
        self.started = time.perf_counter()
        self.spec, self.plan, self.ctx, self.on_update = spec, plan, ctx, on_update
        self.device, self.dtype = device, getattr(torch, spec.dtype)
        self.x_test, self.y_test = as_input(data.x_test, self.dtype, device), data.y_test
        self.items = data.items_per_sample()
        self.updates: list[UpdateRecord] = []
        self.epochs: list[EpochMetrics] = []
        self.skipped: list[SkippedStep] = []
        self.stopped: str | None = None
        self.not_comparable: tuple[str, ...] = ()
        self.resumed: Resumed | None = None
        self._lr: tuple[float, ...] = ()
        self._steps_at_read = 0
        self._snapshots: torch.Tensor | None = None
        self._beyond: list[torch.Tensor] = []  # snapshots of updates past the plan
        self.windows: list[Window] = []  # this rank's, as fed
        self._whole: Callable[[], list[torch.Tensor]] | None = None
        # A reference a candidate runs in lockstep with: its optimizer's state after every
        # update too (``runner.lockstep``).
        self._states = (StateSnapshots(plan.total_updates, self.dtype, device) if keep_states
                        else None)
        self._optimizer: torch.optim.Optimizer | None = None
        self.lockstep: int | None = None  # updates a lockstep candidate started from the ref's

    @classmethod
    def for_run(cls, spec: RunSpec, data: Dataset, *, device: torch.device | str,
                on_update: OnUpdate | None = None, keep_states: bool = False) -> Recording:
        """The recording of a run of ``spec`` on ``data``: its plan (``run_plan``) and the
        schedule context it starts with (a framework that sizes its schedule its own way
        replaces ``ctx`` with what it really used)."""
        plan = run_plan(spec, data)
        ctx = schedule_context(plan, spec.policy, spec.warmup, spec.framework)
        return cls(spec, plan, ctx, data, device=device, on_update=on_update,
                   keep_states=keep_states)

    def attach(self, net: torch.nn.Module,
               whole: Callable[[], list[torch.Tensor]] | None = None) -> None:
        """Record ``net``'s parameters from now on (again after a resume builds a new model).
        The run is built, everything it needs imported: the garbage collector starting held
        off is let go (``runner.startup``). ``whole``: the parameters gathered whole, for a
        model whose parameters are shards (FSDP; a collective, on every rank)."""
        release()
        self.not_comparable = batch_dependent_layers(net)
        first = next(net.parameters(), None)
        if first is not None and self.x_test.is_floating_point() and first.dtype != self.dtype:
            self.x_test = self.x_test.to(first.dtype)  # a bfloat16 model (--amp bf16)
        self._whole = whole
        # Flat views of the parameters' storage, which the optimizer updates in place: a
        # snapshot is then one torch.cat into its row (view() refuses a non-contiguous one).
        self._flat = [] if whole is not None else [p.detach().view(-1) for p in net.parameters()]
        if self._snapshots is None:
            size = sum(p.numel() for p in (self._flat if whole is None else whole()))
            self._snapshots = torch.empty(self.plan.total_updates, size, dtype=self.dtype,
                                          device=self.device)
            # Its rows as views, made once: indexing the tensor at every update costs ~10 µs.
            self._rows = self._snapshots.unbind(0)

    def before_step(self, optimizer: torch.optim.Optimizer, scheduler_steps: int) -> None:
        """Just before ``optimizer.step()``: the LR it will use, and ``scheduler.step()`` calls
        made so far."""
        self._lr = tuple(float(g["lr"]) for g in optimizer.param_groups)
        self._steps_at_read = scheduler_steps
        self._optimizer = optimizer

    def step_scheduler(self, scheduler: Steps, update: int) -> bool:
        """``scheduler.step()`` during update ``update``; False when it raised, and the run is
        to stop: ``stopped`` says why."""
        try:
            scheduler.step()
        except Exception as exc:  # a schedule that refuses to step is a finding
            self.stopped = step_failure(exc, update)
            return False
        return True

    def skipped_step(self, update: int, scheduler_steps: int) -> None:
        """The GradScaler skipped update ``update``'s optimizer step; the schedule moved
        ``scheduler_steps`` steps during it."""
        self.skipped.append(SkippedStep(update, scheduler_steps))

    def update(self, step: int, loss: torch.Tensor | float, samples_seen: int,
               epoch: int, window: Window | None = None) -> None:
        """Update ``step`` is done: its record (with what ``before_step`` read), the parameters
        after it, and the progress hook. ``loss``: the update's loss over all ranks; a tensor is
        read here, the one wait for the device in an update. ``window``: this rank's samples
        behind it as fed, where a framework fed them."""
        if window is not None:
            self.windows.append(window)
        record = UpdateRecord(step, self._lr, float(loss), samples_seen, self._steps_at_read,
                              epoch)
        row = len(self.updates)
        self.updates.append(record)
        flat = (self._flat if self._whole is None
                else [t.reshape(-1).to(self.dtype) for t in self._whole()])
        if row < len(self._rows):
            # Straight into the preallocated row: one copy of the parameters, no temporary.
            torch.cat(flat, out=self._rows[row])
        else:  # a framework that ran past lrcheck's plan: its updates are kept all the same
            self._beyond.append(torch.cat(flat))
        if self._states is not None and self._optimizer is not None:
            self._states.take(self._optimizer, row)
        if self.on_update is not None:
            self.on_update(record, self.plan.total_updates)

    def end_epoch(self, net: torch.nn.Module, epoch: int, after_update: int) -> None:
        """Accuracy and macro-F1 of ``net`` on the test split after update ``after_update``."""
        acc, f1 = evaluate(net, self.x_test, self.y_test)
        self.epochs.append(EpochMetrics(epoch, after_update, acc, f1))

    def finish(self, windows: list[Window] | None = None) -> RunTrace:
        """The trace of the run, once it has ended (or stopped); ``windows``: the samples behind
        every update over all ranks."""
        assert self._snapshots is not None, "attach() a model before the run"
        params = self._snapshots[:len(self.updates) - len(self._beyond)]
        if self._beyond:
            params = torch.cat([params, torch.stack(self._beyond)])
        return RunTrace(
            spec=self.spec, updates=self.updates, epochs=self.epochs,
            params=params.cpu().numpy(), planned_updates=self.plan.total_updates,
            context=self.ctx, not_comparable=self.not_comparable,
            stopped=self.stopped, seconds=time.perf_counter() - self.started,
            resumed=self.resumed, skipped=self.skipped if self.spec.amp != "off" else None,
            windows=None if windows is None else by_items(windows, self.items),
            optimizer_states=None if self._states is None else self._states.array(
                len(self.updates)),
            lockstep=self.lockstep)


def recording_bytes(spec: RunSpec, data: Dataset, keep_states: bool = False) -> int:
    """What a run of ``spec`` on ``data`` keeps in memory for the ``params`` check: a snapshot of
    every parameter after every update (in ``spec.dtype``) and, for a reference a candidate runs
    in lockstep with, of the optimizer's state (a momentum buffer per parameter for SGD, two
    moments for AdamW, and its step counts). The model is built on the meta device, which
    allocates nothing."""
    plan = run_plan(spec, data)
    with torch.device("meta"):
        net = TASKS[spec.task].build_model(data)
    size = sum(p.numel() for p in net.parameters())
    itemsize = int(getattr(torch, spec.dtype).itemsize)
    params = plan.total_updates * size * itemsize
    if not keep_states:
        return params
    tensors = sum(1 for _ in net.parameters())
    state = size if spec.optimizer == "sgd" else 2 * size + tensors  # moments and step counts
    return params + plan.total_updates * state * itemsize
