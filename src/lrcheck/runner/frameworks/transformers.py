"""``--framework transformers``: a run trained through the real Transformers ``Trainer``.

``Trainer.train()`` runs its own loop: it cuts each epoch into windows of
``gradient_accumulation_steps`` micro-batches (the last one shorter), scales each micro-batch's
loss (divided by the micro-batches of its window, or — ``--trainer-loss num-items`` — summed over
the window's items by the model), steps the optimizer and then its own scheduler
(``lr_scheduler_type``, sized by the Trainer from its dataloader), and under several processes
wraps the model in DDP and deals the batches through Accelerate. lrcheck chooses only:

- the model: the task's seeded network in ``spec.dtype``, inside ``TaskModel`` (cross-entropy
  over the labels, ``accepts_loss_kwargs`` per ``--trainer-loss``);
- the optimizer: lrcheck's own (``runner.build``), handed over as ``optimizers=(optimizer,
  None)``, so the Trainer builds its scheduler on it;
- the data order: ``_get_train_sampler`` returns lrcheck's ``PlannedOrder``, every sample of each
  epoch (the Trainer owns the epoch's end), dealt so that Accelerate's round-robin batches give
  every rank its share; ``set_epoch`` reaches it through Accelerate's ``DataLoaderShard``;
- no gradient clipping (``max_grad_norm=0``), no logging, saving or evaluation.

It records through ``integrations.transformers.LrcheckCallback`` — the callback users add to
their own Trainer — with a ``RecordingSink``.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Sized
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from lrcheck.experiments.tasks import IGNORE_INDEX, Dataset
from lrcheck.plan.frameworks import TRAINER_SCHEDULES
from lrcheck.runner.build import build
from lrcheck.runner.frameworks.common import FrameworkRun, PlannedOrder, framework_process
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, RunTrace

if TYPE_CHECKING:
    from transformers import TrainerControl, TrainerState, TrainingArguments


class TaskModel(torch.nn.Module):
    """The task's network as a Trainer model: ``forward(x, labels, ids)`` returns ``{"loss",
    "logits"}``. The loss is the mean over the micro-batch's items, or — when the Trainer passes
    ``num_items_in_batch`` (``accepts_loss_kwargs``) — their sum over the window's items, as
    transformers' own models compute it. ``ids`` rides along for the recording."""

    def __init__(self, net: torch.nn.Module, accepts_loss_kwargs: bool) -> None:
        super().__init__()
        self.net = net
        self.accepts_loss_kwargs = accepts_loss_kwargs

    def forward(self, x: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor | None = None,
                num_items_in_batch: torch.Tensor | int | None = None) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        per_item = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                   reduction="none", ignore_index=IGNORE_INDEX)
        if num_items_in_batch is None:
            loss = per_item.sum() / (labels != IGNORE_INDEX).sum().clamp(min=1)
        else:
            loss = per_item.sum() / num_items_in_batch
        return {"loss": loss, "logits": logits}


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """``plain.train``'s contract, trained through ``Trainer.train()``. Under torchrun the
    Trainer (its Accelerate state) joins the process group lrcheck set up; a run of world 1
    does not see torchrun's variables (``common.framework_process``)."""
    with (framework_process(spec, accelerate=True),
          tempfile.TemporaryDirectory(prefix="lrcheck-trainer-") as out):
        return _train(spec, data, device, rank, out, on_update, on_start)


def _arguments(spec: RunSpec, device: str, out: str) -> TrainingArguments:
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=out,
        per_device_train_batch_size=spec.bs,
        gradient_accumulation_steps=spec.accum,
        num_train_epochs=spec.epochs,
        learning_rate=spec.lr,
        lr_scheduler_type=TRAINER_SCHEDULES[spec.scheduler],
        # transformers 5: a fractional warmup_steps is a ratio of the run (ceil(ratio · steps),
        # training_args.py get_warmup_steps); warmup_ratio is gone.
        warmup_steps=spec.warmup,
        dataloader_drop_last=spec.drop_last,
        max_grad_norm=0.0,  # no clipping: lrcheck compares the unclipped updates
        seed=spec.seed,
        use_cpu=device == "cpu",
        dataloader_num_workers=0,
        remove_unused_columns=False,  # keep "ids" in the batch
        accelerator_config={"even_batches": spec.even_batches},
        logging_strategy="no", save_strategy="no", eval_strategy="no", report_to="none",
        disable_tqdm=True, log_level="error", log_level_replica="error",
    )


def _train(spec: RunSpec, data: Dataset, device: str, rank: int, out: str,
           on_update: OnUpdate | None, on_start: Callable[[], None] | None) -> RunTrace:
    from transformers import PrinterCallback, Trainer, TrainerCallback

    from lrcheck.integrations.transformers import LrcheckCallback
    from lrcheck.runner.frameworks.common import RecordingSink

    args = _arguments(spec, device, out)
    run = FrameworkRun.start(spec, data, device=args.device, on_update=on_update)
    run.check_processes("the Trainer", args.world_size, args.process_index, rank)
    recording = run.recording
    # lrcheck's seeded model and optimizer; the Trainer makes the schedule (build's own is
    # dropped: the Trainer's, made later on the same optimizer, sets the LR again).
    parts = build(spec, data, run.ctx, str(args.device))
    model = TaskModel(parts.net, accepts_loss_kwargs=spec.trainer_loss == "num-items")
    order = run.order(dealt=True)
    recorder = LrcheckCallback(sink=RecordingSink(recording))

    class Epochs(TrainerCallback):
        """The rest of lrcheck's run: the parameters to snapshot, the schedule the Trainer
        really made, the start, and each epoch's accuracy."""

        epoch = 0

        def on_train_begin(self, args: TrainingArguments, state: TrainerState,
                           control: TrainerControl, *, train_dataloader: Sized | None = None,
                           **kwargs: object) -> None:
            assert train_dataloader is not None  # the Trainer passes it to every event
            # After the Trainer placed and prepared the model: snapshot what it trains.
            recording.attach(parts.net)
            # What the Trainer sized its schedule with (set_initial_training_values): its
            # loader's micro-batches on this rank, updates rounded up, max_steps.
            micro = len(train_dataloader)
            recording.ctx = dataclasses.replace(
                recording.ctx, micro_batches_per_epoch=micro,
                updates_per_epoch=-(-micro // spec.accum), total_updates=state.max_steps,
                total_steps=state.max_steps, warmup_steps=args.get_warmup_steps(state.max_steps))
            if on_start is not None:
                on_start()

        def on_epoch_end(self, args: TrainingArguments, state: TrainerState,
                         control: TrainerControl, **kwargs: object) -> None:
            if rank == 0:
                recording.end_epoch(parts.net, self.epoch, len(recording.updates) - 1)
            self.epoch += 1

    class PlannedTrainer(Trainer):
        def _get_train_sampler(self, train_dataset: object = None) -> PlannedOrder:
            return order

    trainer = PlannedTrainer(model=model, args=args, train_dataset=run.dataset(),
                             optimizers=(parts.optimizer, None),
                             callbacks=[recorder, Epochs()])
    # With tqdm off the Trainer prints its logs (the run's summary at the end) to stdout.
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return run.finish(recorder.tap)
