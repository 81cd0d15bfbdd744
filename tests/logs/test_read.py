"""``logs.read`` on the logs the real libraries wrote (tests/logs/conftest.py): TensorBoard
events (a plain loop's, the Trainer's, Lightning's), ``trainer_state.json``, Lightning's
``metrics.csv``, an MLflow file store; the tag table, what a step means, the newest run, and
the errors, on small files made here."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from lrcheck.errors import SpecError
from lrcheck.logs.formats import read_mlflow_db
from lrcheck.logs.model import LogFormat, Quantity, Series, StepUnit
from lrcheck.logs.read import _from_samples, find_logs, is_log_folder, read_logs
from lrcheck.logs.tags import quantity

LR, LOSS, NORM, SAMPLES = Quantity.LR, Quantity.LOSS, Quantity.GRAD_NORM, Quantity.SAMPLES


def plain_lr(k: np.ndarray, updates: int = 12, per_update: int = 1) -> np.ndarray:
    """The plain fixture's LR at update k: LambdaLR 1 - s / (steps + 1) from 0.2, ``s`` the
    scheduler steps before update k's optimizer step (``per_update`` of them per update)."""
    steps = updates * per_update
    return 0.2 * (1 - (k * per_update + per_update - 1) / (steps + 1))


@pytest.mark.parametrize(("tag", "expected"), [
    ("learning_rate", (LR, 0)), ("train/learning_rate", (LR, 0)), ("lr", (LR, 0)),
    ("lr-AdamW", (LR, 0)), ("lr-AdamW/pg1", (LR, 0)), ("lr-AdamW/pg2", (LR, 1)),
    ("lr-Adam-1", None), ("loss", (LOSS, 0)), ("train/loss", (LOSS, 0)),
    ("train_loss", (LOSS, 0)), ("train_loss_step", (LOSS, 0)), ("train_loss_epoch", None),
    ("train/train_loss", None), ("grad_norm", (NORM, 0)), ("train/grad_norm", (NORM, 0)),
    ("samples", (SAMPLES, 0)), ("train/num_input_tokens_seen", None), ("epoch", None),
    ("momentum-SGD", None)])
def test_tag_table(tag, expected):
    assert quantity(tag) == expected


def test_step_meaning_from_samples():
    def meaning(steps, seen):
        return _from_samples(Series(SAMPLES, "samples", tuple(steps), tuple(seen)))

    assert meaning([0, 1, 2], [8, 16, 24]).first == 0
    one = meaning([1, 2, 4], [8, 16, 32])
    assert one.first == 1 and "8 per step" in one.how
    assert meaning([0, 1, 2], [8, 16, 32]) is None  # not regular
    assert meaning([0, 1, 2], [24, 32, 40]) is None  # would start at step -2
    assert meaning([5], [8]) is None


