"""``--framework accelerate``: a run trained through the real HF Accelerate.

The loop is the one Accelerate's documentation shows: ``prepare()`` the model, optimizer,
dataloader and scheduler, then on every micro-batch ``with accelerator.accumulate(model)``,
``accelerator.backward(loss)``, ``optimizer.step()``, ``scheduler.step()``,
``optimizer.zero_grad()``, and Accelerate decides which of those calls really act. lrcheck only
chooses the data (its own order, through a sampler Accelerate's prepared loader drives), the
loss normalisation, and what it records.

The schedule is sized by Accelerate's convention (``frameworks.Framework.lengths_times_world``): in
updates of the unprepared single-process dataloader, because ``AcceleratedScheduler`` steps it
once per process on every optimizer step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from lrcheck.errors import RunError
from lrcheck.experiments.tasks import IGNORE_INDEX, Dataset
from lrcheck.plan.frameworks import require_framework
from lrcheck.plan.order import global_batches
from lrcheck.plan.steps import plan_steps, schedule_context
from lrcheck.plan.windows import planned_windows
from lrcheck.runner.build import as_input, build
from lrcheck.runner.frameworks.common import PlannedOrder
from lrcheck.runner.loss import item_losses, micro_batch_loss
from lrcheck.runner.recording import Recording
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, RunTrace

if TYPE_CHECKING:
    from accelerate import Accelerator


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """``plain.train``'s contract, trained through HF Accelerate. Under torchrun Accelerate finds
    the processes itself; ``rank`` and ``spec.world`` must agree with what it found."""
    require_framework(spec.framework)
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin

    accelerator = Accelerator(
        gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=spec.accum),
        # split_batches=False (Accelerate's default): each process loads whole batches of bs,
        # and AcceleratedScheduler steps once per process on every optimizer step.
        dataloader_config=DataLoaderConfiguration(split_batches=False),
        mixed_precision="no", cpu=device == "cpu")
    try:
        if (accelerator.num_processes, accelerator.process_index) != (spec.world, rank):
            raise RunError(f"Accelerate sees process {accelerator.process_index} of "
                           f"{accelerator.num_processes}, lrcheck planned rank {rank} of "
                           f"{spec.world}")
        return _train(spec, data, accelerator, on_update, on_start)
    finally:
        # Accelerate keeps its state in process-wide singletons; the next run (another accum,
        # another device) needs them cleared, as Accelerate's own test case does.
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


def _train(spec: RunSpec, data: Dataset, accelerator: Accelerator,
           on_update: OnUpdate | None, on_start: Callable[[], None] | None) -> RunTrace:
    """Accelerate's objects built for ``spec``, the recording attached, trained."""
    plan = plan_steps(len(data.y_train), spec.bs, spec.accum, spec.world, spec.epochs, spec.tail)
    ctx = schedule_context(plan, spec.policy, spec.warmup, spec.framework)
    recording = Recording(spec, plan, ctx, data, device=accelerator.device, on_update=on_update)
    run = _Run(spec, data, accelerator, recording)
    if on_start is not None:
        on_start()
    run.loop()
    # lrcheck's own order and normalisation, which Accelerate's prepared loader follows.
    return recording.finish(planned_windows(plan, spec.seed, run.items, spec.loss_norm))


class _Run:
    """What Accelerate prepared for one run, and the loop of its documentation."""

    def __init__(self, spec: RunSpec, data: Dataset, accelerator: Accelerator,
                 recording: Recording) -> None:
        self.spec, self.accelerator, self.recording = spec, accelerator, recording
        plan = recording.plan
        self.batches = list(global_batches(plan.num_samples, plan.effective_batch, spec.epochs,
                                           spec.seed, spec.tail, spec.twin))
        self.items = data.items_per_sample()
        parts = build(spec, data, recording.ctx, None)  # Accelerate places the model itself
        train_set = torch.utils.data.TensorDataset(
            as_input(data.x_train, recording.dtype, "cpu"), torch.as_tensor(data.y_train))
        sampler = PlannedOrder(self.batches, spec.bs, spec.world, spec.epochs)
        loader = torch.utils.data.DataLoader(
            train_set,
            batch_sampler=torch.utils.data.BatchSampler(sampler, spec.bs, drop_last=False))
        self.model, self.optimizer, self.loader, self.scheduler = accelerator.prepare(
            parts.net, parts.optimizer, loader, parts.scheduler)
        self.net = accelerator.unwrap_model(self.model)
        recording.attach(self.net)
        self.first_step = self.scheduler.scheduler.last_epoch
        # This rank's share of the update's loss, and its samples; summed over ranks at the step.
        self.window = torch.zeros(2, dtype=recording.dtype, device=accelerator.device)
        self.samples_seen = 0

    def loop(self) -> None:
        self.model.train()
        for epoch in range(self.spec.epochs):
            self.loader.set_epoch(epoch)
            for x, y in self.loader:
                self._micro_batch(x, y)
                if not self.accelerator.sync_gradients:
                    continue
                self._record(epoch)
                if self.recording.stopped:
                    break
            self.recording.end_epoch(self.net, epoch, len(self.recording.updates) - 1)
            if self.recording.stopped:
                break

    def _micro_batch(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Accelerate's documented step, on every micro-batch: it decides which of the calls
        really act."""
        accelerator, update = self.accelerator, len(self.recording.updates)
        # The normalisation needs the size of the effective batch this micro-batch belongs to:
        # lrcheck's plan, or a full one should Accelerate run past the plan.
        n_global = (int(self.items[self.batches[update].indices].sum())
                    if update < len(self.batches) else self.spec.effective_batch)
        with accelerator.accumulate(self.model):
            per_item = item_losses(self.model, x, y)
            loss, share = micro_batch_loss(per_item, lambda: (y != IGNORE_INDEX).sum(), self.spec,
                                           n_global)
            self.window[0] += share
            self.window[1] += len(y)
            # accelerator.backward() divides the loss by the accumulation steps; the loss is
            # already normalised by the whole effective batch, so undo that division.
            accelerator.backward(loss * accelerator.gradient_accumulation_steps)
            if accelerator.sync_gradients:  # the optimizer step below is a real one
                self.recording.before_step(self.optimizer,
                                           self.scheduler.scheduler.last_epoch - self.first_step)
            self.optimizer.step()
            self.recording.step_scheduler(self.scheduler, update)
            self.optimizer.zero_grad()

    def _record(self, epoch: int) -> None:
        """An update is done: its loss and samples over all processes, recorded."""
        loss_total, samples = self.accelerator.reduce(self.window, reduction="sum").tolist()
        self.window.zero_()
        self.samples_seen += int(samples)
        self.recording.update(len(self.recording.updates), loss_total, self.samples_seen, epoch)
