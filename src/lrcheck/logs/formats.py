"""Each writer's files read as they are (docs/logs.md, "What is read"): every tag's logged
steps and values, and what the file says of its run, before any tag is mapped or any step
given a meaning (``logs.read``). A file that cannot be read is a ``SpecError`` naming it."""

from __future__ import annotations

import csv
import json
import math
import sqlite3
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrcheck.errors import SpecError
from lrcheck.logs.model import LogFormat

# Keys of the Trainer's log_history that say when, not what.
TRAINER_KEYS = ("step",)
# A log_history entry with one of these is the run's summary or an evaluation, not a step.
TRAINER_SUMMARY = ("train_runtime",)


@dataclass
class Raw:
    """One log as written: per tag, its (step, value) pairs in the order written; ``dtype``
    the precision the format stores; ``about``: what the writer saved of the run's settings
    (the Trainer's ``logging_steps``, ``gradient_accumulation_steps``, ...), where it did."""

    format: LogFormat
    path: Path
    tags: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    dtype: str = "float64"
    about: dict[str, object] = field(default_factory=dict)

    def add(self, tag: str, step: int, value: float) -> None:
        self.tags.setdefault(tag, []).append((step, value))

    def writers(self) -> list[str]:
        """The event files not read because they log the steps an earlier one logged."""
        found = self.about.get("writers")
        return [str(name) for name in found] if isinstance(found, list) else []


def read_tensorboard(path: Path) -> Raw:
    """Event files (one file, or a run's folder of them) read record by record with
    tensorboard's ``Event`` protobuf (``tensorboard.compat.proto``; its ``EventAccumulator``
    takes 5.6 s for 100,000 steps of 3 tags, read_logs 1.5 s, imports included: make bench): scalars
    (``SummaryWriter.add_scalar``), tensors written by TB v2 scalar summaries, and the
    Transformers Trainer's ``args/text_summary`` (its ``TrainingArguments``, as JSON) into
    ``about``. A folder's sub-folders of events are ``add_scalars``' (``Loss_train/`` holds
    ``Loss``'s ``train``): read as ``Loss/train``. Several files in one folder that log the
    same steps are several writers (every rank logging): the first file's values are read,
    and ``about["writers"]`` names the files."""
    if not path.exists():
        raise SpecError(f"{path}: no such file or folder")
    raw = Raw(LogFormat.TENSORBOARD, path, dtype="float32")
    files = sorted(p for p in path.iterdir() if p.name.startswith(EVENTS)) if path.is_dir() \
        else [path]
    for file in files:
        _events_file(file, raw)
    if path.is_dir():
        for sub in sorted(p for p in path.iterdir() if p.is_dir()):
            for file in sorted(p for p in sub.iterdir() if p.name.startswith(EVENTS)):
                _events_file(file, raw, sub.name)
    if not raw.tags:
        raise SpecError(f"{path}: no scalars in these TensorBoard events (not an event file, "
                        "or one cut short before its first scalar)")
    return raw


EVENTS = "events.out.tfevents."


