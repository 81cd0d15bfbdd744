"""A run's own logs read into a ``LoggedRun`` (docs/logs.md): the newest run under a folder
found (``find_logs``), its files read (``logs.formats``), its tags mapped (``logs.tags``), what
its steps mean detected or stated, and what it cannot prove said."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from lrcheck.errors import SpecError
from lrcheck.logs import formats
from lrcheck.logs.formats import EVENTS, Raw
from lrcheck.logs.model import (
    LogFormat,
    LoggedRun,
    LossIs,
    Quantity,
    Reading,
    Series,
    StepMeaning,
    StepUnit,
)
from lrcheck.logs.steps import from_steps, micro_batches, stated_steps, updates_from
from lrcheck.logs.tags import NOT, parse_tags, preference, quantity
from lrcheck.words import plural

# Formats by preference where a folder holds several: full precision first; a Trainer
# checkpoint's state that stopped before max_steps after the events (it may be partial).
PRIORITY = {"state": 0, "csv": 1, "mlflow": 2, "events": 3, "checkpoint": 4}
READERS: dict[str, Callable[[Path], Raw]] = {
    "state": formats.read_trainer_state, "checkpoint": formats.read_trainer_state,
    "csv": formats.read_lightning_csv, "mlflow": formats.read_mlflow_run,
    "db": formats.read_mlflow_db, "events": formats.read_tensorboard}
DEPTH = 6


def _kind(path: Path) -> str | None:
    """Which reader a file or folder is for, by its name (None: none)."""
    if path.is_dir():
        if (path / "meta.yaml").is_file() and (path / "metrics").is_dir():
            return "mlflow"
        return "events" if any(p.name.startswith(EVENTS) for p in path.iterdir()) else None
    name = path.name
    if name == "trainer_state.json":
        return "checkpoint" if path.parent.name.startswith("checkpoint-") else "state"
    return {"metrics.csv": "csv", "mlflow.db": "db"}.get(
        name, "events" if name.startswith(EVENTS) else None)


def _walk(folder: Path) -> Iterator[tuple[str, Path]]:
    """Every log under ``folder`` (``DEPTH`` folders deep at most, hidden ones skipped)."""
    top = len(folder.parts)
    for root, dirs, files in os.walk(folder):
        here = Path(root)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "artifacts"
                         and len(here.parts) - top < DEPTH)
        kind = _kind(here)
        if kind is not None:
            yield kind, here
        if kind == "events":  # its sub-folders of events are add_scalars', read with it
            dirs[:] = [d for d in dirs if _kind(here / d) != "events"]
        for name in files:
            kind = _kind(here / name)
            if kind is not None and kind != "events":
                yield kind, here / name


def _when(kind: str, path: Path) -> float:
    """When the run of a log started or last wrote, to tell the newest."""
    if kind == "mlflow":
        return formats.mlflow_started(path) / 1000
    if kind == "events":
        stamps = [p.name[len(EVENTS):].split(".", 1)[0] for p in path.iterdir()
                  if p.name.startswith(EVENTS)]
        return max((float(s) for s in stamps if s.isdigit()), default=path.stat().st_mtime)
    return path.stat().st_mtime


def _partial(kind: str, path: Path) -> str:
    """A Trainer checkpoint's state of a run that went on after it: ``checkpoint``."""
    if kind != "checkpoint":
        return kind
    state = formats.read_trainer_state(path).about
    return "state" if state.get("global_step") == state.get("max_steps") else kind


def _given_kind(path: Path) -> str | None:
    """Which reader a file given by name is for: ``_kind``'s, and any CSV file."""
    return _kind(path) or ("csv" if path.is_file() and path.suffix == ".csv" else None)


