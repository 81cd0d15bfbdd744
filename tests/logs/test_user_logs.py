"""Logs as users' own loops and the libraries write them, read without a traceback: the
PyTorch TensorBoard tutorial's tags (``Loss/train``, ``LearningRate``), ``add_scalars``'
sub-folders, two writers in one folder, and logs that hold nothing lrcheck can compare, each
a ``SpecError`` that lists the tags it has; tags and step conventions a user states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lrcheck.errors import SpecError
from lrcheck.logs.model import Quantity, StepUnit
from lrcheck.logs.read import read_logs, reading
from lrcheck.logs.steps import from_steps, stated_steps
from lrcheck.logs.tags import parse_tags, quantity

LR, LOSS, NORM = Quantity.LR, Quantity.LOSS, Quantity.GRAD_NORM


def tutorial(folder: Path, every: int = 1, updates: int = 20, start: int = 0) -> Path:
    """A loop logging as the PyTorch TensorBoard tutorial does: ``Loss/train`` and
    ``LearningRate`` by ``add_scalar``, ``Loss`` by ``add_scalars`` (train and val)."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for k in range(updates):
        step = k + start
        if step % every == 0:
            writer.add_scalar("Loss/train", 1.0 / (k + 1), step)
            writer.add_scalar("LearningRate", 0.1 * (1 - k / updates), step)
            writer.add_scalars("Loss", {"train": 1.0 / (k + 1), "val": 2.0 / (k + 1)}, step)
    writer.close()
    return folder


@pytest.mark.parametrize(("tag", "expected"), [
    ("Loss/train", LOSS), ("LearningRate", LR), ("LR", LR), ("Learning-Rate", LR),
    ("train/loss", LOSS), ("Train/Loss", LOSS), ("lr-AdamW", LR), ("train/grad_norm", NORM),
    ("Loss/val", None), ("train_loss_epoch", None)])
def test_the_names_users_and_libraries_log_under(tag, expected):
    found = quantity(tag)
    assert (found[0] if found else None) == expected


def test_a_stated_tag_and_a_bad_one():
    assert parse_tags(["lr=LearningRate", "loss=Loss/train"]) == {LR: "LearningRate",
                                                                   LOSS: "Loss/train"}
    assert parse_tags({"grad_norm": "gn"}) == {NORM: "gn"}
    for bad in (["learning=x"], ["lr"], ["lr="]):
        with pytest.raises(SpecError, match="give QUANTITY=TAG, QUANTITY one of lr, loss"):
            parse_tags(bad)


def test_stated_and_inferred_step_conventions():
    assert stated_steps("updates-from-1").first == 1
    micro = stated_steps("micro-batches:4")
    assert (micro.unit, micro.per_update, micro.update(7), micro.update(8)) == (
        StepUnit.MICRO_BATCH, 4, 1, 2)
    samples = stated_steps("samples:32")
    assert (samples.update(32), samples.update(64)) == (0, 1)
    assert stated_steps("micro-batches").per_update == 0  # the recording says it
    with pytest.raises(SpecError, match="log steps 'epochs': one of updates-from-0"):
        stated_steps("epochs")
    assert from_steps([0, 1, 2], 1).first == 0
    assert from_steps([1, 2, 3], 1).first == 1
    assert from_steps([10, 20, 30], 10).first == 1 and "interval 10" in from_steps(
        [10, 20, 30], 10).how
    assert from_steps([9, 19, 29], 10) is None


def test_the_tutorials_tags_and_add_scalars_subfolders(tmp_path):
    run = read_logs(tutorial(tmp_path / "tb"))
    assert run.series[LOSS].tag == "Loss/train" and run.series[LR].tag == "LearningRate"
    assert "Loss/val" in run.unmapped  # add_scalars' Loss_val/ read as Loss/val
    assert run.steps.first == 0 and run.steps.how.startswith("inferred from the steps")
    np.testing.assert_allclose(run.at_updates(LOSS)[1], 1.0 / np.arange(1, 21), rtol=1e-7)
    stated = read_logs(tmp_path / "tb", tags={LOSS: "Loss/val"})
    assert stated.series[LOSS].tag == "Loss/val" and "Loss/train" in stated.unmapped
    with pytest.raises(SpecError, match=r"no tag 'loss' \(given for lr\); its tags: "
                                        "LearningRate, Loss/train, Loss/val"):
        read_logs(tmp_path / "tb", tags=reading(["lr=loss"]).tags)


def test_two_writers_logging_the_same_steps_into_one_folder(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    for rank in range(2):
        writer = SummaryWriter(str(tmp_path), filename_suffix=f".rank{rank}")
        for k in range(4):
            writer.add_scalar("loss", 1.0 + rank + k, k)
        writer.close()
    run = read_logs(tmp_path)
    assert len(run.at_updates(LOSS)[0]) == 4
    assert any("2 event files log the same steps (every rank logging into one folder?)" in s
               for s in run.limits)


def _file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("name", "text", "says"), [
    ("trainer_state.json", '{"log_history": [], "global_step": 0}',
     r"no value logged in it \(trainer_state: an empty log_history\)"),
    ("metrics.csv", "epoch,step,train_loss\n",
     r"no value logged in it \(lightning_csv: no row\)"),
    ("metrics.csv", "step,val_acc\n0,0.5\n1,0.6\n",
     r"no LR, loss or gradient norm among its tags \(val_acc\); say which tag is which with "
     "--tag lr=TAG")])
