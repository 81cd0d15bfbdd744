"""``LrcheckCallback`` for one's own Ludwig run (``LudwigModel(config, callbacks=[...])``): a
Recorder line per optimizer update (step, samples_seen, the LR every param group used, the
update's loss as a mean over its samples, and every ``every``-th update a parameter
fingerprint) for ``lrcheck diff``. ``lrcheck compare --framework ludwig`` records through this
same callback, into its ``Recording`` (``sink``) instead of a file.

How it reads Ludwig (0.11, ``ludwig/trainers/trainer.py`` ``Trainer._train_loop``): Ludwig calls
``on_batch_start``, then feeds one micro-batch through ``train_step`` (forward, the loss divided
by ``gradient_accumulation_steps``, backward, and ``optimizer.step()`` when the micro-batch ends
a window), then ``scheduler.step()`` — on every micro-batch — then
``on_batch_end(..., sync_step)``.

- the LR: read from ``trainer.optimizer.param_groups`` in ``on_batch_start``. Nothing changes it
  before that micro-batch's ``optimizer.step()``, so the read of the micro-batch that steps is
  the LR its update used (Ludwig's own ``progress_tracker.learning_rate``, set just before the
  hook, is the same value for the first group);
- the end of an update: ``on_batch_end`` with ``sync_step`` true, which Ludwig passes exactly
  when the micro-batch stepped the optimizer (``should_step``: a full window, or the epoch's
  last micro-batch, where Ludwig checkpoints);
- the loss: Ludwig's callbacks never see it, so ``trainer.model.train_loss`` is wrapped for the
  run. What it returns is the micro-batch's mean loss (plus any regularisation), before Ludwig
  divides it by the accumulation steps: the tensor whose weight in the gradient the ``Tap``
  measures;
- the samples: the sample ids are the rows of Ludwig's processed training set that its batcher
  fetched for the micro-batch (``training_set.get`` is wrapped in ``on_preprocess_end``; a
  training set passed already processed has no ids recorded). The scheduler steps so far are
  ``trainer.scheduler._train_scheduler.last_epoch``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from ludwig.callbacks import Callback

from lrcheck.integrations.core import CallbackBase, Sink

if TYPE_CHECKING:
    from lrcheck.integrations.ludwig_types import Dataset, Model, ProgressTracker, Trainer


class LrcheckCallback(CallbackBase, Callback):  # type: ignore[misc]  # Ludwig has no types
    """Records a Ludwig run update by update into ``path`` (a Recorder file; ``append`` adds to
    it). ``every``: a parameter fingerprint every N updates. ``sink``: where updates go instead
    of a file (``lrcheck compare --framework ludwig``). One callback per ``train()`` call."""

    def __init__(self, path: str | Path | None = None, every: int = 1, append: bool = False,
                 sink: Sink | None = None) -> None:
        super().__init__(path, every, append, sink)
        self._ids: np.ndarray | None = None
        self._model: Model | None = None

    def on_preprocess_end(self, training_set: Dataset, validation_set: object,
                          test_set: object, training_set_metadata: object) -> None:
        get = training_set.get

        def fetch(proc_column: str, idx: object = None) -> object:
            if idx is not None:  # the batcher's rows for the next micro-batch
                self._ids = np.asarray(idx, dtype=np.int64)
            return get(proc_column, idx)

        training_set.get = fetch

    def on_trainer_train_setup(self, trainer: Trainer, save_path: str,
                               is_coordinator: bool) -> None:
        model = self._model = trainer.model
        tap = self.open_tap(model.parameters,
                            (trainer.distributed.size(), trainer.distributed.rank()),
                            trainer.device)
        train_loss = model.train_loss

        def measured(targets: dict[str, torch.Tensor], *args: object,
                     **kwargs: object) -> tuple[torch.Tensor, object]:
            loss, per_feature = train_loss(targets, *args, **kwargs)
            samples = len(next(iter(targets.values())))
            ids = self._ids if self._ids is not None and len(self._ids) == samples else None
            tap.micro_batch(loss, samples, samples, ids)
            return loss, per_feature

        model.train_loss = measured

    def on_batch_start(self, trainer: Trainer, progress_tracker: ProgressTracker,
                       save_path: str) -> None:
        if self.tap is not None:
            scheduler = getattr(trainer.scheduler, "_train_scheduler", None)
            self.tap.before_step(trainer.optimizer, getattr(scheduler, "last_epoch", None))

    def on_batch_end(self, trainer: Trainer, progress_tracker: ProgressTracker, save_path: str,
                     sync_step: bool = True) -> None:
        if self.tap is not None and sync_step:
            self.tap.end_update(epoch=progress_tracker.epoch)

    def on_trainer_train_teardown(self, trainer: Trainer, progress_tracker: ProgressTracker,
                                  save_path: str, is_coordinator: bool) -> None:
        # Ludwig calls this from a ``finally``: after an exception too.
        if self._model is not None:
            self._model.__dict__.pop("train_loss", None)  # the class's own again
            self._model = None
        self.tap = None
        self.close_sink()
