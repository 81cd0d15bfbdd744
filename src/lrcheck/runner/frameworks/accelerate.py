"""``--framework accelerate``: a run trained through the real HF Accelerate.

The loop is the one Accelerate's documentation shows: ``prepare()`` the model, optimizer,
dataloader and scheduler, then on every micro-batch ``with accelerator.accumulate(model)``,
``accelerator.backward(loss)``, ``optimizer.step()``, ``scheduler.step()``,
``optimizer.zero_grad()``, and Accelerate decides which of those calls really act. lrcheck only
chooses the data (its own order, through a sampler Accelerate's prepared loader drives), the
loss normalisation, and what it records.

What is recorded is what Accelerate really did: every item carries its sample id, so the
micro-batches are the ones Accelerate's prepared loader dealt to each process — with
``even_batches`` (``--even-batches``, Accelerate's default) the last round of batches filled
from the start of the data when the processes' batches do not come out even — and the weight of
each micro-batch's mean loss is measured in the backward pass (``integrations.core.Tap``, the
recording every framework shares).

The schedule is sized by Accelerate's convention (``frameworks.Framework.lengths_times_world``): in
updates of the unprepared single-process dataloader, because ``AcceleratedScheduler`` steps it
once per process on every optimizer step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from lrcheck.errors import RunError
from lrcheck.experiments.tasks import IGNORE_INDEX, Dataset
from lrcheck.plan.order import GlobalBatch
from lrcheck.runner.build import build
from lrcheck.runner.frameworks.common import FrameworkRun, PlannedOrder, framework_process
from lrcheck.runner.loss import item_losses, micro_batch_loss
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, RunTrace

if TYPE_CHECKING:
    from accelerate import Accelerator

    from lrcheck.integrations.core import Tap


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """``plain.train``'s contract, trained through HF Accelerate. Under torchrun Accelerate finds
    the processes itself; ``rank`` and ``spec.world`` must agree with what it found. A run of
    world 1 (the reference rank 0 trains after the candidate's job) does not see torchrun's
    variables (``common.framework_process``)."""
    with framework_process(spec, accelerate=True):
        from accelerate import Accelerator
        from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin

        accelerator = Accelerator(
            gradient_accumulation_plugin=GradientAccumulationPlugin(num_steps=spec.accum),
            # split_batches=False (Accelerate's default): each process loads whole batches of
            # bs, and AcceleratedScheduler steps once per process on every optimizer step.
            dataloader_config=DataLoaderConfiguration(split_batches=False,
                                                      even_batches=spec.even_batches),
            mixed_precision="no", cpu=device == "cpu")
        run = FrameworkRun.start(spec, data, device=accelerator.device, on_update=on_update)
        run.check_processes("Accelerate", accelerator.num_processes,
                            accelerator.process_index, rank)
        loop = _Loop(run, accelerator)
        if on_start is not None:
            on_start()
        loop.run()
        return run.finish(loop.tap)


def batch_counts(spec: RunSpec, batches: list[GlobalBatch]) -> list[list[int]]:
    """Per epoch, the batches of ``bs`` each process gets from Accelerate's prepared loader
    without ``even_batches``: the epoch's stream (``batches`` dealt) cut into batches of ``bs``,
    dealt round-robin."""
    order = PlannedOrder(batches, spec.bs, spec.world, spec.epochs, dealt=True)
    counts = []
    for length in order.lengths:
        n = math.ceil(length / spec.bs)
        counts.append([n // spec.world + (r < n % spec.world) for r in range(spec.world)])
    return counts


def _same_batch_counts(spec: RunSpec, batches: list[GlobalBatch]) -> None:
    """Without ``even_batches`` a process with one batch fewer leaves the others waiting in
    DDP's all-reduce for ever: refused before training."""
    for epoch, counts in enumerate(batch_counts(spec, batches)):
        if len(set(counts)) > 1:
            raise RunError(
                f"--no-even-batches: in epoch {epoch} Accelerate's prepared loader gives the "
                f"processes {', '.join(map(str, counts))} batches of {spec.bs}; DDP would "
                "wait for ever on the process with fewer (--even-batches fills the last round "
                "from the start of the data; or a --tail or --bs whose batches come out even)")


class _Loop:
    """What Accelerate prepared for one run, and the loop of its documentation."""

    def __init__(self, run: FrameworkRun, accelerator: Accelerator) -> None:
        from lrcheck.integrations.core import Tap
        from lrcheck.runner.frameworks.common import RecordingSink

        spec, recording = run.spec, run.recording
        self.spec, self.accelerator, self.recording = spec, accelerator, recording
        self.batches = run.batches
        if spec.world > 1 and not spec.even_batches:
            _same_batch_counts(spec, run.batches)
        self.items = run.data.items_per_sample()
        parts = build(spec, run.data, run.ctx, None)  # Accelerate places the model itself
        loader = torch.utils.data.DataLoader(
            run.dataset(), batch_sampler=torch.utils.data.BatchSampler(
                run.order(dealt=True), spec.bs, drop_last=False))
        self.model, self.optimizer, self.loader, self.scheduler = accelerator.prepare(
            parts.net, parts.optimizer, loader, parts.scheduler)
        self.net = accelerator.unwrap_model(self.model)
        recording.attach(self.net)
        self.first_step = self.scheduler.scheduler.last_epoch
        self.tap: Tap = Tap(RecordingSink(recording), accelerator.device,
                            (accelerator.num_processes, accelerator.process_index))

    def run(self) -> None:
        self.model.train()
        for epoch in range(self.spec.epochs):
            self.loader.set_epoch(epoch)
            for batch in self.loader:
                self._micro_batch(batch)
                if not self.accelerator.sync_gradients:
                    continue
                # The update is done: its loss and samples over all processes, recorded.
                self.tap.end_update(epoch)
                if self.recording.stopped:
                    break
            self.recording.end_epoch(self.net, epoch, len(self.recording.updates) - 1)
            if self.recording.stopped:
                break

    def _micro_batch(self, batch: dict[str, torch.Tensor]) -> None:
        """Accelerate's documented step, on every micro-batch: it decides which of the calls
        really act. The micro-batch's mean loss goes to the ``Tap``, which measures its weight
        in the backward pass."""
        accelerator, spec, update = self.accelerator, self.spec, len(self.recording.updates)
        x, y, ids = batch["x"], batch["labels"], batch["ids"].cpu().numpy()
        # The normalisation needs the size of the effective batch this micro-batch belongs to:
        # lrcheck's plan, or a full one should Accelerate run past the plan.
        n_global = (int(self.items[self.batches[update].indices].sum())
                    if update < len(self.batches) else spec.effective_batch)
        n_local = int(self.items[ids].sum())
        with accelerator.accumulate(self.model):
            per_item = item_losses(self.model, x, y)
            loss, _ = micro_batch_loss(per_item, lambda: (y != IGNORE_INDEX).sum(), spec,
                                       n_global)
            # The loss is the micro-batch's mean times this factor (runner/loss.py): the Tap
            # takes the mean's weight as the one measured on the loss times it.
            scale = (n_local * spec.world / n_global if spec.loss_norm == "global"
                     else 1 / spec.accum)
            self.tap.micro_batch(loss, n_local, len(ids), ids, scale=scale)
            # accelerator.backward() divides the loss by the accumulation steps; the loss is
            # already normalised by the whole effective batch, so undo that division.
            accelerator.backward(loss * accelerator.gradient_accumulation_steps)
            if accelerator.sync_gradients:  # the optimizer step below is a real one
                self.tap.before_step(self.optimizer,
                                     self.scheduler.scheduler.last_epoch - self.first_step)
            self.optimizer.step()
            self.recording.step_scheduler(self.scheduler, update)
            self.optimizer.zero_grad()
