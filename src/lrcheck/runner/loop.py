"""The training loop: one run of a ``RunSpec``, recorded update by update.

It reads like the textbook loop it checks. The only additions are the recording (LR read just
before ``optimizer.step()``, losses kept on the device until the update ends) and the loss
normalisation that makes the gradient the mean over the whole effective batch.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lrcheck.experiments.schedulers import make_scheduler
from lrcheck.experiments.tasks import IGNORE_INDEX, TASKS, Dataset
from lrcheck.runner.order import global_batches, micro_batches, rank_share
from lrcheck.runner.policies import POLICIES
from lrcheck.runner.steps import plan_steps, schedule_context, step_failure
from lrcheck.spec import RunSpec
from lrcheck.trace import EpochMetrics, RunTrace, UpdateRecord

# Called after every update with its record and the planned number of updates.
OnUpdate = Callable[[UpdateRecord, int], None]

MOMENTUM = 0.9
WEIGHT_DECAY = {"sgd": 0.0, "adamw": 0.01}
# Layers whose output for a sample depends on the other samples in its forward, or on an RNG.
BATCH_DEPENDENT = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.dropout._DropoutNd)


def make_optimizer(spec: RunSpec, model: torch.nn.Module) -> torch.optim.Optimizer:
    """Two param groups, as real recipes have: weights (with weight decay) and the rest."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    rest = [p for p in model.parameters() if p.ndim <= 1]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY[spec.optimizer]},
              {"params": rest, "weight_decay": 0.0}]
    if spec.optimizer == "adamw":
        return torch.optim.AdamW(groups, lr=spec.lr)
    return torch.optim.SGD(groups, lr=spec.lr, momentum=MOMENTUM)


