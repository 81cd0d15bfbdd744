"""``--framework lightning``: a run trained through the real ``lightning.pytorch.Trainer.fit``.

A ``LightningModule`` around the task's seeded model: ``training_step`` returns the micro-batch's
mean loss over its items, ``configure_optimizers`` lrcheck's optimizer and schedule, the schedule
sized the way Lightning's documentation sizes it (``self.trainer.estimated_stepping_batches``,
``interval="step"``). The Trainer runs with ``accumulate_grad_batches=accum``, ``devices=world``
(DDP on the process group lrcheck's torchrun worker made) and decides the rest: how it scales
each micro-batch's loss, when it steps the optimizer and the schedule, the epoch's last partial
window, ``drop_last``, and — with ``--lightning-sampler distributed``, its default — how its
``DistributedSampler`` shards and pads the data.

lrcheck's order wins over the sampler Lightning puts in. Under DDP with
``use_distributed_sampler=True`` (its default) Lightning replaces a training loader's sampler
with a ``DistributedSampler`` — its ``DistributedSamplerWrapper`` around a custom sampler — and
always with ``shuffle=True`` for training (``trainer/connectors/data_connector.py``,
``_process_dataloader``), which reshuffles any order. It leaves a loader alone whose sampler
already is a ``DistributedSampler`` (``_requires_distributed_sampler``), so lrcheck hands it that
same wrapper with Lightning's own arguments but ``shuffle=False``: rank ``r`` gets every
``world``-th sample of lrcheck's global batches in sequence, exactly lrcheck's share of each
micro-batch, and Lightning's padding of uneven ranks (the epoch's first samples again) stays.
With ``--lightning-sampler own`` (``use_distributed_sampler=False``) every rank's loader gets
its own share directly.

The run is recorded through ``integrations.lightning.LrcheckCallback`` — the callback users add
to their own Trainer — into the ``Recording`` (``common.RecordingSink``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from lrcheck.errors import RunError
from lrcheck.experiments.schedulers import make_scheduler
from lrcheck.experiments.tasks import IGNORE_INDEX, Dataset
from lrcheck.plan.order import GlobalBatch
from lrcheck.plan.steps import ScheduleContext
from lrcheck.runner.build import build
from lrcheck.runner.frameworks.common import FrameworkRun, PlannedOrder, framework_process
from lrcheck.runner.loss import item_losses
from lrcheck.runner.recording import Recording

if TYPE_CHECKING:
    from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, RunTrace

PRECISION = {"float64": "64-true", "float32": "32-true"}

# Lightning's notes that say nothing about the run: its console lines go through these loggers,
# and these warnings are about speed or about choices lrcheck made on purpose.
LOGGERS = ("lightning.pytorch", "lightning.fabric")
NOISE: tuple[tuple[str, type[Warning]], ...] = (
    # a PossibleUserWarning (a UserWarning): lrcheck's tiny batches need no loader workers
    (r".*does not have many workers.*", UserWarning),
    (r".*GPU available but not used.*", UserWarning),
    # torch's deprecation of the pytree LeafSpec that Lightning's data fetching still uses
    (r".*isinstance\(treespec, LeafSpec\)` is deprecated.*", FutureWarning))


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """``plain.train``'s contract, trained through ``lightning.pytorch.Trainer.fit``. With
    ``spec.world`` > 1 the Trainer's DDP uses the default process group the caller made
    (Lightning skips its own ``init_process_group`` when one exists); a single-process run does
    not see torchrun's environment."""
    with framework_process(spec), quiet(), keeps_ctrl_c():
        return _train(spec, data, device, rank, on_update, on_start)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Lightning's console lines and its noise warnings off for the block."""
    loggers = [logging.getLogger(name) for name in LOGGERS]
    levels = [lg.level for lg in loggers]
    with warnings.catch_warnings():
        for message, category in NOISE:
            warnings.filterwarnings("ignore", message=message, category=category)
        for lg in loggers:
            lg.setLevel(logging.WARNING)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels, strict=True):
                lg.setLevel(level)


@contextlib.contextmanager
def keeps_ctrl_c() -> Iterator[None]:
    """Lightning answers Ctrl-C by ignoring SIGINT from then on and calling ``sys.exit(1)``
    (``trainer/call.py``, ``_call_and_handle_interrupt``); a callback re-raises the
    ``KeyboardInterrupt`` first (``on_exception``), and the handler is restored here."""
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if main else None
    try:
        yield
    finally:
        if main and handler is not None:
            signal.signal(signal.SIGINT, handler)


def _train(spec: RunSpec, data: Dataset, device: str, rank: int,
           on_update: OnUpdate | None, on_start: Callable[[], None] | None) -> RunTrace:
    import lightning.pytorch as pl

    from lrcheck.integrations.lightning import LrcheckCallback
    from lrcheck.runner.frameworks.common import RecordingSink

    # Its schedule context is replaced by the Lightning-sized one in configure_optimizers.
    run = FrameworkRun.start(spec, data, device=device, on_update=on_update)
    cuda = device.startswith("cuda")
    parts = build(spec, data, None, None)  # Lightning places the model itself
    callback = LrcheckCallback(sink=RecordingSink(run.recording))
    module_class, raises_ctrl_c = _classes()
    module = module_class(spec, parts.net, parts.optimizer, run.recording, on_start)
    own = spec.lightning_sampler == "own"
    if own and spec.world > 1:
        _same_batch_counts(spec, run.batches)
    sampler: torch.utils.data.Sampler[int] = run.order(
        dealt=False, rank=rank if own and spec.world > 1 else None)
    if spec.world > 1 and not own:
        sampler = _distributed(sampler, spec.world, rank)
    loader = torch.utils.data.DataLoader(run.dataset(), batch_size=spec.bs,
                                         sampler=sampler, drop_last=spec.drop_last)
    index = torch.device(device).index
    trainer = pl.Trainer(
        accelerator="cuda" if cuda else "cpu",
        devices=spec.world if spec.world > 1 or not cuda else [index or 0],
        num_nodes=1, strategy="ddp" if spec.world > 1 else "auto",
        precision=PRECISION[spec.dtype],  # type: ignore[arg-type]
        accumulate_grad_batches=spec.accum, max_epochs=spec.epochs,
        use_distributed_sampler=not own, callbacks=[callback, raises_ctrl_c()], logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        num_sanity_val_steps=0, gradient_clip_val=None)
    run.check_processes("Lightning", trainer.world_size, trainer.global_rank, rank)
    trainer.fit(module, train_dataloaders=loader)
    return run.finish(callback.tap)