def find_logs(folder: Path) -> Path:
    """The log to read in ``folder`` (itself where it is one): of the formats found, the most
    precise (``PRIORITY``), and of its runs the newest (the Trainer's ``runs/<date>_<host>/``,
    Lightning's ``lightning_logs/version_N/``, MLflow's runs by their start). A folder with
    none, or only a W&B offline run, is a ``SpecError``."""
    if not folder.exists():
        raise SpecError(f"{folder}: no such file or folder")
    if _given_kind(folder) is not None:
        return folder
    found = [(PRIORITY.get(_partial(kind, path), 2), -_when(kind, path), str(path))
             for kind, path in _walk(folder)]
    if found:
        return Path(min(found)[2])
    wandb = next((p for p in folder.rglob("offline-run-*") if p.is_dir()), None)
    if wandb is not None:
        raise SpecError(f"{wandb}: a W&B offline run, not readable here: its .wandb file is "
                        "read by the wandb package (pip install wandb; wandb sync uploads it), "
                        "which lrcheck does not depend on; log to TensorBoard or CSV as well")
    raise SpecError(f"{folder}: no log found (TensorBoard events, trainer_state.json, "
                    f"metrics.csv, an MLflow store) within it, {DEPTH} folders deep")


def is_log_folder(path: Path) -> bool:
    """Whether ``path`` is a log or holds one (a W&B offline run too, so that it is said not
    readable): not a record folder (``run.json``) nor a Recorder file."""
    if path.is_file():
        return _given_kind(path) is not None
    if not path.is_dir() or (path / "run.json").exists():
        return False
    return _kind(path) is not None or next(_walk(path), None) is not None or any(
        p.is_dir() for p in path.rglob("offline-run-*"))


def read_logs(path: Path, *, accum: int | None = None, first_step: int | None = None,
              tags: Mapping[Quantity, str] | None = None,
              steps: StepMeaning | None = None) -> LoggedRun:
    """The log at ``path`` (a file, or the newest under a folder: ``find_logs``) as a
    ``LoggedRun``. ``accum``: the log's steps count micro-batches, ``accum`` per update;
    ``first_step``: the logged step of update 0 (0 or 1); ``steps``: what a step means, as
    the user stated it (``stated_steps``); each overrides what is detected. ``tags``: the
    tag the user says holds a quantity (``--tag lr=LearningRate``), over the tag table. A log
    with no LR, loss or gradient norm is a ``SpecError`` that lists the tags it has."""
    if accum is not None and accum < 1 or first_step is not None and first_step < 0:
        raise SpecError(f"accum must be >= 1 and first_step >= 0, got {accum}, {first_step}")
    found = find_logs(path)
    kind = _given_kind(found)
    assert kind is not None
    raw = READERS[kind](found)
    series, groups, unmapped = _mapped(raw, tags or {})
    if not any(q in series for q in COMPARED):
        raise SpecError(unmappable(found, raw))
    meaning = steps or _meaning(raw, series, accum, first_step)
    before = [(s.tag, min(s.steps)) for s in series.values()
              if s.steps and meaning.update(min(s.steps)) < 0]
    if before:
        raise SpecError(f"{found}: {before[0][0]} is logged at step {before[0][1]}, before "
                        f"update 0 where {meaning.how}")
    every = _every(raw, series)
    run = LoggedRun(found, raw.format, series, meaning, unmapped, every, (), groups,
                    *_loss_is(raw, series, every))
    return replace(run, limits=_limits(raw, run))


def _trainer(raw: Raw) -> bool:
    return raw.format is LogFormat.TRAINER_STATE or "gradient_accumulation_steps" in raw.about


def _lightning(raw: Raw) -> bool:
    return raw.format is LogFormat.LIGHTNING_CSV or "lightning_logs" in raw.path.parts


def _loss_is(raw: Raw, series: dict[Quantity, Series], every: int | None
             ) -> tuple[LossIs, int | None]:
    """What a logged loss is, and the micro-batches per update the log shows: the Trainer's
    ``gradient_accumulation_steps``; Lightning's LR monitor, which logs at every micro-batch,
    its rows per step (the most frequent count)."""
    if _trainer(raw):
        accum = raw.about.get("gradient_accumulation_steps")
        return (LossIs.WINDOW if (every or 1) > 1 else LossIs.UPDATE,
                accum if isinstance(accum, int) else None)
    if not _lightning(raw):
        return LossIs.UPDATE, None
    lr = series.get(Quantity.LR)
    counts = Counter(Counter(lr.steps).values()) if lr is not None else Counter()
    return LossIs.MICRO_BATCH, (counts.most_common(1)[0][0] if counts else None)


