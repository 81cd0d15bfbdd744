"""``--framework ludwig``: a run trained through Ludwig's real ``LudwigModel.train``.

lrcheck hands Ludwig the task's training split as a data frame (one ``number`` input feature per
column, a ``category`` output) and a config built from the spec (``ludwig_config``); Ludwig
builds its own model (an ECD: the number features concatenated, one fully connected layer of the
task's width with ReLU, a linear decoder — lrcheck's MLP in shape, initialised Ludwig's way),
its own data order (``ludwig/data/sampler.py``: a permutation seeded by ``random_seed + epoch``,
the same whatever the batch size), its own optimizer and its own ``learning_rate_scheduler``,
and trains. It trains in float32: its number features are cast to float32 in preprocessing
(``ludwig/features/number_feature.py``), and so is its model.

What it does is recorded by ``lrcheck.integrations.ludwig.LrcheckCallback``, the callback users
add to their own runs, into the ``Recording``; an adapter callback adds what only lrcheck does:
the accuracy and macro-F1 on lrcheck's test split at each epoch's end, and ``--resume-at K``,
which stops Ludwig after update K the way its Ctrl-C handler does (``set_steps_to_1_or_quit``:
finish this micro-batch, save the checkpoint, return) and trains again through
``model_resume_path``.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lrcheck.errors import RunError
from lrcheck.experiments.tasks import TASKS, Dataset
from lrcheck.plan.frameworks import LUDWIG_SCHEDULES
from lrcheck.runner.frameworks.common import framework_process
from lrcheck.runner.recording import Recording
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, Resumed, RunTrace

if TYPE_CHECKING:
    import pandas as pd
    from ludwig.callbacks import Callback

    from lrcheck.integrations.ludwig import LrcheckCallback
    from lrcheck.integrations.ludwig_types import Model, ProgressTracker, Trainer

LABEL = "label"
# lrcheck's optimizers in Ludwig's words: SGD with lrcheck's momentum, AdamW with its weight
# decay (Ludwig has one param group, so the decay reaches the biases too).
OPTIMIZERS = {"sgd": {"type": "sgd", "momentum": 0.9},
              "adamw": {"type": "adamw", "weight_decay": 0.01}}


def feature_names(data: Dataset) -> list[str]:
    return [f"x{i}" for i in range(data.num_features)]


def ludwig_config(spec: RunSpec, data: Dataset) -> dict[str, object]:
    """The Ludwig config for ``spec``: number features (lrcheck has standardised them already)
    into a concat combiner with one fully connected layer of the task's width (BatchNorm for a
    ``batch_norm`` task), a category output; the trainer with ``spec``'s batch size,
    accumulation, epochs, LR, optimizer and schedule. Evaluation is off (``skip_all_evaluation``:
    it would not change the training, only its time); so are dropout and early stopping.
    Everything else is Ludwig's default, gradient clipping at global norm 0.5 included."""
    task = TASKS[spec.task]
    decay = LUDWIG_SCHEDULES[spec.scheduler]
    return {
        "input_features": [{"name": name, "type": "number",
                            "preprocessing": {"normalization": None}}
                           for name in feature_names(data)],
        "output_features": [{"name": LABEL, "type": "category"}],
        "combiner": {"type": "concat", "num_fc_layers": 1, "output_size": task.hidden,
                     "activation": "relu", "dropout": 0.0,
                     "norm": "batch" if task.batch_norm else None},
        "trainer": {
            "batch_size": spec.bs,
            "gradient_accumulation_steps": spec.accum,
            "epochs": spec.epochs,
            "learning_rate": spec.lr,
            "optimizer": OPTIMIZERS[spec.optimizer],
            "learning_rate_scheduler": {"decay": None if decay == "none" else decay,
                                        "warmup_fraction": spec.warmup},
            "skip_all_evaluation": True,
            "early_stop": -1,
            "use_mixed_precision": False,
        },
    }


def training_frame(data: Dataset) -> pd.DataFrame:
    """The training split as Ludwig reads it: row ``i`` is sample ``i`` (its id)."""
    import pandas as pd

    frame = pd.DataFrame(data.x_train.astype(np.float32), columns=feature_names(data))
    frame[LABEL] = [str(int(y)) for y in data.y_train]
    return frame


