"""The training loop: one run of a ``RunSpec``, recorded update by update.

It reads like the textbook loop it checks. The only additions are the recording (LR read just
before ``optimizer.step()``, losses kept on the device until the update ends) and the loss
normalisation that makes the gradient the mean over the whole effective batch.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from lrcheck.errors import SpecError
from lrcheck.experiments.schedulers import check_warmup, make_scheduler
from lrcheck.experiments.tasks import IGNORE_INDEX, TASKS, Dataset
from lrcheck.runner.order import global_batches, micro_batches, rank_share
from lrcheck.runner.policies import POLICIES
from lrcheck.runner.steps import plan_steps, schedule_context, step_failure
from lrcheck.spec import RunSpec
from lrcheck.trace import EpochMetrics, OnUpdate, Resumed, RunTrace, SkippedStep, UpdateRecord
from lrcheck.words import plural

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


@dataclass
class Parts:
    """What a run trains with; a resume saves their state and builds them again from scratch."""

    net: torch.nn.Module
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    scaler: torch.amp.GradScaler | None


@dataclass
class Window:
    """The accumulation window in progress: where it is, and what it has gathered so far."""

    update: int
    micro: int | None = 0  # None: the whole update (a pause after it)
    loss_sum: torch.Tensor | None = None
    steps_before: int = 0


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          group: dist.ProcessGroup | None = None, on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """Train ``spec`` on ``data`` as rank ``rank`` of ``spec.world`` and return what every
    update used. When ``world > 1`` the caller has set up the process group; ``group`` (default:
    the default group) is the one DDP and the loss all-reduce use. ``on_start`` is called once
    everything is built (DDP's constructor waits for every rank), just before the first
    micro-batch.

    With ``--resume-at``/``--resume-at-micro`` the run stops there, saves everything a real
    checkpoint holds, builds model, optimizer, scheduler and scaler again from scratch with the
    same factories, loads the checkpoint and goes on (``runner.checkpoint``)."""
    run = _Run(spec, data, device, rank, group, on_update)
    parts = run.build()
    if on_start is not None:
        on_start()
    paused = run.loop(parts, start=None, pause=run.pause)
    if paused is not None:
        from lrcheck.runner import checkpoint

        with tempfile.TemporaryDirectory(prefix="lrcheck-resume-") as folder:
            path = checkpoint.save(Path(folder), parts, run, paused)
            del parts
            parts = run.build()
            start = checkpoint.load(path, parts, run)
            # The window in progress at the pause: update N with ``micro_batches_done`` of its
            # micro-batches trained (0: the pause came right after update N - 1).
            run.resumed = Resumed(paused.update, paused.micro, path.stat().st_size)
        run.loop(parts, start=start, pause=None)
    return run.trace()


class _Run:
    """One run's data, plan and recording; ``loop`` is the training loop itself."""

    def __init__(self, spec: RunSpec, data: Dataset, device: str, rank: int,
                 group: dist.ProcessGroup | None, on_update: OnUpdate | None) -> None:
        self.started = time.perf_counter()
        self.spec, self.data, self.device, self.rank, self.group = spec, data, device, rank, group
        self.on_update = on_update
        self.dtype = getattr(torch, spec.dtype)
        self.x_train = as_input(data.x_train, self.dtype, device)
        self.y_train = torch.as_tensor(data.y_train, device=device)
        self.x_test = as_input(data.x_test, self.dtype, device)
        self.items = data.items_per_sample()
        self.items_on_device = torch.as_tensor(self.items, dtype=self.dtype, device=device)
        self.plan = plan_steps(len(data.y_train), spec.bs, spec.accum, spec.world, spec.epochs,
                               spec.tail)
        self.ctx = schedule_context(self.plan, spec.policy, spec.warmup)
        self.pause = resume_point(spec, self.plan)
        self.updates: list[UpdateRecord] = []
        self.epochs: list[EpochMetrics] = []
        self.skipped: list[SkippedStep] = []
        self.samples_seen = self.scheduler_steps = 0
        self.stopped: str | None = None
        self.snapshots: torch.Tensor | None = None
        self.not_comparable: tuple[str, ...] = ()
        self.amp = spec.amp == "fp16"
        self.resumed: Resumed | None = None

    def build(self) -> Parts:
        """Model, optimizer, scheduler and scaler, from scratch (the same weights every time:
        the generator is seeded first)."""
        spec = self.spec
        torch.manual_seed(spec.seed)
        net = TASKS[spec.task].build_model(self.data).to(self.device, self.dtype)
        self.not_comparable = batch_dependent_layers(net)
        model: torch.nn.Module = net
        if spec.world > 1:
            model = torch.nn.parallel.DistributedDataParallel(net, process_group=self.group)
        optimizer = make_optimizer(spec, net)
        scheduler = make_scheduler(spec.scheduler, optimizer, self.ctx)
        if self.snapshots is None:
            size = sum(p.numel() for p in net.parameters())
            self.snapshots = torch.empty(self.plan.total_updates, size, dtype=self.dtype,
                                         device=self.device)
            # Its rows as views, made once: indexing the tensor at every update costs ~10 µs.
            self.rows = self.snapshots.unbind(0)
        return Parts(net, model, optimizer, scheduler, make_scaler(spec, self.device))

    def loop(self, parts: Parts, *, start: Window | None, pause: Window | None) -> Window | None:
        """Train from ``start`` (the beginning when None) to the end, or until ``pause``: then
        return the window in progress there."""
        spec, world, rank = self.spec, self.spec.world, self.rank
        policy = POLICIES[spec.policy]
        net, model, optimizer, scheduler, scaler = (parts.net, parts.model, parts.optimizer,
                                                    parts.scheduler, parts.scaler)
        params = list(net.parameters())
        # Flat views of the parameters' storage, which the optimizer updates in place: a
        # snapshot is then one torch.cat into its row (view() refuses a non-contiguous one).
        flat = [p.detach().view(-1) for p in params]
        autocast = amp_autocast(spec, self.device)
        model.train()
        for batch in global_batches(self.plan.num_samples, self.plan.effective_batch,
                                    spec.epochs, spec.seed, spec.tail):
            if start is not None and batch.update < start.update:
                continue  # before the checkpoint: already trained
            # One host-to-device copy per update; micro-batches and rank shares are views of
            # it, so a micro-batch never waits for the host.
            indices = torch.from_numpy(batch.indices).to(self.device)
            micro = micro_batches(indices, spec.bs, world)
            # Loss items behind the whole update, over all ranks. Every rank holds the data set
            # and the global batch, so this equals the all-reduce of the ranks' counts.
            n_global = int(self.items[batch.indices].sum())
            window = Window(batch.update, 0, torch.zeros((), dtype=self.dtype, device=self.device),
                            self.scheduler_steps)
            if start is not None and batch.update == start.update:
                if start.loss_sum is not None:
                    window = start  # resumed inside this accumulation window
                start = None
            assert window.micro is not None and window.loss_sum is not None  # a window under way
            stepped = skipped = False
            for m, shared in enumerate(micro):
                if m < window.micro:
                    continue
                last = m == len(micro) - 1
                idx = rank_share(shared, rank, world)
                # DDP all-reduces gradients only on the last micro-batch of an update.
                sync = (contextlib.nullcontext() if last or world == 1
                        else cast(DistributedDataParallel, model).no_sync())
                with sync:
                    with autocast:
                        per_item = item_losses(model, self.x_train[idx], self.y_train[idx])
                    loss, share = micro_batch_loss(per_item.to(self.dtype),
                                                   self.items_on_device[idx].sum(), spec, n_global)
                    window.loss_sum += share
                    (loss if scaler is None else scaler.scale(loss)).backward()
                if last:
                    lr = tuple(float(g["lr"]) for g in optimizer.param_groups)
                    steps_at_read = self.scheduler_steps
                    grad = params[0].grad
                    if batch.update in spec.inject_overflow and grad is not None:
                        grad.fill_(float("inf"))  # what an fp16 overflow leaves
                    skipped = optimizer_step(optimizer, scaler)
                    optimizer.zero_grad(set_to_none=True)
                    stepped = True
                # per-update: after each optimizer step that was not skipped; the micro-batch
                # policies step on every micro-batch, skipped or not.
                if (last and not skipped) or policy.steps_every_micro_batch:
                    try:
                        scheduler.step()
                    except Exception as exc:  # a schedule that refuses to step is a finding
                        self.stopped = step_failure(exc, batch.update)
                        break
                    self.scheduler_steps += 1
                window.micro = m + 1
                if pause is not None and not last and (batch.update, m) == (pause.update,
                                                                           pause.micro):
                    return window
            if not stepped:  # the schedule stopped the run inside an accumulation window
                acc, f1 = evaluate(net, self.x_test, self.data.y_test)
                self.epochs.append(EpochMetrics(batch.epoch, batch.update - 1, acc, f1))
                break
            self._record(batch, window, lr, steps_at_read, skipped, flat)
            if batch.ends_epoch or self.stopped:
                acc, f1 = evaluate(net, self.x_test, self.data.y_test)
                self.epochs.append(EpochMetrics(batch.epoch, batch.update, acc, f1))
            if self.stopped:
                break
            if pause is not None and pause.micro is None and batch.update == pause.update:
                return Window(batch.update + 1, 0, None, self.scheduler_steps)
        return None

    def _record(self, batch: Any, window: Window, lr: tuple[float, ...], steps_at_read: int,
                skipped: bool, flat: list[torch.Tensor]) -> None:
        loss_sum = window.loss_sum
        assert loss_sum is not None  # the update just trained
        if self.spec.world > 1:
            dist.all_reduce(loss_sum, group=self.group)
        self.samples_seen += len(batch.indices)
        if skipped:
            self.skipped.append(SkippedStep(batch.update,
                                            self.scheduler_steps - window.steps_before))
        record = UpdateRecord(batch.update, lr, float(loss_sum), self.samples_seen,
                              steps_at_read, batch.epoch)
        self.updates.append(record)
        # Straight into the preallocated row: one copy of the parameters, no temporary.
        torch.cat(flat, out=self.rows[batch.update])
        if self.on_update is not None:
            self.on_update(record, self.plan.total_updates)

    def trace(self) -> RunTrace:
        assert self.snapshots is not None  # allocated by build()
        return RunTrace(
            spec=self.spec, updates=self.updates, epochs=self.epochs,
            params=self.snapshots[:len(self.updates)].cpu().numpy(),
            planned_updates=self.plan.total_updates, context=self.ctx.to_dict(),
            not_comparable=self.not_comparable, stopped=self.stopped,
            seconds=time.perf_counter() - self.started, resumed=self.resumed,
            skipped=self.skipped if self.amp else None)


def check_plan(spec: RunSpec, num_samples: int) -> None:
    """What can only be checked against the run's length, checked before anything trains: a
    training set of at least one effective batch, a warmup the schedule has room for, a resume
    point inside the run, injected overflows at updates the run makes."""
    plan = plan_steps(num_samples, spec.bs, spec.accum, spec.world, spec.epochs, spec.tail)
    check_warmup(spec.scheduler, spec.warmup,
                 lambda warmup: schedule_context(plan, spec.policy, warmup))
    resume_point(spec, plan)
    late = [k for k in spec.inject_overflow if k >= plan.total_updates]
    if late:
        raise SpecError(f"--inject-overflow {','.join(map(str, late))}: the run has "
                        f"{plural(plan.total_updates, 'update')}; give updates "
                        f"0..{plan.total_updates - 1}")


def recording_bytes(spec: RunSpec, data: Dataset) -> int:
    """What a run of ``spec`` on ``data`` keeps in memory for the ``params`` check: a snapshot of
    every parameter after every update (in ``spec.dtype``). The model is built on the meta
    device, which allocates nothing."""
    plan = plan_steps(len(data.y_train), spec.bs, spec.accum, spec.world, spec.epochs, spec.tail)
    with torch.device("meta"):
        net = TASKS[spec.task].build_model(data)
    size = sum(p.numel() for p in net.parameters())
    return plan.total_updates * size * int(getattr(torch, spec.dtype).itemsize)


def check_memory(runs: list[tuple[RunSpec, Dataset]]) -> None:
    """Bad input when the recordings of ``runs`` (each with its data), which the checks hold
    together, need more memory than the machine has left."""
    from lrcheck.runner.memory import check_fits

    check_fits(sum(recording_bytes(spec, data) for spec, data in runs),
               "recording the runs (a snapshot of every parameter after every update)",
               "lower --epochs, or --samples for a generated task")


def resume_point(spec: RunSpec, plan: Any) -> Window | None:
    """Where ``--resume-at K`` (after update K) or ``--resume-at-micro M`` (after micro-batch M
    of this rank, counted over the run) stops the run, as a window position: ``micro`` None means
    after the whole update."""
    if spec.resume_at is not None:
        if spec.resume_at >= plan.total_updates - 1:
            raise SpecError(f"--resume-at {spec.resume_at}: the run has "
                            f"{plural(plan.total_updates, 'update')}; resume after one of "
                            f"0..{plan.total_updates - 2}")
        return Window(spec.resume_at, None)
    if spec.resume_at_micro is not None:
        done = 0
        for batch in global_batches(plan.num_samples, plan.effective_batch, spec.epochs,
                                    spec.seed, spec.tail):
            count = len(micro_batches(batch.indices, spec.bs, spec.world))
            if spec.resume_at_micro < done + count:
                m = spec.resume_at_micro - done
                last = m == count - 1
                if last and batch.update >= plan.total_updates - 1:
                    break
                return Window(batch.update, None if last else m)
            done += count
        raise SpecError(f"--resume-at-micro {spec.resume_at_micro}: the run has "
                        f"{plural(plan.total_micro_batches, 'micro-batch', 'micro-batches')}; "
                        f"resume after one of 0..{plan.total_micro_batches - 2}")
    return None


def environment(device: str, world: int) -> dict[str, Any]:
    """What the report states about where it ran."""
    import platform

    import lrcheck
    from lrcheck.runner.local import CPU_THREADS

    # The threads training uses: runner.local sets them on the CPU for each run.
    threads = CPU_THREADS if device == "cpu" else torch.get_num_threads()
    return {"lrcheck": lrcheck.__version__, "torch": torch.__version__, "device": device,
            "world_size": world, "python": platform.python_version(),
            "platform": platform.platform(), "threads": threads}