def _csv(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.invalid_files  # a stub run.json: a record folder is told by it being there
def test_newest_run_and_the_most_precise_format(tmp_path):
    old = _csv(tmp_path / "lightning_logs" / "version_0" / "metrics.csv", "step,lr-SGD\n0,0.1\n")
    new = _csv(tmp_path / "lightning_logs" / "version_1" / "metrics.csv", "step,lr-SGD\n0,0.2\n")
    os.utime(old, (1_000, 1_000))
    assert find_logs(tmp_path) == new
    assert read_logs(tmp_path).at_updates(LR)[1].tolist() == [0.2]
    for stamp in ("1700000000", "1800000000"):  # the Trainer's runs/<date>_<host>/
        _csv(tmp_path / "runs" / stamp / f"events.out.tfevents.{stamp}.host.1.0", "")
    assert find_logs(tmp_path) == new  # metrics.csv (float64) before events (float32)
    assert find_logs(tmp_path / "runs") == tmp_path / "runs" / "1800000000"
    assert is_log_folder(tmp_path) and is_log_folder(new)
    (tmp_path / "run.json").write_text("{}")
    assert not is_log_folder(tmp_path)  # a record folder


def test_errors_name_the_file(tmp_path):
    with pytest.raises(SpecError, match="no log found"):
        find_logs(tmp_path)
    bad = _csv(tmp_path / "a" / "metrics.csv", "epoch,loss\n0,1.0\n")
    with pytest.raises(SpecError, match=f"{bad}: not a Lightning metrics.csv: no step column"):
        read_logs(bad)
    bad = _csv(tmp_path / "b" / "metrics.csv", "step,loss\n0,1.0\n1,oops\n")
    with pytest.raises(SpecError, match=f"{bad}, line 3: loss is 'oops', not a number"):
        read_logs(bad)
    bad = _csv(tmp_path / "c" / "trainer_state.json", "{not json")
    with pytest.raises(SpecError, match=f"{bad}: cannot be read as JSON"):
        read_logs(bad)
    bad = _csv(tmp_path / "d" / "trainer_state.json", '{"global_step": 3}')
    with pytest.raises(SpecError, match="no log_history list"):
        read_logs(bad)
    bad = _csv(tmp_path / "e" / "events.out.tfevents.1.host", "not an event file at all")
    with pytest.raises(SpecError, match=f"{bad}: no scalars"):
        read_logs(bad)
    run = tmp_path / "f" / "mlruns" / "0" / "abc"
    _csv(run / "meta.yaml", "lifecycle_stage: active\nstart_time: 5\n")
    _csv(run / "metrics" / "lr", "123 0.1 0\n123 oops\n")
    with pytest.raises(SpecError, match=r"metrics/lr, line 2: '123 oops' is not"):
        read_logs(tmp_path / "f")
    offline = tmp_path / "g" / "wandb" / "offline-run-20260101_000000-abc"
    offline.mkdir(parents=True)
    assert is_log_folder(tmp_path / "g")
    with pytest.raises(SpecError, match="W&B offline run, not readable here.*wandb package"):
        read_logs(tmp_path / "g")


def test_mlflow_sqlite_store(tmp_path):
    """mlflow 3's default store, ``mlflow.db``: mlflow-skinny (the logs extra) cannot write
    one (no SQLAlchemy), so the two tables read are made here with mlflow's column names."""
    path = tmp_path / "mlflow.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE runs (run_uuid TEXT, start_time INTEGER, "
                   "lifecycle_stage TEXT)")
        db.execute("CREATE TABLE metrics (key TEXT, value REAL, timestamp INTEGER, "
                   "run_uuid TEXT, step INTEGER, is_nan INTEGER)")
        db.executemany("INSERT INTO runs VALUES (?, ?, ?)",
                       [("old", 1, "active"), ("new", 2, "active"), ("gone", 3, "deleted")])
        db.executemany("INSERT INTO metrics VALUES (?, ?, ?, ?, ?, ?)",
                       [("lr", 0.5, 1, "old", 0, 0), ("lr", 0.2, 1, "new", 0, 0),
                        ("lr", 0.1, 2, "new", 1, 0), ("lr", 9.0, 1, "gone", 0, 0)])
    assert read_mlflow_db(path).tags == {"lr": [(0, 0.2), (1, 0.1)]}
    assert read_logs(tmp_path).format is LogFormat.MLFLOW


@pytest.mark.slow
def test_plain_loop_tensorboard_and_mlflow(plain_logs):
    events = read_logs(plain_logs["ref"] / "tb")
    store = read_logs(plain_logs["ref"] / "mlruns")
    assert (events.format, store.format) == (LogFormat.TENSORBOARD, LogFormat.MLFLOW)
    assert read_logs(plain_logs["ref"]).format is LogFormat.MLFLOW  # float64 before float32
    ks, lrs = store.at_updates(LR)
    assert ks.tolist() == list(range(12))
    np.testing.assert_allclose(lrs, plain_lr(ks), rtol=1e-15)
    assert events.at_updates(LR)[1].tolist() == lrs.astype(np.float32).tolist()
    assert events.series[LR].dtype == "float32" and any("float32" in s for s in events.limits)
    for q in (LOSS, NORM):
        assert events.at_updates(q)[1].tolist() == store.at_updates(q)[1].astype(
            np.float32).tolist()
    assert events.steps.first == 0 and events.steps.how.startswith("detected from the samples")
    assert events.every == 1 and events.unmapped == ()
    every = read_logs(plain_logs["every"] / "tb")
    assert every.every == 3 and every.at_updates(LR)[0].tolist() == [0, 3, 6, 9]
    assert any("every 3 steps" in s for s in every.limits)
    stated = read_logs(plain_logs["cand"] / "tb", accum=2, first_step=0)
    assert stated.steps.unit is StepUnit.MICRO_BATCH and stated.steps.how.startswith("stated")
    assert stated.at_updates(LR)[0].tolist() == list(range(6))  # 12 steps, 2 per update