def as_input(array: np.ndarray, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Features in the run's dtype; integer token ids stay integers."""
    if np.issubdtype(array.dtype, np.integer):
        return torch.as_tensor(array, device=device)
    return torch.as_tensor(array, dtype=dtype, device=device)


def item_losses(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per loss item: per sample, or per token (padding positions give 0)."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                           reduction="none", ignore_index=IGNORE_INDEX)


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: np.ndarray) -> tuple[float, float]:
    """Accuracy and macro-F1 on the test split, over samples or over (non-padding) tokens."""
    from sklearn.metrics import accuracy_score, f1_score

    model.eval()
    with torch.no_grad():
        pred = model(x).argmax(dim=-1).cpu().numpy()
    model.train()
    keep = y != IGNORE_INDEX
    y, pred = y[keep], pred[keep]
    return float(accuracy_score(y, pred)), float(f1_score(y, pred, average="macro"))


def batch_dependent_layers(net: torch.nn.Module) -> tuple[str, ...]:
    """The names of ``net``'s layer types that make it not comparable across batch splits."""
    return tuple(sorted({type(m).__name__ for m in net.modules()
                         if isinstance(m, BATCH_DEPENDENT)}))


def micro_batch_loss(per_item: torch.Tensor, n_local: torch.Tensor, spec: RunSpec,
                     n_global: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss to backpropagate for one micro-batch of this rank, and its (detached) share of
    the update's training loss (summed over micro-batches, then over ranks). ``n_local`` and
    ``n_global``: loss items (samples or tokens) in this rank's micro-batch and in the whole
    effective batch."""
    if spec.loss_norm == "global":
        # Sum over the micro-batch, divided by the items of the global batch: the gradient is
        # then the mean over the whole effective batch. x world undoes DDP's average.
        return per_item.sum() * (spec.world / n_global), per_item.detach().sum() / n_global
    # The common per-micro-batch mean divided by accum.
    loss = per_item.sum() / n_local.clamp(min=1) / spec.accum
    return loss, loss.detach() / spec.world


# A low initial scale, so that only the injected overflows make the GradScaler skip a step (at
# GradScaler's default of 2**16 this model's first fp16 gradients overflow by themselves).
AMP_INIT_SCALE = 2.0 ** 8


def make_scaler(spec: RunSpec, device: str) -> torch.amp.GradScaler | None:
    """The GradScaler of ``--amp fp16``, or None."""
    if spec.amp != "fp16":
        return None
    return torch.amp.GradScaler(device, init_scale=AMP_INIT_SCALE)


def amp_autocast(spec: RunSpec, device: str) -> Any:
    """float16 autocast for ``--amp fp16``, else a context that does nothing."""
    if spec.amp != "fp16":
        return contextlib.nullcontext()
    return torch.autocast(device, dtype=torch.float16)


def optimizer_step(optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None) -> bool:
    """``optimizer.step()``, through the scaler when there is one; True when the scaler skipped
    the step because the gradients were not finite (its scale then drops)."""
    if scaler is None:
        optimizer.step()
        return False
    before = scaler.get_scale()
    scaler.step(optimizer)
    scaler.update()
    return scaler.get_scale() < before


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          group: dist.ProcessGroup | None = None, on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """Train ``spec`` on ``data`` as rank ``rank`` of ``spec.world`` and return what every
    update used. When ``world > 1`` the caller has set up the process group; ``group`` (default:
    the default group) is the one DDP and the loss all-reduce use. ``on_start`` is called once
    everything is built (DDP's constructor waits for every rank), just before the first
    micro-batch."""
    started = time.perf_counter()
    world, policy = spec.world, POLICIES[spec.policy]
    dtype = getattr(torch, spec.dtype)
    x_train = as_input(data.x_train, dtype, device)
    y_train = torch.as_tensor(data.y_train, device=device)
    x_test = as_input(data.x_test, dtype, device)
    # Loss items per training sample: 1, or its number of (non-padding) tokens.
    items = (data.y_train != IGNORE_INDEX).reshape(len(data.y_train), -1).sum(axis=1)
    items_on_device = torch.as_tensor(items, dtype=dtype, device=device)

    torch.manual_seed(spec.seed)
    net = TASKS[spec.task].build_model(data).to(device, dtype)
    not_comparable = batch_dependent_layers(net)
    model: torch.nn.Module = net
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(net, process_group=group)
    optimizer = make_optimizer(spec, net)
    scaler = make_scaler(spec, device)
    autocast = amp_autocast(spec, device)

    plan = plan_steps(len(data.y_train), spec.bs, spec.accum, world, spec.epochs, spec.tail)
    ctx = schedule_context(plan, spec.policy, spec.warmup)
    scheduler = make_scheduler(spec.scheduler, optimizer, ctx)

    params = list(net.parameters())
    snapshots = torch.empty(plan.total_updates, sum(p.numel() for p in params), dtype=dtype,
                            device=device)
    updates: list[UpdateRecord] = []
    epochs: list[EpochMetrics] = []
    samples_seen = scheduler_steps = 0
    stopped: str | None = None
    skipped_updates: list[dict[str, int]] = []

    if on_start is not None:
        on_start()
    model.train()
    for batch in global_batches(plan.num_samples, plan.effective_batch, spec.epochs, spec.seed,
                                spec.tail):
        # One host-to-device copy per update; micro-batches and rank shares are views of it, so
        # a micro-batch never waits for the host.
        indices = torch.from_numpy(batch.indices).to(device)
        micro = micro_batches(indices, spec.bs, world)
        # Loss items behind the whole update, over all ranks. Every rank holds the data set and
        # the global batch, so this equals the all-reduce of the ranks' counts without one.
        n_global = int(items[batch.indices].sum())
        loss_sum = torch.zeros((), dtype=dtype, device=device)
        stepped = skipped = False
        steps_before = scheduler_steps
        for m, shared in enumerate(micro):
            last = m == len(micro) - 1
            idx = rank_share(shared, rank, world)
            # DDP all-reduces gradients only on the last micro-batch of an update.
            sync = contextlib.nullcontext() if last or world == 1 else model.no_sync()
            with sync:
                with autocast:
                    per_item = item_losses(model, x_train[idx], y_train[idx])
                loss, share = micro_batch_loss(per_item.to(dtype), items_on_device[idx].sum(),
                                               spec, n_global)
                loss_sum += share
                (loss if scaler is None else scaler.scale(loss)).backward()
            if last:
                lr = tuple(float(g["lr"]) for g in optimizer.param_groups)
                steps_at_read = scheduler_steps
                if batch.update in spec.inject_overflow:
                    params[0].grad.fill_(float("inf"))  # what an fp16 overflow leaves behind
                skipped = optimizer_step(optimizer, scaler)
                optimizer.zero_grad(set_to_none=True)
                stepped = True
            # per-update: after each optimizer step that was not skipped; the micro-batch
            # policies step on every micro-batch, skipped or not.
            if (last and not skipped) or policy.steps_every_micro_batch:
                try:
                    scheduler.step()
                except Exception as exc:  # a schedule that refuses to step is a finding
                    stopped = step_failure(exc, batch.update)
                    break
                scheduler_steps += 1
        if not stepped:  # the schedule stopped the run inside an accumulation window
            break
        if world > 1:
            dist.all_reduce(loss_sum, group=group)
        samples_seen += n_global
        if skipped:
            skipped_updates.append({"update": batch.update,
                                    "scheduler_steps": scheduler_steps - steps_before})
        record = UpdateRecord(batch.update, lr, float(loss_sum), samples_seen, steps_at_read,
                              batch.epoch)
        updates.append(record)
        snapshots[batch.update].copy_(torch.cat([p.detach().reshape(-1) for p in params]))
        if on_update is not None:
            on_update(record, plan.total_updates)
        if batch.ends_epoch or stopped:
            acc, f1 = evaluate(net, x_test, data.y_test)
            epochs.append(EpochMetrics(batch.epoch, batch.update, acc, f1))
        if stopped:
            break

    return RunTrace(
        spec=spec, updates=updates, epochs=epochs,
        params=snapshots[:len(updates)].cpu().numpy(), planned_updates=plan.total_updates,
        context=ctx.to_dict(), not_comparable=not_comparable, stopped=stopped,
        seconds=time.perf_counter() - started,
        extra={"skipped": skipped_updates} if scaler is not None else {},
    )


def environment(device: str, world: int) -> dict[str, Any]:
    """What the report states about where it ran."""
    import platform

    import lrcheck

    return {"lrcheck": lrcheck.__version__, "torch": torch.__version__, "device": device,
            "world_size": world, "python": platform.python_version(),
            "platform": platform.platform(), "threads": torch.get_num_threads()}
