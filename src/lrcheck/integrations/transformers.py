"""``LrcheckCallback`` for one's own Transformers ``Trainer`` runs::

    from lrcheck.integrations.transformers import LrcheckCallback

    trainer = Trainer(model, args, train_dataset=..., callbacks=[LrcheckCallback("run.jsonl")])

writes a Recorder line per optimizer update (rank 0 writes; every rank takes part): step,
samples_seen, the LR every param group used (read in ``on_pre_optimizer_step``, just before
``optimizer.step()``), the update's loss as a mean over its items (labels other than -100,
summed over every rank), and every ``every``-th update a parameter fingerprint. Compare two runs
with ``lrcheck diff ref.jsonl cand.jsonl``.

The micro-batches are read by a forward hook on the model, for every forward that trains: the
loss from its output (``output["loss"]`` or ``output[0]``), the items from ``labels`` (the
labels other than -100 the loss predicts: for a causal LM, whose loss predicts token t+1 from
token t, those of ``labels[..., 1:]`` — a sequence of L labels is L-1 items — or of
``shift_labels`` when the batch carries them, as transformers' ``ForCausalLMLoss`` reads them),
the sample ids from an ``ids`` argument when the batch carries one. When the Trainer passes
``num_items_in_batch`` (a model that accepts loss kwargs), the loss is taken to be the
micro-batch's sum over the whole window's items, as transformers' own models return it.

``lrcheck compare --framework transformers`` records through this same class, into its
``Recording`` (``sink``) instead of a file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import TrainerCallback

from lrcheck.experiments.tasks import IGNORE_INDEX
from lrcheck.integrations.core import CallbackBase, Sink

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments


class LrcheckCallback(CallbackBase, TrainerCallback):
    """Records every optimizer update of the ``Trainer`` it is added to: into the Recorder file
    ``path`` (with a parameter fingerprint every ``every`` updates; ``append`` to add to an
    existing file), or into ``sink`` when given (lrcheck's own runs)."""

    def __init__(self, path: str | Path | None = None, every: int = 1, append: bool = False,
                 sink: Sink | None = None) -> None:
        super().__init__(path, every, append, sink)
        self._hook: torch.utils.hooks.RemovableHandle | None = None
        self._first_step = 0
        self._shifts = False  # the model's loss predicts labels[..., 1:] (a causal LM)

    # The Trainer's events, in the order it calls them (trainer.py, _inner_training_loop and
    # _run_epoch).

    def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                       control: TrainerControl, *, model: torch.nn.Module | None = None,
                       lr_scheduler: object = None, **kwargs: object) -> None:
        # The Trainer has set up its processes by now (a callback is often made before).
        assert model is not None  # the Trainer passes its model to every event
        self.open_tap(model.parameters, (args.world_size, args.process_index), args.device)
        self._first_step = getattr(lr_scheduler, "last_epoch", 0) or 0
        self._shifts = shifts_labels(model)
        self._hook = model.register_forward_hook(self._forward, with_kwargs=True)

    def on_pre_optimizer_step(self, args: TrainingArguments, state: TrainerState,
                              control: TrainerControl, *, lr_scheduler: object = None,
                              optimizer: torch.optim.Optimizer | None = None,
                              **kwargs: object) -> None:
        assert self.tap is not None and optimizer is not None
        last = getattr(lr_scheduler, "last_epoch", None)
        self.tap.before_step(optimizer, None if last is None else last - self._first_step)

    def on_step_end(self, args: TrainingArguments, state: TrainerState, control: TrainerControl,
                    **kwargs: object) -> None:
        assert self.tap is not None
        # state.epoch is epoch + (micro-batches done) / (micro-batches in the epoch): it reaches
        # e + 1 exactly at the last update of epoch e.
        epoch = max(math.ceil(state.epoch) - 1, 0) if state.epoch is not None else None
        self.tap.end_update(epoch)

    def on_train_end(self, args: TrainingArguments, state: TrainerState,
                     control: TrainerControl, **kwargs: object) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self.close_sink()

    def _forward(self, module: torch.nn.Module, args: tuple[object, ...],
                 kwargs: dict[str, Any], output: object) -> None:
        """Every forward that trains is a micro-batch of the update in progress."""
        if not (module.training and torch.is_grad_enabled()) or self.tap is None:
            return
        loss = _loss_of(output)
        labels = kwargs.get("labels")
        if isinstance(labels, torch.Tensor):
            items: int | torch.Tensor = _loss_items(labels, kwargs.get("shift_labels"),
                                                    self._shifts)
            samples = int(labels.shape[0]) if labels.ndim else 1
        else:
            samples = _batch_size(args, kwargs)
            items = samples
        scale = 1.0
        window_items = kwargs.get("num_items_in_batch")
        if loss is not None and window_items is not None:
            # The model returned its sum over the window's items (over every rank): the mean
            # over its own items, times items / window items.
            scale = float(items) / float(window_items)
        self.tap.micro_batch(loss, items, samples, kwargs.get("ids"), scale=scale)


def shifts_labels(model: object) -> bool:
    """Whether ``model``'s loss predicts token t+1 from token t, so that its items are the labels
    of ``labels[..., 1:]``: a decoder-only causal LM. Either of the Trainer's own two tests says
    so — the loss function its ``loss_type`` maps to is ``ForCausalLMLoss`` (``Trainer.__init__``),
    or its class is a causal LM of the auto mapping (``Trainer.compute_loss``) — since some
    causal LMs pass only one: ``GPT2LMHeadModel``'s ``loss_type`` is None (its class name holds
    no loss type) and its forward falls back to ``ForCausalLMLoss``. An encoder-decoder's labels
    are its decoder's targets, unshifted."""
    from transformers.loss.loss_utils import LOSS_MAPPING, ForCausalLMLoss
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    base = getattr(model, "get_base_model", None)  # a PEFT model's
    inner = base() if callable(base) else model
    if getattr(getattr(inner, "config", None), "is_encoder_decoder", False):
        return False
    loss_type = getattr(inner, "loss_type", None)
    return ((isinstance(loss_type, str) and LOSS_MAPPING.get(loss_type) is ForCausalLMLoss)
            or type(inner).__name__ in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())


def _loss_items(labels: torch.Tensor, shift_labels: object, shifts: bool) -> torch.Tensor:
    """The loss items of a micro-batch: its labels other than -100 that the loss predicts."""
    if isinstance(shift_labels, torch.Tensor):
        return (shift_labels != IGNORE_INDEX).sum()
    if shifts and labels.ndim:
        labels = labels[..., 1:]
    return (labels != IGNORE_INDEX).sum()


def _loss_of(output: object) -> torch.Tensor | None:
    """The loss a model's output carries, as the Trainer reads it (``compute_loss``)."""
    if isinstance(output, Mapping):
        loss = output.get("loss")
    elif isinstance(output, (tuple, list)) and output:
        loss = output[0]
    else:
        loss = getattr(output, "loss", None)
    return loss if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None


def _batch_size(args: tuple[object, ...], kwargs: dict[str, Any]) -> int:
    """Samples in a batch without labels: the first dimension of its first tensor."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.ndim:
            return int(value.shape[0])
    return 1