def _records(file: Path) -> Iterator[bytes]:
    """The records of a TFRecord file (length, its CRC, data, its CRC); a record cut short
    (a writer still running, or killed) ends the file."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise SpecError(f"{file}: cannot be read ({exc})") from None
    at = 0
    while at + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        start = at + 12
        if start + length + 4 > len(data):
            return
        yield data[start:start + length]
        at = start + length + 4


def _events_file(file: Path, raw: Raw, folder: str | None = None) -> None:
    """One event file's scalars into ``raw`` (``folder``: an ``add_scalars`` sub-folder's
    name, ``<tag>_<key>``, whose tag is read as ``<tag>/<key>``)."""
    try:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.util import tensor_util
    except ImportError:
        raise SpecError(f"{file}: TensorBoard event files need the tensorboard package: "
                        "pip install 'lrcheck[logs]'") from None
    mine: dict[str, list[tuple[int, float]]] = {}
    plugins: dict[str, str] = {}
    for record in _records(file):
        try:
            event = Event.FromString(record)
        except Exception:  # protobuf's DecodeError: not an event file
            break
        for value in event.summary.value:
            tag = value.tag
            if folder is not None:  # only add_scalars' own: another run nested is not this one
                if not folder.startswith(f"{tag.replace('/', '_')}_"):
                    continue
                tag = f"{tag}/{folder[len(tag) + 1:]}"
            if value.metadata.plugin_data.plugin_name:
                plugins[tag] = value.metadata.plugin_data.plugin_name
            kind = value.WhichOneof("value")
            if kind == "simple_value":
                mine.setdefault(tag, []).append((int(event.step), float(value.simple_value)))
            elif kind == "tensor":
                array = tensor_util.make_ndarray(value.tensor)
                if plugins.get(tag) == "scalars" and array.size == 1:
                    mine.setdefault(tag, []).append((int(event.step),
                                                     float(array.reshape(-1)[0])))
                elif value.tag == "args/text_summary" and array.size == 1:
                    raw.about.update(_json(array.reshape(-1)[0]))
    _merge(raw, mine, file)


def _merge(raw: Raw, mine: dict[str, list[tuple[int, float]]], file: Path) -> None:
    """One file's series into ``raw``: after what earlier files logged (a run resumed), or,
    where it logs steps an earlier file logged too, as another writer's (not read: named)."""
    overlap = any(raw.tags.get(tag) and points and points[0][0] <= raw.tags[tag][-1][0]
                  for tag, points in mine.items())
    if overlap:
        raw.about["writers"] = [*raw.writers(), file.name]
        return
    for tag, points in mine.items():
        raw.tags.setdefault(tag, []).extend(points)


def _json(text: bytes | str) -> dict[str, object]:
    try:
        found = json.loads(text.decode() if isinstance(text, bytes) else text)
    except (ValueError, UnicodeDecodeError):
        return {}
    return found if isinstance(found, dict) else {}


def read_trainer_state(path: Path) -> Raw:
    """The Trainer's ``trainer_state.json``: ``log_history``'s entries at their ``step``
    (its summary entry left out), and its ``logging_steps``, ``global_step``, ``max_steps``
    and ``train_batch_size``."""
    state = _load(path)
    history = state.get("log_history") if isinstance(state, dict) else None
    if not isinstance(history, list):
        raise SpecError(f"{path}: not a Trainer state: no log_history list")
    raw = Raw(LogFormat.TRAINER_STATE, path, about={
        key: state[key] for key in ("logging_steps", "global_step", "max_steps",
                                    "train_batch_size") if key in state})
    for n, entry in enumerate(history):
        if not isinstance(entry, dict) or not isinstance(entry.get("step"), int):
            raise SpecError(f"{path}: log_history entry {n} has no integer step: {entry!r:.80}")
        if any(key in entry for key in TRAINER_SUMMARY):
            continue
        for key, value in entry.items():
            if key not in TRAINER_KEYS and isinstance(value, (int, float)) \
                    and not isinstance(value, bool):
                raw.add(key, entry["step"], float(value))
    return raw


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: cannot be read as JSON ({exc})") from None


# A CSV's step column, by preference: Lightning's, the Trainer's as W&B exports its history
# (train/global_step), W&B's own counter (_step), a chart's export (Step).
STEP_COLUMNS = ("step", "train/global_step", "global_step", "_step", "Step")
# Columns of a W&B chart export that are not a value: a line's range, W&B's clock.
NOT_VALUES = ("__MIN", "__MAX", "_runtime", "_timestamp")


def read_lightning_csv(path: Path) -> Raw:
    """Lightning's CSVLogger ``metrics.csv`` (a row per log call, its ``step`` column and a
    column per metric, empty where that call did not log it), or another CSV file of that
    shape given by name: a W&B run's history exported (``train/global_step`` or ``_step``),
    a W&B chart's (``Step``, and ``<run> - <tag>`` columns, read as ``<tag>``)."""
    lightning = path.name == "metrics.csv"
    raw = Raw(LogFormat.LIGHTNING_CSV if lightning else LogFormat.CSV, path)
    try:
        with path.open(newline="", encoding="utf-8") as file:
            rows = csv.DictReader(file)
            names = list(rows.fieldnames or ())
            column = next((c for c in STEP_COLUMNS if c in names), None)
            if column is None or lightning and column != "step":
                raise SpecError(f"{path}: not a {'Lightning metrics.csv' if lightning else 'log'}"
                                f": no step column (columns {rows.fieldnames})")
            if column != "step":
                raw.about["step_column"] = column
            for line, row in enumerate(rows, start=2):
                _row(raw, line, row, column)
    except OSError as exc:
        raise SpecError(f"{path}: cannot be read ({exc})") from None
    return raw


