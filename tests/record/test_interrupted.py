"""``lrcheck run --interrupt-at N --resume CMD``: the candidate (a plain ``torch.save`` loop that
checkpoints every 4 updates) interrupted as a preemption interrupts it, resumed by its own
command, and held against the uninterrupted reference as one run. Between two checkpoints
(SIGTERM in the middle of update 14's window) the correct resume passes in float64, the updates
12-13 it trained twice said; at a checkpoint (SIGKILL before update 16's step) a resume whose
data restarted fails at update 16, the repeated updates named; a checkpoint saved inside a
window, with its gradients, whose resume continues the window passes, and whose resume feeds
the window again fails at that update, the micro-batches counted twice named; a resume under
dropout and an augmentation that did not restore torch's, NumPy's and Python's RNGs fails at
the first update trained twice, named.
And the driver on its own (no torch): the resume runs once every rank reached the point; a
candidate that ends first is said. Slow: each pair is four processes importing torch (the
options' checks are not)."""

import os
import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.errors import SpecError
from lrcheck.record import interrupt
from lrcheck.spec import Tolerances
from lrcheck.spec.interrupt import Interrupt
from tests.helpers import checks_by_name

SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_lockstep.py"
RUN = [sys.executable, str(SCRIPT), "--updates", "24", "--dtype", "float64"]


def _pair(tmp_path: Path, at: int, sig: str, *bug: str, micro: int | None = None,
          run: tuple[str, ...] = tuple(RUN), save: tuple[str, ...] = ("--save-every", "4"),
          every: int | None = 1):
    saved = str(tmp_path / "c.pt")
    cand = [*run, "--bs", "4", "--accum", "4", *save, "--save", saved]
    report = api.run_commands(shlex.join([*run, "--bs", "16"]), shlex.join(cand),
                              tmp_path / "out", fingerprint_every=every, interrupt_at=at,
                              interrupt_after_micro=micro,
                              resume=shlex.join([*cand, "--resume", saved, *bug]),
                              interrupt_signal=sig, grace=60)
    return report, checks_by_name(report)


@pytest.mark.slow
def test_a_resume_between_checkpoints_passes_and_says_what_was_trained_twice(tmp_path):
    # In the middle of update 14's window (2 of its 4 backward passes made): the resume
    # restores update 11's checkpoint, the cut window's gradients gone with the process, and
    # the states of NumPy's and Python's RNGs, which an augmentation draws from at every
    # micro-batch (changing nothing: --augment 0). Fingerprinted as lrcheck does by default
    # (every 50 updates): the resumed process, which runs free, and the reference of an
    # interrupted pair fingerprint every update themselves.
    report, checks = _pair(tmp_path, 14, "TERM", micro=2, run=(*RUN, "--augment", "0"),
                           every=None)
    assert report.ok, [c.name for c in report.checks if c.status == "fail"]
    assert checks["updates"].detail.startswith("24 in both files")
    assert checks["data"].status == "pass" and checks["lr"].status == "pass"
    joined = checks["continuation (candidate)"].detail
    assert ("updates 12-13 were trained twice: the resume restored the checkpoint of update 11, "
            "the first process had made 14 updates") in joined
    assert ("at update 12 the second process (pid " in joined and "resumed: the weights, the "
            "optimizer's state (step counter 12), the schedule (step 12), NumPy's global RNG "
            "stream, Python's random stream carried") in joined
    params = checks["params"]  # the resumed updates judged free-running, float64 exactly
    assert params.status == "pass" and params.detail.startswith(
        "free-running from update 12, at 12 fingerprinted updates"), params.detail
    assert "before it, lockstep (11 updates started from the reference's state)" in params.detail


@pytest.mark.slow
def test_a_resume_that_did_not_load_the_weights_fails_where_it_resumed_named(tmp_path):
    # The optimizer's state and the schedule loaded, the model not: in lockstep (the first
    # process's updates started from the reference's state) and fingerprinted as by default.
    report, checks = _pair(tmp_path, 14, "TERM", "--fresh", "model", every=None)
    joined = checks["continuation (candidate)"]
    assert not report.ok and joined.status == "fail" and joined.first_divergence == 12
    assert ("did not start update 12 from the weights the first process had after update 11 "
            "(the model's state_dict not loaded") in joined.detail
    assert checks["params"].status == "fail" and checks["params"].first_divergence == 12
    assert checks["params"].detail.startswith("free-running from update 12")
    assert checks["lr"].status == "pass" and checks["data"].status == "pass"


@pytest.mark.slow
def test_a_resume_at_a_checkpoint_whose_data_restarted_fails_there_named(tmp_path):
    report, checks = _pair(tmp_path, 16, "KILL", "--fresh", "data")
    joined = checks["continuation (candidate)"]
    assert not report.ok and joined.status == "fail" and joined.first_divergence == 16
    assert "trained twice" not in joined.detail
    assert ("the resumed run repeated the samples of updates 0-7 at updates 16-23: its data "
            "restarted from the beginning") in joined.detail
    assert checks["data"].first_divergence == 16 and checks["lr"].status == "pass"


# 8 updates: the pairs cut in update 5's window share one reference, recorded once.
SHORT = [*RUN[:3], "8", *RUN[4:]]


@pytest.fixture(scope="module")
def short_reference(tmp_path_factory) -> Path:
    """``--bs 16`` over 8 updates, float64, a fingerprint every update."""
    out = tmp_path_factory.mktemp("short") / "reference"
    api.record([*SHORT, "--bs", "16"], out, fingerprint_every=1)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("how", [["--continue-window"], ["--bug", "window-twice"]])
