"""The frameworks' own checkpoints interrupted and resumed (``lrcheck run --interrupt-at N
--resume CMD``, here as ``record`` of the interrupted command then ``diff``, so that one
reference serves every pair): tests/fixtures/user_checkpoints.py in float64, ``--bs 16 --accum
2`` with a checkpoint every 2 updates against Accelerate's ``--bs 32`` uninterrupted (8 updates
an epoch, 16 in all; the three frameworks train alike). Each correct resume passes, the
updates trained twice said; each injected resume bug fails at the first resumed update with
its cause named. Slow: each pair is the framework imported in two processes (each rank's), so
the pairs are few and on 2 processes (``torchrun``, gloo; the 1-process resume is the same
code in one process, run by hand): one per framework's correct resume (Accelerate's with
another accumulation at once), and the bugs carried together by one pair of the cheapest
framework (Accelerate); and, on 1 process, Accelerate resumed with another accumulation whose
schedule is sized for the old one, named by ``lr``. The rows of docs/resume.md not here (the
Trainer's and Lightning's bugs on 1 and 2 processes among them) were run by hand."""

import re
import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.spec.interrupt import Interrupt
from tests.helpers import checks_by_name

SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_checkpoints.py"
# Two processes on one machine (gloo): each rank's processes joined, the ranks merged.
TWO = (str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """Accelerate's ``--bs 32`` run, recorded once (a fingerprint every update): the reference
    of every framework's pairs, the cheapest framework to start (the three train alike
    uninterrupted: the same samples, LR and weights at each update, ``lrcheck diff``-ed)."""
    out = tmp_path_factory.mktemp("reference") / "reference"
    api.record([sys.executable, str(SCRIPT), "accelerate", "--bs", "32"], out,
               fingerprint_every=1)
    return out


def _resumed(reference: Path, tmp_path: Path, framework: str, at: int, checkpoint: str, *bug: str,
             launch: tuple[str, ...] = (sys.executable,)):
    """The candidate (started by ``launch``) interrupted before update ``at``'s step
    (SIGTERM), resumed from ``checkpoint`` (in its checkpoint folder) with ``bug`` (options
    appended to its command line), diffed against the reference: the checks by name."""
    saved = tmp_path / "checkpoints"
    candidate = [*launch, str(SCRIPT), framework, "--bs", "16", "--accum", "2",
                 "--save-steps", "2", "--out", str(saved)]
    resume = shlex.join([*candidate, "--resume", str(saved / checkpoint), *bug])
    # A grace of 10 s: none of these saves on SIGTERM (their checkpoints are the loop's);
    # Lightning's handler lets a process carry on that may then wait for the SIGKILL.
    api.record(Interrupt.given(at, resume, "TERM", 10).command(candidate), tmp_path / "cand",
               fingerprint_every=1)
    report = api.diff(reference, tmp_path / "cand")
    return report, checks_by_name(report)


def _passes(report, checks, twice: str, at: int, step: int, sched: int | None = None) -> None:
    assert report.ok, [c.name for c in report.checks if c.status == "fail"]
    joined = checks["continuation (candidate)"].detail
    assert twice in joined and f"the resume restored the checkpoint of update {at - 1}" in joined
    assert (f"the optimizer's state (step counter {step}), the schedule (step "
            f"{step if sched is None else sched}) carried" in joined)
    assert checks["params"].status == "pass" and checks["data"].status == "pass"


def _fails(checks, at: int, *words: str) -> None:
    joined = checks["continuation (candidate)"]
    assert joined.status == "fail" and joined.first_divergence == at, joined.detail
    for said in words:
        assert said in joined.detail


def test_the_trainer_resume_from_checkpoint_on_two_processes_passes(reference, tmp_path):
    """The Trainer's ``resume_from_checkpoint`` on 2 processes, interrupted before update 5's
    step and resumed from checkpoint-4 under torchrun: update 4 trained twice, the ranks
    alike."""
    report, checks = _resumed(reference, tmp_path, "trainer", 5, "checkpoint-4", launch=TWO)
    _passes(report, checks, "update 4 was trained twice", 4, 4)
    assert checks["ranks (candidate)"].status == "pass"


def test_accelerate_on_two_processes_fresh_scheduler_and_sampler_without_epoch_fail_named(
        reference, tmp_path):
    """Accelerate's ``load_state`` on 2 processes in the second epoch (interrupted before
    update 11's step, resumed from checkpoint-10) with two bugs at once, each named at update
    10: the scheduler's state put back as it was before ``load_state`` (the schedule
    restarted; ``lr`` parts at 11, update 10 running at the restored optimizer's LR; the
    prepared scheduler steps once per process at each update: 20 after update 9), and a loop
    that never calls ``set_epoch`` (the seedable sampler starts the resumed epoch in epoch 0's
    order)."""
    _, checks = _resumed(reference, tmp_path, "accelerate", 11, "checkpoint-10",
                         "--bug", "fresh-scheduler", "--bug", "sampler-without-epoch",
                         launch=TWO)
    _fails(checks, 10, "update 10 was trained twice",
           "restarted the schedule at update 10: its step counter was 0, the first process's "
           "was 20 after update 9", "repeated the samples of updates 2-7 at updates 10-15",
           "a sampler without its epoch")
    assert checks["data"].first_divergence == 10 and checks["lr"].first_divergence == 11


def test_accelerate_on_two_processes_resumed_with_another_accumulation_passes(
        reference, tmp_path):
    """Accelerate's ``save_state``/``load_state`` with ``skip_first_batches`` and ``set_epoch``
    under ``torchrun --nproc_per_node 2`` (gloo; interrupted and resumed on 2 ranks, each
    rank's two processes joined), against the 1-process reference: interrupted before update
    11's step (the second epoch's fourth), resumed from checkpoint-10 with another
    accumulation (``--bs 8 --accum 4``: the same samples per update, which Accelerate allows;
    said where it joined)."""
    report, checks = _resumed(reference, tmp_path, "accelerate", 11, "checkpoint-10",
                              "--bs", "8", "--accum", "4", launch=TWO)
    # Accelerate steps the prepared scheduler once per process at each update: step 20.
    _passes(report, checks, "update 10 was trained twice", 10, 10, sched=20)
    assert ("resumed with another accumulation: 4 micro-batches per update from update 10, 2 "
            "before it") in checks["continuation (candidate)"].detail
    assert checks["ranks (candidate)"].status == "pass"


def test_accelerate_resumed_with_another_accumulation_and_a_schedule_sized_for_the_old_fails_lr(
        reference, tmp_path):
    """Accelerate on 1 process resumed from checkpoint-10 with ``--bs 8 --accum 4`` (as above)
    but its schedule's length computed from the old accumulation (``--sched-accum 2``: 32
    updates instead of 16): ``lr`` fails at update 11 (update 10 ran at the restored
    optimizer's LR), naming the accumulations, from what was recorded (each process's
    micro-batches per update, the LR against the reference's on a schedule scaled by their
    ratio; 2.4 %: the warmup of 3 updates against 1, rounded)."""
    _, checks = _resumed(reference, tmp_path, "accelerate", 11, "checkpoint-10",
                         "--bs", "8", "--accum", "4", "--sched-accum", "2")
    lr = checks["lr"]
    assert lr.status == "fail" and lr.first_divergence == 11, lr.detail
    assert ("; the schedule is sized for accumulation 2, the run accumulates 4: the second "
            "process (pid ") in lr.detail
    assert (") resumed at update 10 with 4 micro-batches per update, 2 before it, and from "
            "update 11 its LR at update u is the reference's at u × 2/4 (within 2.4 % of the "
            "peak LR, over updates 11-15): its schedule runs 2× too slow") in lr.detail
    joined = checks["continuation (candidate)"]
    assert joined.status == "pass" and "resumed with another accumulation" in joined.detail
    assert checks["data"].status == "pass"


def test_lightning_on_two_processes_at_the_epochs_edge_passes(reference, tmp_path):
    """Lightning's ``fit(ckpt_path=...)`` on 2 processes (its DDP strategy under torchrun,
    gloo) from the checkpoint at the first epoch's end (update 8), interrupted before update
    9's step (Lightning's SIGTERM handler may let one more update through: update 8, or 8-9,
    trained twice). Its resume from the middle of an epoch, whose plain DataLoader restarts the
    epoch's data, is a row of docs/resume.md run by hand: a data restart in the middle of an
    epoch is asserted on Accelerate's pair above."""
    report, checks = _resumed(reference, tmp_path, "lightning", 9, "epoch=0-step=8.ckpt",
                              launch=TWO)
    _passes(report, checks, "trained twice", 8, 8)
    assert re.search(r"(update 8 was|updates 8-9 were) trained twice",
                     checks["continuation (candidate)"].detail)
    assert checks["ranks (candidate)"].status == "pass"

