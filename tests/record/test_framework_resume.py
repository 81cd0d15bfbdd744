"""The frameworks' own checkpoints interrupted and resumed (``lrcheck run --interrupt-at N
--resume CMD``, here as ``record`` of the interrupted command then ``diff``, so that one
reference per framework serves its pairs): tests/fixtures/user_checkpoints.py in float64,
``--bs 16 --accum 2`` with a checkpoint every 2 updates against ``--bs 32`` uninterrupted (8
updates an epoch, 16 in all). Each correct resume passes, the updates trained twice said; each
injected resume bug fails at the first resumed update with its cause named. Slow: each pair
is the framework imported in three processes."""

import re
import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.spec.interrupt import Interrupt

SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_checkpoints.py"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """Each framework's ``--bs 32`` reference, recorded once (a fingerprint every update)."""
    made: dict[str, Path] = {}

    def reference(framework: str) -> Path:
        if framework not in made:
            made[framework] = tmp_path_factory.mktemp(framework) / "reference"
            api.record([sys.executable, str(SCRIPT), framework, "--bs", "32"], made[framework],
                       fingerprint_every=1)
        return made[framework]

    return reference


def _resumed(references, tmp_path: Path, framework: str, at: int, checkpoint: str, *bug: str,
             launch: tuple[str, ...] = (sys.executable,)):
    """The candidate (started by ``launch``) interrupted before update ``at``'s step
    (SIGTERM), resumed from ``checkpoint`` (in its checkpoint folder) with ``bug`` (options
    appended to its command line), diffed
    against the reference: the checks by name."""
    saved = tmp_path / "checkpoints"
    candidate = [*launch, str(SCRIPT), framework, "--bs", "16", "--accum", "2",
                 "--save-steps", "2", "--out", str(saved)]
    resume = shlex.join([*candidate, "--resume", str(saved / checkpoint), *bug])
    api.record(Interrupt.given(at, resume, "TERM", 60).command(candidate), tmp_path / "cand",
               fingerprint_every=1)
    report = api.diff(references(framework), tmp_path / "cand")
    for c in report.checks:
        print(f"{c.name}: {c.status.value} at {c.first_divergence}: {c.detail}")
    return report, {c.name: c for c in report.checks}


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


def test_the_trainer_resume_from_checkpoint_passes_and_a_fresh_scheduler_fails(
        references, tmp_path):
    """The Trainer's ``resume_from_checkpoint``, interrupted before update 5's step and resumed
    from checkpoint-4 (update 4 trained twice); a Trainer subclass that restores the optimizer
    by hand and forgets the scheduler restarts the schedule at update 4, ``lr`` at 5 (update
    4's LR is the restored optimizer's)."""
    report, checks = _resumed(references, tmp_path / "ok", "trainer", 5, "checkpoint-4")
    _passes(report, checks, "update 4 was trained twice", 4, 4)
    _, checks = _resumed(references, tmp_path / "bug", "trainer", 5, "checkpoint-4",
                         "--bug", "fresh-scheduler")
    _fails(checks, 4, "restarted the schedule at update 4: its step counter was 0, the first "
           "process's was 4 after update 3")
    assert checks["lr"].first_divergence == 5


def test_accelerate_load_state_in_the_second_epoch_passes_and_without_set_epoch_fails_at_10(
        references, tmp_path):
    """Accelerate's ``save_state``/``load_state`` with ``skip_first_batches`` and ``set_epoch``,
    interrupted before update 11's step (the second epoch's fourth) and resumed from
    checkpoint-10 with another accumulation (``--bs 8 --accum 4``: the same samples per
    update, which Accelerate allows; said where it joined); without ``set_epoch`` the seedable
    sampler starts the resumed epoch in epoch 0's order."""
    report, checks = _resumed(references, tmp_path / "ok", "accelerate", 11, "checkpoint-10",
                              "--bs", "8", "--accum", "4")
    _passes(report, checks, "update 10 was trained twice", 10, 10)
    assert ("resumed with another accumulation: 4 micro-batches per update from update 10, 2 "
            "before it") in checks["continuation (candidate)"].detail
    _, checks = _resumed(references, tmp_path / "epoch", "accelerate", 11, "checkpoint-10",
                         "--bug", "sampler-without-epoch")
    _fails(checks, 10, "repeated the samples of updates 2-7 at updates 10-15",
           "a sampler without its epoch")
    assert checks["data"].first_divergence == 10 and checks["lr"].status == "pass"


def test_accelerate_on_two_processes_resumed_under_torchrun_passes(references, tmp_path):
    """The same under ``torchrun --nproc_per_node 2`` (gloo; interrupted and resumed on 2
    ranks, each rank's two processes joined), against the 1-process reference."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    report, checks = _resumed(references, tmp_path, "accelerate", 11, "checkpoint-10",
                              launch=(torchrun, "--nproc_per_node", "2"))
    # Accelerate steps the prepared scheduler once per process at each update: step 20.
    _passes(report, checks, "update 10 was trained twice", 10, 10, sched=20)
    assert checks["ranks (candidate)"].status == "pass"


def test_lightning_at_the_epochs_edge_passes_and_mid_epoch_repeats_the_epochs_samples(
        references, tmp_path):
    """Lightning's ``fit(ckpt_path=...)``: from the checkpoint at the first epoch's end
    (update 8, interrupted before update 9's or 10's step: Lightning's SIGTERM handler may let
    one more update through) the resume passes; from one in the middle of the second epoch
    (update 10), Lightning, whose plain DataLoader keeps no position, starts the epoch's data
    again: the samples of updates 8-13 repeated at 10-15."""
    report, checks = _resumed(references, tmp_path / "edge", "lightning", 9,
                              "epoch=0-step=8.ckpt")
    _passes(report, checks, "trained twice", 8, 8)
    assert re.search(r"(update 8 was|updates 8-9 were) trained twice",
                     checks["continuation (candidate)"].detail)
    _, checks = _resumed(references, tmp_path / "mid", "lightning", 11, "epoch=1-step=10.ckpt")
    _fails(checks, 10, "repeated the samples of updates 8-13 at updates 10-15: its data "
           "restarted from update 8")
    assert checks["data"].first_divergence == 10
