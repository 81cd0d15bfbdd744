"""``cadence`` for real: a user's script (tests/fixtures/user_cadence.py) recorded unmodified by
``lrcheck run``, two commands in lockstep. A correct accumulation pair, clipping once per update
and an EMA updated once per update, passes; clipping after every backward, zero_grad before
every micro-batch and an EMA updated per micro-batch each fail ``cadence`` naming the call; the
EMA model itself is compared as ``ema-params``: equal in the correct pair, parted after update 0
where it was updated per micro-batch."""

import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_cadence.py"
REFERENCE = ["--bs", "16", "--clip", "--ema"]
CANDIDATE = ["--bs", "4", "--accum", "4", "--clip", "--ema"]


def _line(*args: str) -> str:
    return shlex.join([sys.executable, str(SCRIPT), *args])


def _cadence(tmp_path, cand_args, ref_args=REFERENCE):
    report = api.run_commands(_line(*ref_args), _line(*cand_args), tmp_path / "out")
    checks = checks_by_name(report)
    return report, checks["cadence"], checks["ema-params"]


def test_a_correct_accumulation_pair_passes_clipping_and_the_ema_once_per_update(tmp_path):
    report, cadence, ema = _cadence(tmp_path, CANDIDATE)
    assert report.ok and cadence.status == "pass", cadence.detail
    # In lockstep the candidate's EMA folds in the reference's weights, loaded at every update:
    # equal to the last bit after update 0 and after the last (the default fingerprints).
    assert ema.status == "pass" and ema.max_rel_diff == 0.0, ema.detail
    assert "after 2 fingerprinted updates (the last 5)" in ema.detail
    assert "every backward pass reached its update in both runs" in cadence.detail
    assert "clip_grad_norm_ as often (1 per update)" in cadence.detail
    assert "the EMA (AveragedModel.update_parameters) as often (0, 1 per update)" in cadence.detail
    assert "backward ran 4 times per update in the candidate against 1" in cadence.detail
    assert "the optimizer's step counter equal" in cadence.detail


def test_clipping_after_every_backward_fails_at_update_0_naming_clip_grad_norm(tmp_path):
    report, cadence, _ = _cadence(tmp_path, [*CANDIDATE, "--clip-per-micro"])
    assert not report.ok
    assert (cadence.status, cadence.first_divergence) == ("fail", 0)
    assert cadence.detail.startswith(
        "clip_grad_norm_ ran 4 times per update in the candidate against 1 in the reference "
        "(from update 0): clipping after every backward, not once per update")


def test_zero_grad_before_every_micro_batch_fails_naming_zero_grad(tmp_path):
    report, cadence, _ = _cadence(tmp_path, [*CANDIDATE, "--zero-per-micro"])
    assert not report.ok
    assert (cadence.status, cadence.first_divergence) == ("fail", 0)
    assert cadence.detail.startswith(
        "zero_grad ran before every micro-batch of the candidate: only the last of 4 "
        "micro-batches reached the update (from update 0)")


def test_an_ema_per_micro_batch_fails_naming_the_ema(tmp_path):
    report, cadence, ema = _cadence(tmp_path, ["--bs", "4", "--accum", "4", "--clip",
                                               "--ema-per-micro"],
                                    ["--bs", "16", "--clip", "--ema-per-micro"])
    assert not report.ok
    assert (cadence.status, cadence.first_divergence) == ("fail", 0)
    assert cadence.detail.startswith(
        "the EMA (AveragedModel.update_parameters) was updated 4 times per update in the "
        "candidate against 1 in the reference (from update 0): on every micro-batch")
    # The candidate's EMA folded update 0's weights in 4 times, the reference's once.
    assert (ema.status, ema.first_divergence) == ("fail", 0), ema.detail
    assert ema.detail.startswith("the EMA (AveragedModel) of the candidate parts from the "
                                 "reference's after update 0 (|Δsum|/max|p| ")
    assert "in lockstep the candidate's weights are the reference's" in ema.detail