class Classifier(torch.nn.Module):
    """Ludwig's model as lrcheck's evaluation sees a model: the features as one tensor in, the
    logits of lrcheck's classes out (Ludwig numbers the classes its own way, ``str2idx``)."""

    def __init__(self, model: Model, names: list[str], str2idx: dict[str, int],
                 classes: int) -> None:
        super().__init__()
        self.model, self.names = model, names
        self.order = [str2idx[str(c)] for c in range(classes)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inputs = {name: x[:, i].float() for i, name in enumerate(self.names)}
        logits: torch.Tensor = self.model(inputs)[f"{LABEL}::logits"]
        return logits[:, self.order]


class _Run:
    """What lrcheck does beside the recording: the test split's metrics at each epoch's end,
    the stop after update ``stop_after``, the schedule's real lengths for the trace."""

    def __init__(self, recording: Recording, data: Dataset, stop_after: int | None,
                 on_start: Callable[[], None] | None) -> None:
        self.recording, self.data, self.stop_after = recording, data, stop_after
        self.on_start = on_start
        self.trainer: Trainer | None = None
        self.str2idx: dict[str, int] = {}
        self.stopped_here = False

    def callback(self) -> Callback:
        from ludwig.callbacks import Callback

        run = self

        class LrcheckRun(Callback):  # type: ignore[misc]
            def on_preprocess_end(self, training_set: object, validation_set: object,
                                  test_set: object, metadata: dict[str, dict[str, Any]]) -> None:
                run.str2idx = dict(metadata[LABEL]["str2idx"])

            def on_trainer_train_setup(self, trainer: Trainer, save_path: str,
                                       is_coordinator: bool) -> None:
                run.trainer = trainer
                run.recording.attach(trainer.model)
                if run.on_start is not None:
                    run.on_start()
                    run.on_start = None

            def on_epoch_start(self, trainer: Trainer, progress_tracker: ProgressTracker,
                               save_path: str) -> None:
                # What Ludwig sized its schedule with, known once its batcher exists: steps
                # are micro-batches.
                info = trainer.scheduler.step_info
                run.recording.ctx = dataclasses.replace(
                    run.recording.ctx, total_steps=int(info.num_training_steps),
                    warmup_steps=round(info.num_warmup_steps))

            def on_batch_end(self, trainer: Trainer, progress_tracker: ProgressTracker,
                             save_path: str,
                             sync_step: bool = True) -> None:
                updates = len(run.recording.updates)
                if sync_step and run.stop_after is not None and updates == run.stop_after + 1:
                    run.stopped_here = True
                    trainer.set_steps_to_1_or_quit(signal.SIGINT, None)  # Ludwig's Ctrl-C

            def on_epoch_end(self, trainer: Trainer, progress_tracker: ProgressTracker,
                             save_path: str) -> None:
                run.end_epoch(progress_tracker.epoch - 1)

        return LrcheckRun()

    def end_epoch(self, epoch: int) -> None:
        assert self.trainer is not None  # on_trainer_train_setup came first
        net = Classifier(self.trainer.model, feature_names(self.data), self.str2idx,
                         self.data.num_classes)
        self.recording.end_epoch(net, epoch, len(self.recording.updates) - 1)


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """``plain.train``'s contract, trained through ``LudwigModel.train`` in this process (Ludwig
    places the model itself: on CUDA when it sees one)."""
    with framework_process(spec):
        return _train_and_resume(spec, data, on_update, on_start)


def _train_and_resume(spec: RunSpec, data: Dataset, on_update: OnUpdate | None,
                      on_start: Callable[[], None] | None) -> RunTrace:
    """``train``, inside its framework's process: once, or — ``--resume-at K`` — stopped after
    update K and trained again from Ludwig's checkpoint."""
    from lrcheck.integrations.ludwig import LrcheckCallback
    from lrcheck.runner.frameworks.common import RecordingSink

    where = "cuda" if torch.cuda.is_available() else "cpu"
    recording = Recording.for_run(spec, data, device=where, on_update=on_update)
    sink = RecordingSink(recording)
    run = _Run(recording, data, spec.resume_at, on_start)
    frame = training_frame(data)
    with tempfile.TemporaryDirectory(prefix="lrcheck-ludwig-") as out:
        first = _train(spec, data, frame, run, LrcheckCallback(sink=sink), Path(out),
                       resume_from=None, keep=spec.resume_at is not None)
        if spec.resume_at is not None:
            if not run.stopped_here:
                raise RunError(f"Ludwig ended before update {spec.resume_at}: nothing to resume")
            checkpoints = first / "model" / "training_checkpoints"
            size = sum(p.stat().st_size for p in checkpoints.rglob("*") if p.is_file())
            recording.resumed = Resumed(len(recording.updates), 0, size)
            run.stop_after, run.stopped_here = None, False
            _train(spec, data, frame, run, LrcheckCallback(sink=sink), Path(out),
                   resume_from=first, keep=True)
    return recording.finish(recording.windows)


def _train(spec: RunSpec, data: Dataset, frame: pd.DataFrame, run: _Run,
           recorder: LrcheckCallback, out: Path, *,
           resume_from: Path | None, keep: bool) -> Path:
    """One ``LudwigModel.train`` call recorded by ``recorder`` (resuming from the experiment
    folder ``resume_from``); ``keep``: save the progress a resume needs. The experiment folder
    it wrote. Ludwig's SIGINT handler is put back afterwards, and a Ctrl-C that Ludwig took as
    "finish this step and stop" comes through as the interruption it was."""
    from ludwig.api import LudwigModel
    from ludwig.globals import is_progressbar_disabled, set_disable_progressbar

    logger = logging.getLogger("ludwig")
    handler, bar, level = (signal.getsignal(signal.SIGINT), is_progressbar_disabled(),
                           logger.level)
    try:
        # Quiet: lrcheck shows its own progress (Ludwig's logging level CRITICAL turns its
        # progress bar off), and the stop before a resume is lrcheck's, not a user's Ctrl-C.
        model = LudwigModel(ludwig_config(spec, data), logging_level=logging.CRITICAL,
                            callbacks=[recorder, run.callback()],
                            # Its preprocessing lock file goes there, not into the cwd.
                            backend={"type": "local", "cache_dir": str(out)})
        logger.setLevel(logging.CRITICAL + 1)
        _, _, folder = model.train(
            training_set=frame, output_directory=str(out), random_seed=spec.seed,
            model_resume_path=None if resume_from is None else str(resume_from),
            skip_save_training_description=True, skip_save_training_statistics=True,
            skip_save_model=True, skip_save_progress=not keep, skip_save_log=True,
            skip_save_processed_input=True)
    finally:
        signal.signal(signal.SIGINT, handler)
        set_disable_progressbar(bar)
        logger.setLevel(level)
    if run.trainer is not None and run.trainer.received_sigint and not run.stopped_here:
        raise KeyboardInterrupt
    return Path(folder)
