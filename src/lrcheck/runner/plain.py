"""lrcheck's own training loop (``--policy`` applies here): one run of a ``RunSpec``, recorded
update by update.

It reads like the textbook loop it checks: for every update, forward and backward over its
micro-batches (DDP syncing gradients on the last one only), ``optimizer.step()``,
``scheduler.step()`` where the policy says. The only additions are the recording
(``recording.Recording``: the LR read just before ``optimizer.step()``, losses kept on the
device until the update ends) and the loss normalisation that makes the gradient the mean over
the whole effective batch (``loss.micro_batch_loss``).
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, cast

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from lrcheck.experiments.tasks import IGNORE_INDEX, Dataset
from lrcheck.plan.order import GlobalBatch, global_batches, micro_batches, rank_share
from lrcheck.plan.policies import POLICIES
from lrcheck.plan.windows import items_each, planned_windows, with_measured
from lrcheck.runner import resume
from lrcheck.runner.amp import amp_autocast, make_scaler, optimizer_step
from lrcheck.runner.build import Parts, as_input, build
from lrcheck.runner.lockstep import Lockstep
from lrcheck.runner.loss import item_losses, micro_batch_loss
from lrcheck.runner.recording import Recording
from lrcheck.runner.resume import LoopPosition, OpenWindow, Pause, resume_point
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, Resumed, RunTrace


class Shards(Protocol):
    """What shards the model in place of DDP (``frameworks.fsdp``): ``shard(net)`` before the
    optimizer is made, ``sync(net, on)`` before each micro-batch's backward, ``whole(net)`` the
    parameters gathered whole (a collective) for the record."""

    def shard(self, net: torch.nn.Module) -> None: ...

    def sync(self, net: torch.nn.Module, on: bool) -> None: ...

    def whole(self, net: torch.nn.Module) -> list[torch.Tensor]: ...


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          group: dist.ProcessGroup | None = None, on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None, keep_states: bool = False,
          lockstep: Lockstep | None = None, shards: Shards | None = None) -> RunTrace:
    """Train ``spec`` on ``data`` as rank ``rank`` of ``spec.world`` and return what every
    update used. When ``world > 1`` the caller has set up the process group; ``group`` (default:
    the default group) is the one DDP and the loss all-reduce use. ``on_start`` is called once
    everything is built (DDP's constructor waits for every rank), just before the first
    micro-batch.

    With ``--resume-at``/``--resume-at-micro`` the run stops there, saves everything a real
    checkpoint holds, builds model, optimizer, scheduler and scaler again from scratch with the
    same factories, loads the checkpoint and goes on (``runner.resume``).

    ``keep_states``: record the optimizer's state after every update too (a reference that a
    candidate runs in lockstep with); ``lockstep``: the reference's states each update of this
    run starts from (``runner.lockstep``); ``shards``: the model sharded (FSDP) on every rank
    instead of DDP, on a run of any world (``frameworks.fsdp``)."""
    loop = _Loop(spec, data, device, rank, group, on_update, keep_states, lockstep, shards)
    pause = resume_point(spec, loop.plan)
    parts = loop.build()
    if on_start is not None:
        on_start()
    progress = LoopPosition()
    if loop.run(parts, progress, pause):
        with tempfile.TemporaryDirectory(prefix="lrcheck-resume-") as folder:
            path = resume.save(Path(folder), parts, progress, rank)
            del parts
            parts = loop.build()
            progress = resume.load(path, parts, device)
            # The window in progress at the pause: update N with ``micro_batches_done`` of its
            # micro-batches trained (0: the pause came right after update N - 1).
            loop.recording.resumed = Resumed(progress.update, progress.micro_done,
                                             path.stat().st_size)
            # That update starts from what the checkpoint restored, not the reference's state.
            loop.restored = progress.update
        loop.run(parts, progress, None)
    if lockstep is not None:
        loop.recording.lockstep = lockstep.loaded
    planned = planned_windows(loop.plan, spec.seed, loop.items, spec.loss_norm, spec.twin)
    measured = loop.gathered_weights()
    return loop.recording.finish(planned if measured is None else with_measured(planned, measured))


class _Loop:
    """One run's data on the device, its plan and its recording; ``run`` is the loop."""

    def __init__(self, spec: RunSpec, data: Dataset, device: str, rank: int,
                 group: dist.ProcessGroup | None, on_update: OnUpdate | None,
                 keep_states: bool = False, lockstep: Lockstep | None = None,
                 shards: Shards | None = None) -> None:
        self.spec, self.data, self.device, self.rank, self.group = spec, data, device, rank, group
        self.lockstep, self.restored, self.shards = lockstep, -1, shards
        self.recording = Recording.for_run(spec, data, device=device, on_update=on_update,
                                           keep_states=keep_states)
        self.plan, self.ctx = self.recording.plan, self.recording.ctx
        self.every_micro_batch = POLICIES[spec.policy].steps_every_micro_batch
        self.dtype = getattr(torch, spec.dtype)
        self.x_train = as_input(data.x_train, self.dtype, device)
        self.y_train = torch.as_tensor(data.y_train, device=device)
        self.items = data.items_per_sample()
        self.items_each = items_each(self.items)
        self.on_cpu = torch.device(device).type == "cpu"
        self.no_sync = contextlib.nullcontext()
        self.items_on_device = torch.as_tensor(self.items, dtype=self.dtype, device=device)
        self.autocast = amp_autocast(spec, device)
        # The weight each sample's loss carried in the gradient, measured in the backward pass:
        # per update, (rank, tensor) per micro-batch of this rank, and the update in progress.
        self.weights: list[list[tuple[torch.Tensor, float]]] = []
        # (gradient, what to divide it by: the GradScaler's factor times world) per micro-batch.
        self.window_weights: list[tuple[torch.Tensor, float]] = []
        self.padding = (None if data.y_train.ndim == 1
                        else torch.as_tensor(data.y_train != IGNORE_INDEX, dtype=self.dtype,
                                             device=device))
        self.scale = 1.0

    def build(self) -> Parts:
        """Model, optimizer, scheduler and scaler, from scratch (the same weights every time:
        the generator is seeded first)."""
        shards = self.shards
        parts = build(self.spec, self.data, self.ctx, self.device,
                      None if shards is None else shards.shard)
        if self.spec.world > 1 and shards is None:
            parts.model = torch.nn.parallel.DistributedDataParallel(parts.net,
                                                                    process_group=self.group)
        parts.scaler = make_scaler(self.spec, self.device)
        net = parts.net
        self.recording.attach(net, None if shards is None else lambda: shards.whole(net))
        return parts

    def run(self, parts: Parts, progress: LoopPosition, pause: Pause | None) -> bool:
        """Train from ``progress`` to the end, or until ``pause``: True when it paused there
        (``progress`` then says where)."""
        parts.model.train()
        for batch in global_batches(self.plan.num_samples, self.plan.effective_batch,
                                    self.spec.epochs, self.spec.seed, self.spec.tail,
                                    self.spec.twin):
            if batch.update < progress.update:
                continue  # before the checkpoint: already trained
            if self._update(parts, batch, progress, pause):
                return True
            if batch.ends_epoch or self.recording.stopped:
                self.recording.end_epoch(parts.net, batch.epoch, progress.update - 1)
            if self.recording.stopped:
                return False
            if pause is not None and pause == Pause(batch.update):
                return True
        return False

    def _update(self, parts: Parts, batch: GlobalBatch, progress: LoopPosition,
                pause: Pause | None) -> bool:
        """One optimizer update: forward and backward over its micro-batches, then the step, the
        schedule and the record. True when ``pause`` came inside it; it stops early, unrecorded,
        when the schedule refused to step inside it."""
        micro = self._shares(batch.indices)
        # Loss items behind the whole update, over all ranks. Every rank holds the data set and
        # the global batch, so this equals the all-reduce of the ranks' counts.
        n_global = (len(batch.indices) * self.items_each if self.items_each is not None
                    else int(self.items[batch.indices].sum()))
        if progress.window is None:  # the update begins
            self.window_weights = []
            if self.lockstep is not None and batch.update != self.restored:
                self.lockstep.load(parts.net, parts.optimizer, batch.update)
        # The GradScaler's factor in the gradients of this update (it changes after a step).
        self.scale = 1.0 if parts.scaler is None else float(parts.scaler.get_scale())
        window = progress.window = progress.window or OpenWindow(
            0, torch.zeros((), dtype=self.dtype, device=self.device), progress.scheduler_steps)
        for m in range(window.micro, len(micro) - 1):
            self._forward_backward(parts, micro[m], n_global, window, last=False)
            # The micro-batch policies step the schedule on every micro-batch.
            if self.every_micro_batch and not self._step_scheduler(parts, batch.update, progress):
                return False
            window.micro = m + 1
            if pause is not None and pause == Pause(batch.update, m):
                return True
        self._forward_backward(parts, micro[-1], n_global, window, last=True)
        skipped = self._optimizer_step(parts, batch.update, progress)
        # per-update: after each optimizer step that was not skipped; the micro-batch policies
        # step on every micro-batch, skipped or not.
        if not skipped or self.every_micro_batch:
            self._step_scheduler(parts, batch.update, progress)
        self._record(batch, window, skipped, progress)
        return False

    def _shares(self, indices: np.ndarray) -> list[torch.Tensor]:
        """This rank's share of each micro-batch of an update (``indices``: its global batch).
        On the CPU each is a tensor over a numpy view (cheaper than slicing a tensor); on a GPU
        a view of one host-to-device copy per update, so a micro-batch never waits for the
        host."""
        bs, rank, world = self.spec.bs, self.rank, self.spec.world
        if self.on_cpu:
            return [torch.from_numpy(rank_share(m, rank, world))
                    for m in micro_batches(indices, bs, world)]
        on_device = torch.from_numpy(indices).to(self.device)
        return [rank_share(m, rank, world) for m in micro_batches(on_device, bs, world)]

    def _forward_backward(self, parts: Parts, idx: torch.Tensor, n_global: int,
                          window: OpenWindow, last: bool) -> None:
        """This rank's share ``idx`` of one micro-batch, forward and backward; its loss joins
        the window's."""
        # DDP (and FSDP) reduce gradients only on the last micro-batch of an update.
        if self.shards is not None:
            self.shards.sync(parts.model, last)
        sync = (self.no_sync if last or self.spec.world == 1 or self.shards is not None
                else cast(DistributedDataParallel, parts.model).no_sync())
        with sync:
            with self.autocast:
                per_item = item_losses(parts.model, self.x_train[idx], self.y_train[idx])
            if per_item.dtype != self.dtype:  # autocast's
                per_item = per_item.to(self.dtype)
            loss, share = micro_batch_loss(per_item,
                                           lambda: self.items_on_device[idx].sum(), self.spec,
                                           n_global)
            window.loss_sum += share
            if per_item.requires_grad:
                per_item.register_hook(self._weigh(idx))
            (loss if parts.scaler is None else parts.scaler.scale(loss)).backward()

    def _weigh(self, idx: torch.Tensor) -> Callable[[torch.Tensor], None]:
        """A hook on a micro-batch's per-item losses: the gradient that reaches them is the
        weight each item carries (times the GradScaler's factor, before DDP averages the
        ranks' gradients: divided by both here); a sample's weight is its items' sum."""
        divide = self.scale * self.spec.world

        def take(grad: torch.Tensor) -> None:
            if self.padding is not None:  # tokens: the real positions of each sample
                grad = (grad.reshape(len(idx), -1) * self.padding[idx]).sum(dim=1)
            self.window_weights.append((grad.detach(), divide))  # divided at the end, at once

        return take

    def gathered_weights(self) -> list[list[tuple[int, np.ndarray]]] | None:
        """Every rank's measured weights, update by update, on rank 0 (None on the others and
        when nothing was measured); one collective under several processes."""
        sizes = [len(w) for update in self.weights for w, _ in update]
        if sizes:
            flat = torch.cat([w for update in self.weights for w, _ in update]).cpu().numpy()
            divisors = [d for update in self.weights for _, d in update]
            flat = flat.astype(np.float64) / np.repeat(np.asarray(divisors), sizes)
            pieces = iter(np.split(flat, np.cumsum(sizes)[:-1]))
            mine = [[next(pieces) for _ in update] for update in self.weights]
        else:
            mine = [[] for _ in self.weights]
        if self.spec.world == 1:
            return [[(0, w) for w in update] for update in mine]
        parts: list[list[list[np.ndarray]]] = ([[] for _ in range(self.spec.world)]
                                               if self.rank == 0 else [])
        dist.gather_object(mine, parts if self.rank == 0 else None, dst=0, group=self.group)
        if self.rank != 0:
            return None
        return [[(r, w) for r, p in enumerate(parts) if k < len(p) for w in p[k]]
                for k in range(max(len(p) for p in parts))]

    def _optimizer_step(self, parts: Parts, update: int, progress: LoopPosition) -> bool:
        """``optimizer.step()``, the LR recorded just before it; True when the GradScaler
        skipped it."""
        self.recording.before_step(parts.optimizer, progress.scheduler_steps)
        if update in self.spec.inject_overflow:
            grad = next(parts.net.parameters()).grad
            if grad is not None:
                grad.fill_(float("inf"))  # what an fp16 overflow leaves
        skipped = optimizer_step(parts.optimizer, parts.scaler)
        parts.optimizer.zero_grad(set_to_none=True)
        return skipped

    def _step_scheduler(self, parts: Parts, update: int, progress: LoopPosition) -> bool:
        """``scheduler.step()``, counted; False when it raised (the recording says why)."""
        if not self.recording.step_scheduler(parts.scheduler, update):
            return False
        progress.scheduler_steps += 1
        return True

    def _record(self, batch: GlobalBatch, window: OpenWindow, skipped: bool,
                progress: LoopPosition) -> None:
        """The update is done: its loss over all ranks, recorded; the next one comes."""
        if self.spec.world > 1:
            dist.all_reduce(window.loss_sum, group=self.group)
        progress.samples_seen += len(batch.indices)
        self.weights.append(self.window_weights)
        if skipped:
            self.recording.skipped_step(batch.update,
                                        progress.scheduler_steps - window.steps_before)
        self.recording.update(batch.update, window.loss_sum, progress.samples_seen, batch.epoch)
        progress.update, progress.window = batch.update + 1, None