@pytest.mark.slow
def test_trainer_state_and_its_events(trainer_logs, tmp_path):
    state = read_logs(trainer_logs)
    assert state.path == trainer_logs / "trainer_state.json"
    assert state.format is LogFormat.TRAINER_STATE and state.steps.first == 1
    assert "trainer_state.json" in state.steps.how and state.every == 1
    ks, lrs = state.at_updates(LR)
    assert ks.tolist() == list(range(8))
    np.testing.assert_allclose(lrs, 0.2 * (1 - ks / 8), rtol=1e-15)  # linear, from 0.2 to 0
    assert "epoch" in state.unmapped and LOSS in state.series and NORM in state.series
    events = read_logs(trainer_logs / "runs")
    assert events.format is LogFormat.TENSORBOARD and events.steps.first == 1
    assert "args/text_summary, gradient_accumulation_steps 2, logging_steps 1" in events.steps.how
    assert events.at_updates(LR)[1].tolist() == lrs.astype(np.float32).tolist()
    assert "train/train_loss" in events.unmapped and events.series[LOSS].tag == "train/loss"
    assert any("before clipping" in s for s in events.limits)
    for name in ("checkpoint-4", "checkpoint-8"):  # no save_state: the last checkpoint's
        shutil.copytree(trainer_logs / name, tmp_path / name,
                        ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "*.pt"))
    assert find_logs(tmp_path) == tmp_path / "checkpoint-8" / "trainer_state.json"


@pytest.mark.slow
def test_lightning_csv_and_events(lightning_logs):
    table = read_logs(lightning_logs)
    assert table.format is LogFormat.LIGHTNING_CSV and table.path.name == "metrics.csv"
    assert table.series[LR].tag == "lr-SGD/pg1" and table.series[LOSS].tag == "train_loss"
    assert [s.tag for s in table.lr_groups] == ["lr-SGD/pg2"]
    ks, lrs = table.at_updates(LR)
    assert ks.tolist() == list(range(8)) and table.steps.first == 0
    np.testing.assert_allclose(lrs, 0.2 * (1 - ks / 9), rtol=1e-15)
    second = table.series_at_updates(table.lr_groups[0])
    assert second[0].tolist() == ks.tolist()
    np.testing.assert_allclose(second[1], lrs / 2, rtol=1e-15)
    assert any("last micro-batch" in s for s in table.limits)
    events = read_logs(lightning_logs / "tb")
    assert events.format is LogFormat.TENSORBOARD and events.steps.first == 0
    assert events.at_updates(LR)[1].tolist() == lrs.astype(np.float32).tolist()
    assert events.at_updates(NORM)[0].tolist() == table.at_updates(NORM)[0].tolist()


def test_tensorboard_v2_summaries_written_as_tensors(tmp_path):
    """tensorboard's own ``Writer`` (TB v2 summaries, as ``tf.summary.scalar`` writes them)
    stores scalars as tensors of the scalars plugin: read as scalars."""
    from tensorboard.summary import Writer

    writer = Writer(str(tmp_path / "run"))
    for k, lr in enumerate((0.3, 0.2, 0.1)):
        writer.add_scalar("train/learning_rate", lr, step=k + 1)
        writer.add_scalar("train/loss", 2.0 - k, step=k + 1)
    writer.close()
    run = read_logs(tmp_path)
    assert run.format is LogFormat.TENSORBOARD and run.path == tmp_path / "run"
    ks, lrs = read_logs(tmp_path, first_step=1).at_updates(LR)
    assert ks.tolist() == [0, 1, 2]
    np.testing.assert_allclose(lrs, [0.3, 0.2, 0.1], rtol=2.0 ** -23)
    assert run.at_updates(LOSS)[1].tolist() == [2.0, 1.0, 0.0]


@pytest.mark.slow
def test_the_newest_mlflow_run(tmp_path, monkeypatch):
    """Two runs logged by mlflow into one file store: the one that started last is read."""
    from tests.fixtures.logs_plain import _mlflow

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    _mlflow(tmp_path, [("lr", 0.5, 0), ("lr", 0.4, 1)])
    _mlflow(tmp_path, [("lr", 0.2, 0), ("lr", 0.1, 1)])
    run = read_logs(tmp_path)
    assert run.format is LogFormat.MLFLOW and run.at_updates(LR)[1].tolist() == [0.2, 0.1]
    assert len(list((tmp_path / "mlruns").glob("*/*/meta.yaml"))) == 2