COMPARED = (Quantity.LR, Quantity.LOSS, Quantity.GRAD_NORM)


def reading(tags: Sequence[str] | Mapping[str, str] | None = None,
            log_steps: str | None = None) -> Reading:
    """What the user stated (``--tag lr=LearningRate``, ``--log-steps updates-from-1``) as a
    ``Reading``; a bad item is a ``SpecError`` naming it."""
    return Reading(parse_tags(tags), None if log_steps is None else stated_steps(log_steps))


def unmappable(path: Path, raw: Raw) -> str:
    """Why the log at ``path`` compares nothing: the tags it has, and how to map one."""
    if not raw.tags:
        return (f"{path}: no value logged in it ({raw.format.value}: "
                + ("an empty log_history" if raw.format is LogFormat.TRAINER_STATE else
                   "no row" if raw.format is LogFormat.LIGHTNING_CSV else "no scalar") + ")")
    seen = sorted(raw.tags)
    listed = ", ".join(seen[:12]) + (f" and {len(seen) - 12} more" if len(seen) > 12 else "")
    return (f"{path}: no LR, loss or gradient norm among its tags ({listed}); say which tag "
            "is which with --tag lr=TAG --tag loss=TAG (docs/logs.md, \"Tags\")")


def _mapped(raw: Raw, stated: Mapping[Quantity, str]
            ) -> tuple[dict[Quantity, Series], tuple[Series, ...], tuple[str, ...]]:
    """The tags as series by quantity (the tag the user stated, else the preferred tag where
    several map to one), the LR's param groups after the first, and the tags left unmapped.
    A stated tag the log does not have is a ``SpecError`` listing those it has."""
    chosen: dict[tuple[Quantity, int], str] = {}
    for q, tag in stated.items():
        if tag not in raw.tags:
            raise SpecError(f"{raw.path}: no tag {tag!r} (given for {q.value}); its tags: "
                            f"{', '.join(sorted(raw.tags)) or 'none'}")
        chosen[q, 0] = tag
    for tag in sorted(raw.tags, key=preference):
        found = quantity(tag)
        if found is not None and found[0] not in stated and tag not in stated.values():
            chosen.setdefault(found, tag)
    taken = set(chosen.values())

    def series(q: Quantity, tag: str) -> Series:
        points = raw.tags[tag]
        return Series(q, tag, tuple(s for s, _ in points), tuple(v for _, v in points),
                      raw.dtype)

    mapped = {q: series(q, tag) for (q, group), tag in chosen.items() if group == 0}
    groups = []
    for group in range(1, len(chosen) + 1):
        if (Quantity.LR, group) not in chosen:
            break
        groups.append(series(Quantity.LR, chosen[Quantity.LR, group]))
    return mapped, tuple(groups), tuple(t for t in raw.tags if t not in taken)


def _meaning(raw: Raw, series: dict[Quantity, Series], accum: int | None,
             first_step: int | None) -> StepMeaning:
    """What a logged step means: as stated, else as the writer's files say, else from the
    samples logged, else from the steps themselves, else assumed."""
    if accum is not None and accum > 1:
        return micro_batches(accum, 0 if first_step is None else first_step, "stated")
    if first_step is not None:
        return updates_from(first_step, "stated") if first_step in (0, 1) else StepMeaning(
            StepUnit.UPDATE, first_step, 1, f"stated: update 0 logged at step {first_step}")
    if _trainer(raw):
        where = ("trainer_state.json" if raw.format is LogFormat.TRAINER_STATE
                 else "the Trainer's TrainingArguments in args/text_summary")
        said = "".join(f", {key} {raw.about[key]}" for key in (
            "gradient_accumulation_steps", "logging_steps", "max_steps") if key in raw.about)
        return StepMeaning(StepUnit.UPDATE, 1, 1,
                           f"detected ({where}{said}): steps are the Trainer's global_step, "
                           "1 after the first update")
    if raw.about.get("step_column") in ("train/global_step", "global_step"):
        return StepMeaning(StepUnit.UPDATE, 1, 1,
                           f"detected (the CSV's {raw.about['step_column']} column, the "
                           "Trainer's global_step as W&B logs it): 1 after the first update")
    if _lightning(raw):
        return StepMeaning(StepUnit.UPDATE, 0, 1,
                           "detected (Lightning's logs): steps are trainer.global_step, the "
                           "updates made before the log call, 0 at the first update")
    main = series.get(Quantity.LR) or series.get(Quantity.LOSS) or series.get(
        Quantity.GRAD_NORM)
    return _from_samples(series.get(Quantity.SAMPLES)) or from_steps(
        main.steps if main else (), _every(raw, series)) or StepMeaning(
        how="assumed: steps count updates from 0, as a loop's add_scalar(tag, value, k) "
            "does; a log does not say it (state it with --log-steps)")