def _distributed(order: torch.utils.data.Sampler[int], world: int,
                 rank: int) -> torch.utils.data.Sampler[int]:
    """The sampler Lightning puts into a training loader under DDP (``use_distributed_sampler``,
    its default): its ``DistributedSamplerWrapper`` around lrcheck's order, with Lightning's
    kwargs (``num_replicas``, ``rank``; ``drop_last=False``, so uneven ranks are padded with the
    epoch's first samples) — but ``shuffle=False``. Lightning itself would pass
    ``shuffle=True`` for every training loader, reshuffling any sampler's order; it leaves a
    loader whose sampler is a ``DistributedSampler`` as it is."""
    from lightning.fabric.utilities.distributed import DistributedSamplerWrapper

    wrapped: torch.utils.data.Sampler[int] = DistributedSamplerWrapper(
        order, num_replicas=world, rank=rank, shuffle=False)
    return wrapped


def _same_batch_counts(spec: RunSpec, batches: list[GlobalBatch]) -> None:
    """With every rank's own loader, an epoch where the ranks' loaders have different lengths
    would leave one rank waiting in DDP's all-reduce for ever: refused before training."""
    per_rank = [PlannedOrder(batches, spec.bs, spec.world, spec.epochs, dealt=False,
                             rank=r).lengths for r in range(spec.world)]
    for epoch, lengths in enumerate(zip(*per_rank, strict=True)):
        counts = [n // spec.bs if spec.drop_last else math.ceil(n / spec.bs) for n in lengths]
        if len(set(counts)) > 1:
            raise RunError(
                f"--lightning-sampler own: in epoch {epoch} the ranks' loaders hold "
                f"{', '.join(map(str, lengths))} samples, {', '.join(map(str, counts))} "
                f"micro-batches of {spec.bs}; DDP would wait for ever on the rank with fewer "
                "(Lightning's DistributedSampler pads the ranks to the same length; "
                "--lightning-sampler distributed, or --drop-last)")


_CLASSES: tuple[Any, Any] | None = None


def _classes() -> tuple[Any, Any]:
    """The LightningModule lrcheck trains, and a callback that lets Ctrl-C through (made
    once)."""
    global _CLASSES
    if _CLASSES is not None:
        return _CLASSES
    import lightning.pytorch as pl

    class LrcheckModule(pl.LightningModule):
        def __init__(self, spec: RunSpec, net: torch.nn.Module,
                     optimizer: torch.optim.Optimizer, recording: Recording,
                     on_start: Callable[[], None] | None) -> None:
            super().__init__()
            self.net = net
            self.spec, self.recording, self.on_start = spec, recording, on_start
            self._optimizer = optimizer

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            """The micro-batch's mean loss over its items; Lightning divides it by
            ``accumulate_grad_batches`` itself."""
            labels = batch["labels"]
            per_item = item_losses(self.net, batch["x"], labels)
            return per_item.sum() / (labels != IGNORE_INDEX).sum().clamp(min=1)

        def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
            """lrcheck's optimizer, and its schedule sized in Lightning's stepping batches."""
            total = int(self.trainer.estimated_stepping_batches)
            ctx: ScheduleContext = self.recording.ctx
            per_epoch = int(self.trainer.num_training_batches)
            ctx = replace(ctx, micro_batches_per_epoch=per_epoch,
                          updates_per_epoch=math.ceil(per_epoch / self.spec.accum),
                          total_updates=total, total_steps=total,
                          warmup_steps=round(self.spec.warmup * total))
            self.recording.ctx = ctx
            scheduler = make_scheduler(self.spec.scheduler, self._optimizer, ctx)
            return {"optimizer": self._optimizer,
                    "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

        def lr_scheduler_step(self, scheduler: Any, metric: object) -> None:
            # A schedule that refuses to step ends the run there: a finding, not a crash.
            if not self.recording.step_scheduler(scheduler, len(self.recording.updates)):
                self.trainer.should_stop = True

        def on_train_start(self) -> None:
            self.recording.attach(self.net)  # where Lightning placed it
            if self.on_start is not None:
                self.on_start()

        def on_train_epoch_end(self) -> None:
            self.recording.end_epoch(self.net, self.current_epoch,
                                     len(self.recording.updates) - 1)

    class RaisesCtrlC(pl.Callback):
        def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                         exception: BaseException) -> None:
            if isinstance(exception, KeyboardInterrupt):
                raise exception  # not Lightning's sys.exit(1): lrcheck reports the stop

    _CLASSES = LrcheckModule, RaisesCtrlC
    return _CLASSES
