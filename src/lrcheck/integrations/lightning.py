"""``LrcheckCallback`` for one's own PyTorch Lightning run: a Recorder line per optimizer update
(step, samples_seen, the LR every param group used, the update's loss as a mean over its items
over every rank, and every ``every``-th update a parameter fingerprint) for ``lrcheck diff``.
``lrcheck compare --framework lightning`` records through this same callback, into its
``Recording`` (``sink``) instead of a file.

How it reads Lightning (2.x):

- the micro-batch: ``training_step`` is wrapped on the module for the run, so the loss it returns
  — the micro-batch's mean, before Lightning divides it by ``accumulate_grad_batches``
  (``loops/optimization/automatic.py``, ``ClosureResult.from_training_step_output``) — is the
  tensor whose weight in the gradient the ``Tap`` measures, whatever Lightning then does to it;
  its items are ``batch["labels"] != -100`` where the batch has labels, its samples the length
  of the batch's first tensor, its sample ids ``batch["ids"]`` where present;
- the LR: ``on_before_optimizer_step``, which Lightning calls after the closure's backward and
  before ``optimizer.step()`` (``plugins/precision/precision.py`` ``_after_closure``), only on
  the micro-batches that step;
- the end of an update: ``on_train_batch_end`` of a batch that stepped.

Lightning's ``outputs["loss"]`` in ``on_train_batch_end`` is already divided by
``accumulate_grad_batches``; the callback does not use it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from lightning.pytorch import Callback

from lrcheck.experiments.tasks import IGNORE_INDEX
from lrcheck.integrations.core import CallbackBase, Sink

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from lightning.pytorch.utilities.types import STEP_OUTPUT


def batch_counts(batch: object) -> tuple[int | torch.Tensor, int, torch.Tensor | None]:
    """(loss items, samples, sample ids) of a micro-batch: a dict with ``labels`` counts the
    labels that are not ``-100``; otherwise every sample is one item. Samples: the length of
    the first tensor found."""
    labels = batch.get("labels") if isinstance(batch, dict) else None
    ids = batch.get("ids") if isinstance(batch, dict) else None
    first = _first_tensor(batch)
    samples = 0 if first is None else (len(first) if first.dim() else 1)
    if isinstance(labels, torch.Tensor):
        return (labels != IGNORE_INDEX).sum(), samples, ids
    return samples, samples, ids if isinstance(ids, torch.Tensor) else None


def _first_tensor(batch: object) -> torch.Tensor | None:
    if isinstance(batch, torch.Tensor):
        return batch
    values: Iterable[object] = batch.values() if isinstance(batch, dict) else (
        batch if isinstance(batch, (list, tuple)) else ())
    for value in values:
        found = _first_tensor(value)
        if found is not None:
            return found
    return None


def _mean_loss(output: object) -> torch.Tensor | None:
    """The loss ``training_step`` returned (a tensor, or a dict's ``loss``)."""
    if isinstance(output, dict):
        output = output.get("loss")
    return output if isinstance(output, torch.Tensor) else None


class LrcheckCallback(CallbackBase, Callback):
    """Records a Lightning run update by update, on every rank, rank 0 writing ``path`` (a
    Recorder file; ``append`` adds to it). ``every``: a parameter fingerprint every N updates.
    ``sink``: where updates go instead of a file (``lrcheck compare --framework lightning``).

    ``training_step`` is expected to return the micro-batch's mean loss over its items."""

    def __init__(self, path: str | Path | None = None, every: int = 1, append: bool = False,
                 sink: Sink | None = None) -> None:
        super().__init__(path, every, append, sink)
        self._stepped = False
        self._first_step = 0

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        # The trainer's processes, not the default group's: a single-process fit inside a live
        # group (rank 0 training the reference alone under torchrun) reduces nothing. The
        # device is known at the start of training.
        tap = self.open_tap(pl_module.parameters, (trainer.world_size, trainer.global_rank),
                            None)
        step: Callable[..., STEP_OUTPUT] = pl_module.training_step

        def training_step(batch: object, *args: object, **kwargs: object) -> STEP_OUTPUT:
            output = step(batch, *args, **kwargs)
            items, samples, ids = batch_counts(batch)
            tap.micro_batch(_mean_loss(output), items, samples, ids)
            return output

        # On the instance, for this run (``_finish`` takes it off). setattr: the plain assignment
        # reads to mypy as assigning to a method.
        setattr(pl_module, "training_step", training_step)  # noqa: B010

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.tap is not None:
            self.tap.device = pl_module.device
        self._first_step = _scheduler_steps(trainer) or 0

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                                 optimizer: torch.optim.Optimizer) -> None:
        if self.tap is None:
            return
        steps = _scheduler_steps(trainer)
        self.tap.before_step(optimizer, None if steps is None else steps - self._first_step)
        self._stepped = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           outputs: STEP_OUTPUT, batch: object, batch_idx: int) -> None:
        if self.tap is None or not self._stepped:
            return
        self._stepped = False
        self.tap.end_update(epoch=trainer.current_epoch)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._finish(pl_module)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                     exception: BaseException) -> None:
        self._finish(pl_module)  # Lightning calls no teardown hook after an exception

    def _finish(self, pl_module: pl.LightningModule) -> None:
        pl_module.__dict__.pop("training_step", None)  # the class's own again
        self._stepped = False
        self.close_sink()


def _scheduler_steps(trainer: pl.Trainer) -> int | None:
    """How many times the first LR scheduler has stepped (None: no scheduler)."""
    configs = trainer.lr_scheduler_configs
    if not configs:
        return None
    return int(getattr(configs[0].scheduler, "last_epoch", 0))