def test_a_log_with_nothing_to_compare_lists_what_it_has(tmp_path, name, text, says):
    path = _file(tmp_path / name, text)
    with pytest.raises(SpecError, match=f"{path}: {says}"):
        read_logs(path)


def test_a_stated_convention_that_puts_a_step_before_update_0(tmp_path):
    tutorial(tmp_path)
    with pytest.raises(SpecError, match="logged at step 0, before update 0 where stated"):
        read_logs(tmp_path, steps=stated_steps("updates-from-1"))


def test_diff_of_the_tutorials_logs_and_of_logs_it_cannot_map(tmp_path):
    """``lrcheck diff`` of two tutorial-tagged logs, one written every 10 updates (at 9, 19):
    compared, and drawn at its updates; of a log with nothing to compare: exit 2, one line."""
    from lrcheck.api import diff
    from lrcheck.reports.plots import aligned_loss_plot, aligned_lr_plot
    from tests.cli.helpers import invoke

    every = tutorial(tmp_path / "every", every=10, start=1)  # steps 10, 20: updates 9, 19
    report = diff(tutorial(tmp_path / "ref"), every, log_steps=None)
    assert report.ok, report.checks
    assert aligned_lr_plot(report, tmp_path / "lr.png").args["cand"][0].tolist() == [9, 19]
    assert aligned_loss_plot(report, tmp_path / "l.png").args["cand"][0].tolist() == [9, 19]
    _file(tmp_path / "acc" / "metrics.csv", "step,val_acc\n0,0.5\n1,0.6\n")
    result = invoke("diff", str(tmp_path / "ref"), str(tmp_path / "acc"))
    assert result.exit_code == 2
    assert "no LR, loss or gradient norm among its tags (val_acc)" in result.output
    assert "Traceback" not in result.output
    result = invoke("diff", str(tmp_path / "acc"), str(tmp_path / "ref"), "--tag",
                    "loss=val_acc", "--tag", "lr=LearningRate")
    assert result.exit_code == 2 and "no tag 'LearningRate' (given for lr)" in result.output


def test_a_wandb_history_and_chart_exported_as_csv(tmp_path):
    """A CSV given by name: W&B's run history (``train/global_step``: the Trainer's step,
    from 1; a row without one is not a step's) and a chart's export (``Step``, ``<run> -
    <tag>`` columns and their ``__MIN``/``__MAX`` ranges, which are not values)."""
    history = _file(tmp_path / "history.csv",
                    "_step,_runtime,train/global_step,train/loss,train/learning_rate\n"
                    "0,1.0,1,2.0,0.1\n1,2.0,2,1.5,0.09\n2,3.5,,,\n")
    run = read_logs(history)
    assert run.format.value == "csv" and run.steps.first == 1
    assert run.at_updates(LR)[0].tolist() == [0, 1] and run.unmapped == ()
    chart = _file(tmp_path / "chart.csv", "Step,run-1 - train/loss,run-1 - train/loss__MIN\n"
                                          "1,2.0,2.0\n2,1.5,1.5\n")
    assert read_logs(chart).series[LOSS].tag == "train/loss" and read_logs(chart).unmapped == ()
    with pytest.raises(SpecError, match="not a log: no step column"):
        read_logs(_file(tmp_path / "data.csv", "x,y\n1,2\n"))


def test_a_run_nested_in_the_folder_is_not_read_with_it(tmp_path):
    """A sub-folder of events that is not ``add_scalars``' (another run, ``add_hparams``'
    time-stamped one) is left out of the run's tags."""
    from torch.utils.tensorboard import SummaryWriter

    tutorial(tmp_path, updates=3)
    nested = SummaryWriter(str(tmp_path / "1712345678.9"))
    nested.add_scalar("LearningRate", 9.0, 0)
    nested.close()
    lrs = read_logs(tmp_path).at_updates(LR)[1]
    np.testing.assert_allclose(lrs, [0.1, 0.1 * 2 / 3, 0.1 / 3], rtol=1e-6)


def test_every_ranks_writers_are_named_against_the_recording(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    from lrcheck.logs.truth import hold

    for rank in range(2):
        writer = SummaryWriter(str(tmp_path), filename_suffix=f".rank{rank}")
        for k in range(3):
            writer.add_scalar("lr", 0.1, k)
        writer.close()
    records = [{"step": k, "lr": [0.1], "loss_micro": [1.0], "loss_backward": 1.0}
               for k in range(3)]
    (found,) = hold(read_logs(tmp_path), records, "candidate")
    assert found.says.endswith("2 event files log the same steps (every rank logging into one "
                               f"folder?): the first file's values read, not "
                               f"{sorted(p.name for p in tmp_path.iterdir())[1]}")


def test_diff_of_logs_needs_the_count_of_a_stated_unit(tmp_path):
    from lrcheck.api import diff

    tutorial(tmp_path / "a", updates=3)
    with pytest.raises(SpecError, match="steps stated to count micro-batches, but not how many "
                                        "per update: give it"):
        diff(tmp_path / "a", tmp_path / "a", log_steps="micro-batches")
    report = diff(tmp_path / "a", tmp_path / "a", log_steps="micro-batches:1")
    assert "steps: stated: steps count micro-batches from 0, 1 per update" in report.check(
        "limits").detail
