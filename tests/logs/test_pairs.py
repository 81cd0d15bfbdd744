"""``lrcheck diff`` of two runs' own logs (``logs.pairs``), on the logs the real libraries
wrote (tests/logs/conftest.py): a correct pair passes, a scheduler stepped per micro-batch
fails ``lr`` at the first update whose LR differs, through the library and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lrcheck
from lrcheck.errors import SpecError
from tests.cli.helpers import invoke
from tests.logs.test_read import plain_lr

pytestmark = pytest.mark.slow


def checks(report) -> dict:
    return {c.name: c for c in report.checks}


def test_a_correct_pair_passes(plain_logs, tmp_path):
    """Accumulation 1 against 2 at the same effective batch: the training matches, so do the
    logs, as TensorBoard events and as MLflow stores."""
    for ref, cand in ((plain_logs["ref"] / "tb", plain_logs["cand"] / "tb"),
                      (plain_logs["ref"], plain_logs["cand"])):
        report = lrcheck.diff(ref, cand)
        found = checks(report)
        assert report.ok, report.checks
        names = ("updates", "lr", "loss", "grad-norm", "evidence")
        assert [found[name].status.value for name in names] == ["pass"] * len(names)
        assert "12 updates logged by both, aligned by samples seen" in found["updates"].detail
        assert "incomparable" not in found
    result = invoke("diff", str(plain_logs["ref"] / "tb"), str(plain_logs["cand"] / "tb"),
                    "--out", str(tmp_path / "report"))
    assert result.exit_code == 0
    saved = json.loads((tmp_path / "report" / "result.json").read_text())
    assert saved["verdict"] == "pass" and (tmp_path / "report" / "report.html").exists()
    page = (tmp_path / "report" / "report.md").read_text()
    assert "the runs' own logs, 12 updates logged by both, aligned by samples seen" in page
    assert "Recorder files" not in page
    assert {c["name"] for c in saved["checks"]} >= {"lr", "loss", "grad-norm", "limits"}
    assert "float32" in next(c for c in saved["checks"] if c["name"] == "limits")["detail"]


def test_a_scheduler_per_micro_batch_fails_lr_where_it_first_differs(plain_logs, tmp_path):
    ks = np.arange(12)
    ref, cand = plain_lr(ks), plain_lr(ks, per_update=2)
    first = int(np.flatnonzero(~np.isclose(ref, cand, rtol=1e-6, atol=0))[0])
    report = lrcheck.diff(plain_logs["ref"] / "tb", plain_logs["micro"] / "tb")
    lr = checks(report)["lr"]
    assert (lr.status.value, lr.first_divergence) == ("fail", first)
    assert f"first differs at update {first} (of 12 both logged)" in lr.detail
    result = invoke("diff", str(plain_logs["ref"]), str(plain_logs["micro"]),
                    "--out", str(tmp_path / "report"))
    assert result.exit_code == 1 and f"first differs at update {first}" in result.stdout


def test_logged_every_n_steps_compares_the_updates_both_logged(plain_logs):
    report = lrcheck.diff(plain_logs["ref"] / "tb", plain_logs["every"] / "tb")
    found = checks(report)
    assert report.ok, report.checks
    assert "4 updates logged by both" in found["updates"].detail
    assert "candidate: logged every 3 steps" in found["limits"].detail


def test_float32_events_against_float64_state_and_the_tags_only_one_has(trainer_logs):
    """The Trainer's own events (float32) against its trainer_state.json (float64): the same
    run, equal within a float32 step; the tags each names differently are listed."""
    report = lrcheck.diff(trainer_logs / "runs", trainer_logs / "trainer_state.json")
    found = checks(report)
    assert report.ok, report.checks
    assert "within a float32 step" in found["lr"].detail
    assert found["incomparable"].status.value == "skip"
    assert "only the reference logged train/epoch" in found["incomparable"].detail
    assert "only the candidate logged epoch" in found["incomparable"].detail


def test_two_param_groups_from_lightnings_csv(lightning_logs):
    """Lightning at accumulation 1 against 2 (``lr-SGD/pg1``, ``/pg2``): the LR of both groups
    equal at every update. Its loss is each update's last micro-batch's, so it is compared but
    not judged here."""
    report = lrcheck.diff(lightning_logs.parent / "ref", lightning_logs)
    lr = checks(report)["lr"]
    assert lr.status.value == "pass" and "at all 8 updates both logged" in lr.detail
    assert "last micro-batch" in checks(report)["limits"].detail
    # its loss means another thing at each accumulation: said, a warning, not a FAIL
    loss = checks(report)["loss"]
    assert (loss.status.value, report.exit_code) == ("warn", 0)
    assert loss.detail.startswith("the logged losses mean different things")
    assert "the candidate's: the last of 2 micro-batches" in loss.detail


def test_the_trainer_every_update_against_every_4(trainer_logs, tmp_path):
    """The same Trainer training (accumulation 2, 8 updates) logged every update against
    every 4 (accumulation 1): its loss every 4 updates is the window's mean, compared with the
    other's averaged over the same windows; the LR plot draws the second at updates 3 and 7."""
    from lrcheck.reports.plots import aligned_lr_plot
    from tests.fixtures import logs_trainer
    from tests.logs.conftest import _write

    every = _write(logs_trainer, tmp_path / "every4", ["--accum", "1", "--every", "4"])
    report = lrcheck.diff(trainer_logs, every)
    found = checks(report)
    assert report.ok, report.checks
    assert found["loss"].detail.startswith("the reference's loss averaged over the "
                                           "candidate's logging windows (4 updates")
    assert "at 2 windows" in found["loss"].detail
    plot = aligned_lr_plot(report, tmp_path / "lr.png")
    assert plot.args["cand"][0].tolist() == [3, 7]
    assert plot.args["ref"][0].tolist() == list(range(8))


def test_a_log_against_a_recording_is_bad_input(plain_logs, tmp_path):
    recorder = tmp_path / "run.jsonl"
    recorder.write_text("")
    with pytest.raises(SpecError, match="is a training log.*is not"):
        lrcheck.diff(plain_logs["ref"] / "tb", recorder)
    result = invoke("diff", str(tmp_path / "missing"), str(plain_logs["ref"]))
    assert result.exit_code == 2
