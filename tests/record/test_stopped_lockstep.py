"""``lrcheck run`` where lockstep stops early, for real: SGD with momentum 0.9 against 0 (the
optimizers' states differ after update 0). The updates after the stop are judged free-running
from fingerprints taken at every update, and the optimizer fails as a cause, with and without
``--strict``: never a pass of updates nobody compared. A correct pair whose schedule cycles the
momentum (OneCycleLR) passes, the momentum compared update by update."""

import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.command_pair import diff_runs
from lrcheck.recorder import read_records
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_lockstep.py"


def _line(*args: str) -> str:
    return shlex.join([sys.executable, str(SCRIPT), "--warmup", "0", "--opt", "sgd", *args])


def _checks(report):
    return checks_by_name(report)


@pytest.fixture(scope="module")
def momentum(tmp_path_factory):
    """The pair recorded once: the reference with momentum 0.9, the candidate with none."""
    out = tmp_path_factory.mktemp("momentum")
    report = api.run_commands(_line("--bs", "16"),
                              _line("--bs", "8", "--accum", "2", "--momentum", "0"), out)
    return out, report


def test_momentum_against_none_fails_naming_the_optimizer(momentum):
    out, report = momentum
    checks = _checks(report)
    assert not report.ok
    optimizer = checks["optimizer"]
    assert optimizer.status == "fail" and optimizer.first_divergence == 0
    assert optimizer.detail.startswith("the candidate's SGD has momentum 0 in group 0, the "
                                       "reference's 0.9")
    assert [c.name for c in report.checks].index("optimizer") == \
        [c.name for c in report.checks].index("lr") + 1  # a cause, beside the LR
    # Lockstep judged update 0; the 11 after it were judged free-running, and part.
    params = checks["params"]
    assert params.status == "fail" and params.first_divergence == 1, params.detail
    assert params.detail.startswith("free-running from update 1: ")
    assert "lockstep stopped after update 0: the optimizers' states differ" in params.detail
    assert checks["grad-norm"].status == "fail"
    assert not (out / "twin" / "run.json").exists()  # the optimizer explains it: no twin
    # Every update carries a fingerprint: the candidate's from the stop, the reference's in its
    # first updates and from when it sees the candidate stopped following.
    ref, cand = (read_records(out / side / "rank0.jsonl") for side in ("reference", "candidate"))
    assert len(ref) == len(cand) == 12
    assert all("fingerprint" in r for r in cand[1:]) and all("fingerprint" in r for r in ref)


def test_strict_fails_it_too(momentum):
    out, _ = momentum
    report = diff_runs(out / "reference", out / "candidate", strict=True)
    checks = _checks(report)
    assert not report.ok
    assert checks["optimizer"].status == "fail" and checks["params"].status == "fail"


def test_a_correct_pair_whose_schedule_cycles_the_momentum_passes(tmp_path):
    report = api.run_commands(_line("--bs", "16", "--onecycle", "--updates", "8"),
                              _line("--bs", "4", "--accum", "4", "--onecycle", "--updates", "8"),
                              tmp_path)
    checks = _checks(report)
    assert report.ok
    optimizer = checks["optimizer"]
    assert optimizer.status == "pass"
    assert "momentum changed over the updates (a schedule), the same in both" in \
        optimizer.detail
    assert checks["params"].status == "pass" and checks["grads"].status == "pass"
    assert "lockstep (7 updates started from the reference's state)" in checks["params"].detail