def _from_samples(samples: Series | None) -> StepMeaning | None:
    """Steps counting updates from ``first``, where the samples logged grow by the same number
    at every step and step ``s`` has ``(s - first + 1)`` times it (first 0 or 1)."""
    if samples is None or len(samples.steps) < 2:
        return None
    steps, seen = np.array(samples.steps), np.array(samples.values)
    per = np.diff(seen) / np.maximum(np.diff(steps), 1)
    if not (np.all(np.diff(steps) > 0) and np.all(per == per[0]) and per[0] > 0):
        return None
    first = steps[0] + 1 - seen[0] / per[0]
    if first not in (0, 1):
        return None
    return StepMeaning(StepUnit.UPDATE, int(first), 1,
                       f"detected from the samples logged ({per[0]:g} per step, "
                       f"{seen[0]:g} at step {steps[0]}): steps count updates from {int(first)}")


def _every(raw: Raw, series: dict[Quantity, Series]) -> int | None:
    """The logging interval in steps, where regular (the Trainer's ``logging_steps``)."""
    every = raw.about.get("logging_steps")
    if isinstance(every, int):
        return every
    main = series.get(Quantity.LR) or series.get(Quantity.LOSS)
    if main is None or len(set(main.steps)) < 2:
        return None
    gaps = set(np.diff(sorted(set(main.steps))).tolist())
    return int(gaps.pop()) if len(gaps) == 1 else None


def _limits(raw: Raw, run: LoggedRun) -> tuple[str, ...]:
    """What this log cannot prove, a sentence each."""
    found = []
    if raw.dtype == "float32":
        found.append("values stored as float32 (TensorBoard scalars): about 7 significant "
                     "digits, a gap smaller than a float32 step is not seen")
    if run.every is not None and run.every > 1:
        found.append(f"logged every {run.every} steps: the updates between two logs are "
                     "not seen")
    elif run.every is None:
        found.append("logged at irregular steps: only the updates both runs logged are "
                     "compared")
    trainer = _trainer(raw)
    if trainer and (run.every or 1) > 1 and Quantity.LOSS in run.series:
        found.append(f"the Trainer's loss is the mean over each logging window of {run.every} "
                     "updates, not one update's")
    if trainer and Quantity.GRAD_NORM in run.series:
        found.append("the Trainer logs as grad_norm what clip_grad_norm_ returns: the norm "
                     "before clipping, not the one applied")
    if _lightning(raw):
        found.append("a loss logged by self.log on a step is that batch's: with "
                     "accumulate_grad_batches > 1, the update's last micro-batch's")
    if run.steps.unit is StepUnit.MICRO_BATCH:
        found.append(f"logged per micro-batch: an update's value is the last of its "
                     f"{run.steps.per_update} micro-batches'")
    if run.steps.how.startswith("assumed"):
        found.append("what a step means is assumed (updates from 0): the log does not say it")
    writers = raw.writers()
    if writers:
        found.append(f"{plural(1 + len(writers), 'event file')} log the same "
                     "steps (every rank logging into one folder?): the first file's values "
                     f"read, not {', '.join(writers)}")
    found += [f"no {name} logged" for q, name in ((Quantity.LR, "LR"), (Quantity.LOSS, "loss"),
                                                  (Quantity.GRAD_NORM, "gradient norm"))
              if q not in run.series]
    found += [f"{tag} is {why}: not read as one" for tag, why in NOT.items() if tag in raw.tags]
    return tuple(found)
