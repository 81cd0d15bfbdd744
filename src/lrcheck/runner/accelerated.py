"""The ``accelerate`` policy: the candidate trained through the real HF Accelerate.

The loop is the one Accelerate's documentation shows: ``prepare()`` the model, optimizer,
dataloader and scheduler, then on every micro-batch ``with accelerator.accumulate(model)``,
``accelerator.backward(loss)``, ``optimizer.step()``, ``scheduler.step()``,
``optimizer.zero_grad()``, and Accelerate decides which of those calls really act. lrcheck only
chooses the data (its own order, through a sampler Accelerate's prepared loader drives), the
loss normalisation, and what it records.

The schedule is sized by Accelerate's convention (``policies.Policy.lengths_times_world``): in
updates of the unprepared single-process dataloader, because ``AcceleratedScheduler`` steps it
once per process on every optimizer step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import numpy as np
import torch

from lrcheck.errors import RunError
from lrcheck.experiments.schedulers import make_scheduler
from lrcheck.experiments.tasks import IGNORE_INDEX, TASKS, Dataset
from lrcheck.runner.loop import (
    as_input,
    batch_dependent_layers,
    evaluate,
    item_losses,
    make_optimizer,
    micro_batch_loss,
)
from lrcheck.runner.order import GlobalBatch, dealt_order, global_batches
from lrcheck.runner.policies import require_extra
from lrcheck.runner.steps import plan_steps, schedule_context, step_failure
from lrcheck.spec import RunSpec
from lrcheck.trace import EpochMetrics, OnUpdate, RunTrace, UpdateRecord

if TYPE_CHECKING:
    from accelerate import Accelerator


class PlannedOrder(torch.utils.data.Sampler[int]):
    """lrcheck's data order as a sampler with ``set_epoch``, the way Accelerate's prepared
    loader expects one: batches of ``bs`` cut from epoch ``e``'s stream and dealt round-robin to
    the processes are exactly each rank's micro-batches (``order.dealt_order``)."""

    def __init__(self, batches: list[GlobalBatch], bs: int, world: int, epochs: int) -> None:
        self._streams = [np.concatenate([dealt_order(b.indices, bs, world) for b in batches
                                         if b.epoch == e]) for e in range(epochs)]
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        return iter(self._streams[self.epoch].tolist())

    def __len__(self) -> int:
        return len(self._streams[self.epoch])


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """``loop.train``'s contract, trained through HF Accelerate. Under torchrun Accelerate finds
    the processes itself; ``rank`` and ``spec.world`` must agree with what it found."""
    require_extra(spec.policy)
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
    started = time.perf_counter()
    dtype = getattr(torch, spec.dtype)
    plan = plan_steps(len(data.y_train), spec.bs, spec.accum, spec.world, spec.epochs, spec.tail)
    ctx = schedule_context(plan, spec.policy, spec.warmup)
    batches = list(global_batches(plan.num_samples, plan.effective_batch, spec.epochs, spec.seed,
                                  spec.tail))
    items = data.items_per_sample()
    train_set = torch.utils.data.TensorDataset(as_input(data.x_train, dtype, "cpu"),
                                               torch.as_tensor(data.y_train))
    sampler = PlannedOrder(batches, spec.bs, spec.world, spec.epochs)
    loader = torch.utils.data.DataLoader(
        train_set, batch_sampler=torch.utils.data.BatchSampler(sampler, spec.bs, drop_last=False))

    torch.manual_seed(spec.seed)
    net = TASKS[spec.task].build_model(data).to(dtype=dtype)
    optimizer = make_optimizer(spec, net)
    scheduler = make_scheduler(spec.scheduler, optimizer, ctx)
    model, optimizer, loader, scheduler = accelerator.prepare(net, optimizer, loader, scheduler)
    net = accelerator.unwrap_model(model)
    x_test = as_input(data.x_test, dtype, accelerator.device)
    first_step = scheduler.scheduler.last_epoch

    params = list(net.parameters())
    snapshots: list[torch.Tensor] = []
    updates: list[UpdateRecord] = []
    epochs: list[EpochMetrics] = []
    samples_seen = 0
    stopped: str | None = None
    # This rank's share of the update's loss, and its samples; summed over ranks at the step.
    window = torch.zeros(2, dtype=dtype, device=accelerator.device)

    model.train()
    if on_start is not None:
        on_start()
    for epoch in range(spec.epochs):
        loader.set_epoch(epoch)
        for x, y in loader:
            update = len(updates)
            # The normalisation needs the size of the effective batch this micro-batch belongs
            # to: lrcheck's plan, or a full one should Accelerate run past the plan.
            n_global = (int(items[batches[update].indices].sum()) if update < len(batches)
                        else plan.effective_batch)
            with accelerator.accumulate(model):
                per_item = item_losses(model, x, y)
                loss, share = micro_batch_loss(per_item, (y != IGNORE_INDEX).sum(), spec,
                                               n_global)
                window[0] += share
                window[1] += len(y)
                # accelerator.backward() divides the loss by the accumulation steps; the loss is
                # already normalised by the whole effective batch, so undo that division.
                accelerator.backward(loss * accelerator.gradient_accumulation_steps)
                if accelerator.sync_gradients:  # the optimizer step below is a real one
                    lr = tuple(float(g["lr"]) for g in optimizer.param_groups)
                    steps_at_read = scheduler.scheduler.last_epoch - first_step
                optimizer.step()
                try:
                    scheduler.step()
                except Exception as exc:  # a schedule that refuses to step is a finding
                    stopped = step_failure(exc, update)
                optimizer.zero_grad()
            if not accelerator.sync_gradients:
                continue
            loss_total, samples = accelerator.reduce(window, reduction="sum").tolist()
            window.zero_()
            samples_seen += int(samples)
            record = UpdateRecord(update, lr, loss_total, samples_seen, steps_at_read, epoch)
            updates.append(record)
            snapshots.append(torch.cat([p.detach().reshape(-1) for p in params]))
            if on_update is not None:
                on_update(record, plan.total_updates)
            if stopped:
                break
        acc, f1 = evaluate(net, x_test, data.y_test)
        epochs.append(EpochMetrics(epoch, len(updates) - 1, acc, f1))
        if stopped:
            break

    flat = torch.stack(snapshots) if snapshots else torch.empty(0, sum(p.numel() for p in params))
    return RunTrace(
        spec=spec, updates=updates, epochs=epochs, params=flat.cpu().numpy(),
        planned_updates=plan.total_updates, context=ctx.to_dict(),
        not_comparable=batch_dependent_layers(net), stopped=stopped,
        seconds=time.perf_counter() - started,
    )