def _row(raw: Raw, line: int, row: dict[str | Any, str | Any], column: str) -> None:
    """One CSV row's values into ``raw`` at its step (a row without one: not a step's)."""
    if row.get(column) in (None, ""):
        return
    step = _number(raw.path, line, column, row.get(column))
    for key, cell in row.items():
        if key is None or key in STEP_COLUMNS or cell in (None, "") \
                or any(key.endswith(end) for end in NOT_VALUES):
            continue
        raw.add(key.rsplit(" - ", 1)[-1], int(step), _number(raw.path, line, key, cell))


def _number(path: Path, line: int, key: str, cell: str | None) -> float:
    try:
        return float(cell or "")
    except ValueError:
        raise SpecError(f"{path}, line {line}: {key} is {cell!r}, not a number") from None


def read_mlflow_run(path: Path) -> Raw:
    """One run of MLflow's file store (``mlruns/<experiment>/<run>/``): each file under
    ``metrics/`` (a tag with ``/`` in it is a folder) holds lines ``timestamp value step``."""
    raw = Raw(LogFormat.MLFLOW, path)
    metrics = path / "metrics"
    for file in sorted(p for p in metrics.rglob("*") if p.is_file()):
        tag = file.relative_to(metrics).as_posix()
        for line, text in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
            words = text.split()
            if not words:
                continue
            try:
                value, step = float(words[1]), int(words[2]) if len(words) > 2 else 0
            except (IndexError, ValueError):
                raise SpecError(f"{file}, line {line}: {text!r} is not 'timestamp value "
                                "step'") from None
            raw.add(tag, step, value)
    if not raw.tags:
        raise SpecError(f"{path}: this MLflow run logged no metrics")
    return raw


def mlflow_started(run: Path) -> int:
    """When an MLflow file store's run started (its ``meta.yaml``'s ``start_time``, ms); -1
    where it does not say, or the run was deleted."""
    try:
        meta = (run / "meta.yaml").read_text(encoding="utf-8")
    except OSError:
        return -1
    found = dict(line.split(":", 1) for line in meta.splitlines() if ":" in line)
    if found.get("lifecycle_stage", "active").strip() != "active":
        return -1
    try:
        return int(found.get("start_time", "-1").strip())
    except ValueError:
        return -1


def read_mlflow_db(path: Path) -> Raw:
    """The newest active run of MLflow's SQLite store (``mlflow.db``, the default tracking
    store of mlflow 3), read with Python's ``sqlite3`` (the ``runs`` and ``metrics`` tables),
    not through mlflow: mlflow-skinny has no SQLAlchemy to open it."""
    raw = Raw(LogFormat.MLFLOW, path)
    try:
        with sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True) as db:
            run = db.execute("SELECT run_uuid FROM runs WHERE lifecycle_stage = 'active' "
                             "ORDER BY start_time DESC LIMIT 1").fetchone()
            if run is None:
                raise SpecError(f"{path}: this MLflow store has no active run")
            rows = db.execute("SELECT key, value, step, is_nan FROM metrics WHERE run_uuid = ? "
                              "ORDER BY timestamp, step", run).fetchall()
    except sqlite3.Error as exc:
        raise SpecError(f"{path}: not readable as an MLflow store ({exc})") from None
    for key, value, step, is_nan in rows:
        raw.add(str(key), int(step), math.nan if is_nan else float(value))
    raw.about["run"] = run[0]
    if not raw.tags:
        raise SpecError(f"{path}: MLflow run {run[0]} logged no metrics")
    return raw
