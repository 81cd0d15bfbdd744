"""Logs against the recording for real: the plain fixture (tests/fixtures/logs_plain.py,
TensorBoard events) recorded by ``lrcheck run`` and ``lrcheck record --logs``. A correct
log matches its record; each injected logging bug is named in the logs section while the
training verdict stays PASS; a scheduler stepped per micro-batch fails ``lr`` as
training, and the logs section says so apart."""

import json
import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "fixtures" / "logs_plain.py"


def _line(log: Path, *args: str) -> str:
    return shlex.join([sys.executable, str(SCRIPT), "--out", str(log), *args])


def _run(tmp_path, ref_args, cand_args):
    out = tmp_path / "out"
    report = api.run_commands(_line(tmp_path / "ref", *ref_args),
                              _line(tmp_path / "cand", *cand_args), out,
                              ref_logs=tmp_path / "ref", logs=tmp_path / "cand")
    logs = {(f.side, f.quantity.value): f for f in report.logs}
    for f in report.logs:
        print(f.side, f.quantity.value, f.status.value, f.first_update, f.says)
    return report, logs, json.loads((api.save_report(report, out) / "result.json").read_text())


def test_a_pre_clip_norm_and_a_loss_times_ga_are_named_while_the_training_passes(tmp_path):
    report, logs, data = _run(tmp_path, ["--bug", "preclip-norm"],
                              ["--accum", "2", "--bug", "loss-x-ga"])
    assert report.ok and report.exit_code == 0
    norm = logs["reference", "grad_norm"]
    assert (norm.status, norm.first_update) == ("differs", 0)
    assert norm.says.startswith("the logged grad norm is the pre-clip norm: clipping to "
                                "max_norm 0.5 did happen")
    assert logs["reference", "lr"].says == (
        "the logged LR is the LR each update used, at the 12 updates logged; steps: detected "
        "from the samples logged (8 per step, 8 at step 0): steps count updates from 0, as the "
        "recording confirms")
    assert logs["reference", "loss"].status == "matches"
    loss = logs["candidate", "loss"]
    assert (loss.status, loss.first_update) == ("differs", 0)
    assert loss.says.startswith("the logged loss is 2.000× the loss that was differentiated")
    assert logs["candidate", "lr"].status == logs["candidate", "grad_norm"].status == "matches"
    assert data["verdict"] == "pass" and len(data["logs"]) == 6


def test_a_scheduler_per_micro_batch_fails_lr_and_is_not_put_down_to_the_logs(tmp_path):
    from lrcheck.reports.logs import apart

    report, logs, _ = _run(tmp_path, ["--bug", "lr-next"],
                           ["--accum", "2", "--sched-per-microbatch"])
    assert not report.ok and report.check("lr").status == "fail"
    assert report.check("lr").first_divergence == 0
    lr = logs["reference", "lr"]
    assert (lr.status, lr.first_update) == ("differs", 0)
    assert lr.says.startswith("the logged LR is the next update's (off by one from update 0)")
    assert apart(report).startswith("The training checks failed on their own (lr")
    # the candidate's log holds the LR each of its updates used: the difference is the
    # training's, and the logs section does not claim it
    assert logs["candidate", "lr"].status == "matches", logs["candidate", "lr"].says
    assert all(f.status == "matches" for f in report.logs if f.side == "candidate")


def test_record_logs_of_a_correct_log_matches_and_writes_logs_json(tmp_path):
    run = api.record(shlex.split(_line(tmp_path / "log", "--accum", "2")), tmp_path / "rec",
                     logs=tmp_path / "log", capture=True)
    assert [(f.quantity.value, f.status.value) for f in run.logs] == [
        ("lr", "matches"), ("loss", "matches"), ("grad_norm", "matches")]
    assert run.logs[2].says.startswith("the logged grad norm is the post-clip norm")
    written = json.loads((tmp_path / "rec" / "logs.json").read_text())["logs"]
    assert written == [f.to_dict() for f in run.logs]