def test_a_window_cut_whose_gradients_the_resume_loaded_is_continued_or_fed_twice(
        short_reference, tmp_path, how):
    # SIGTERM after 2 of update 5's 4 backward passes: the script's handler saves where it
    # stands, the window's gradients so far too; the resume loads them into .grad and either
    # continues the window from its micro-batch 2 (correct) or feeds it again from its start
    # (the bug: micro-batches 0-1 counted twice). Recorded one after the other (free-running),
    # so that params and grad-norm judge the resumed updates too, then diffed.
    saved = str(tmp_path / "c.pt")
    cand = [*SHORT, "--bs", "4", "--accum", "4", "--save-on-term", "--save", saved]
    resume = shlex.join([*cand, "--resume", saved, *how])
    api.record(Interrupt.given(5, resume, "TERM", 60, micro=2).command(cand), tmp_path / "cand",
               fingerprint_every=1)
    report = api.diff(short_reference, tmp_path / "cand",
                      tolerances=Tolerances.for_dtype("float64"))
    checks = checks_by_name(report)
    joined = checks["continuation (candidate)"]
    assert "trained twice" not in joined.detail
    assert checks["data"].status == "pass" and checks["lr"].status == "pass"
    assert checks["cadence"].status == "pass"  # the same backward passes reach each update
    if how == ["--continue-window"]:
        assert report.ok, [c.name for c in report.checks if c.status == "fail"]
        assert ("resumed: the weights, the optimizer's state (step counter 5), the schedule "
                "(step 5), update 5's window, continued (the gradients of the 2 backward "
                "passes made into it before the interrupt, in 4 tensors' .grad) carried"
                ) in joined.detail
        assert checks["data"].detail.startswith("the same samples behind all 8 updates")
        return
    assert not report.ok and joined.status == "fail" and joined.first_divergence == 5
    assert joined.detail.startswith(
        "update 5's window was fed twice: micro-batches 0-1 counted twice (6 of 4 backward "
        "passes): the second process (pid ")
    # Free-running, the weights show it from that update on.
    assert checks["params"].status == "fail" and checks["params"].first_divergence == 5


@pytest.mark.slow
def test_a_resume_that_did_not_restore_the_rngs_under_dropout_and_augmentation_fails_named(
        tmp_path):
    # Dropout draws from torch's RNG at every update, an augmentation from NumPy's and Python's
    # random; the checkpoint of update 3 holds their states, which --fresh does not restore:
    # update 4, trained twice, is drawn again from other streams (a correct resume passes:
    # above, and docs/resume.md).
    report, checks = _pair(tmp_path, 6, "TERM", "--fresh", "rng", "--fresh", "numpy",
                           "--fresh", "random",
                           run=(*RUN[:3], "8", *RUN[4:], "--dropout", "0.1", "--augment", "0"))
    joined = checks["continuation (candidate)"]
    assert not report.ok and joined.status == "fail" and joined.first_divergence == 4
    assert ("updates 4-5 were trained twice" in joined.detail and "the second process (pid "
            in joined.detail and ") drew update 4 from another torch RNG stream, another NumPy "
            "RNG stream and another Python random stream: their states at update 4's step were "
            "not the ones the first process had there" in joined.detail)
    assert checks["data"].status == "pass" and checks["lr"].status == "pass"


FAKE = ("import os, signal; fd = os.open(os.environ[{env!r}].split(':', 1)[1], os.O_WRONLY); "
        "os.write(fd, b'0 1 %d\\n' % os.getpid()); os.close(fd); signal.pause()")


@pytest.mark.slow
@pytest.mark.parametrize(("micro", "where"), [
    ([], "before update 3's step"),
    (["--micro", "2"], "after backward pass 2 of update 3's window")])
def test_the_driver_interrupts_once_the_point_is_reached_then_resumes(tmp_path, capfd, micro,
                                                                      where):
    marker = tmp_path / "resumed"
    told = f"import os; open({str(marker)!r}, 'w').write(os.environ[{interrupt.ENV_RESUMED!r}])"
    resume = shlex.join([sys.executable, "-c", told])
    fake = [sys.executable, "-c", FAKE.format(env=interrupt.ENV_INTERRUPT)]
    code = interrupt.main(["--at", "3", *micro, "--signal", "TERM", "--grace", "60",
                           "--resume", resume, "--", *fake])
    assert code == 0 and marker.read_text() == "1"
    assert f"interrupted {where} (SIGTERM; exit code -15)" in capfd.readouterr().err


@pytest.mark.slow
def test_a_candidate_that_ends_before_the_point_is_said_and_not_resumed(tmp_path, capfd):
    marker = tmp_path / "resumed"
    code = interrupt.main(["--at", "3", "--resume", f"touch {marker}", "--",
                           sys.executable, "-c", "raise SystemExit(0)"])
    assert code == 3 and not marker.exists()
    assert "ended (exit code 0) before update 3: it was not interrupted" in capfd.readouterr().err
    assert interrupt.ENV_INTERRUPT not in os.environ


@pytest.mark.parametrize(("given", "words"), [
    ((3, None), "--interrupt-at and --resume go together"),
    ((0, "x"), "--interrupt-at must be a number of updates >= 1, got 0"),
    ((3, "x", "HUP"), "--interrupt-signal must be one of TERM, KILL, got 'HUP'"),
    ((3, "x", "TERM", -1), "--grace must be a number of seconds >= 0, got -1"),
    ((3, "'"), "the resume command \"'\" does not split"),
    ((3, "x", "TERM", 1, 0), "--interrupt-after-micro must be a number of backward passes >= 1"),
    ((None, None, "TERM", 1, 2), "--interrupt-after-micro 2 needs --interrupt-at"),
])
def test_bad_options_are_named(given, words):
    with pytest.raises(SpecError, match=words.replace("(", r"\(").replace("'", ".")):
        Interrupt.given(*given)
    assert Interrupt.given(None, None) is None
