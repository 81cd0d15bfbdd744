"""Users' own training recorded unmodified under each launcher (tests/fixtures/user_*.py): a
correct configuration passes against its big-batch reference, a known bug fails at the update
it acts on. Slow: every run is a fresh Python process that imports torch (and a framework)."""

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lrcheck import api
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parents[1] / "fixtures"
PY = sys.executable
PLAIN = [PY, str(FIXTURES / "user_train.py")]
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(FIXTURES / "user_train.py")]


def _checks(report):
    return checks_by_name(report)


def _diff(tmp_path, ref, cand, name, recorded: Path | None = None):
    """Record ``cand`` and diff it against ``recorded``, the reference's recording, else
    ``ref`` recorded into ``tmp_path / "ref"`` (once: several candidates share it)."""
    if recorded is None:
        recorded = tmp_path / "ref"
        if not recorded.exists():
            api.record(ref, recorded, fingerprint_every=1)
    api.record(cand, tmp_path / name, fingerprint_every=1)
    report = api.diff(recorded, tmp_path / name)
    for c in report.checks:
        print(name, c.name, c.status.value, c.first_divergence, c.detail)
    return report


def test_plain_script_and_torchrun_pass_and_their_bugs_fail_at_update_0(tmp_path):
    ref = [*PLAIN, "--bs", "32"]
    assert _diff(tmp_path, ref, [*PLAIN, "--bs", "16", "--accum", "2"], "accum").exit_code == 0
    bug = _checks(_diff(tmp_path, ref, [*PLAIN, "--bs", "16", "--accum", "2", "--bug",
                                        "per-micro-batch"], "per-micro"))
    assert bug["lr"].status == "fail" and bug["lr"].first_divergence == 0
    assert "2 steps per update against 1" in bug["lr"].detail
    ddp = _diff(tmp_path, ref, [*TORCHRUN, "--bs", "8", "--accum", "2"], "ddp")
    assert ddp.exit_code == 0 and _checks(ddp)["replicas (candidate)"].status == "pass"
    # Each rank's micro-batches, merged: the same 32 samples behind each update, each 1/32.
    assert all(_checks(ddp)[n].status == "pass" for n in ("data", "weights"))
    about = json.loads((tmp_path / "ddp" / "run.json").read_text())
    assert about["world_size"] == 2 and sorted(about["updates"]) == ["rank0.jsonl", "rank1.jsonl"]
    world = _checks(_diff(tmp_path, ref, [*TORCHRUN, "--bs", "8", "--accum", "2", "--bug",
                                          "forget-world"], "forget-world"))
    assert world["lr"].status == "fail" and world["lr"].first_divergence == 0


ACCELERATE = [str(FIXTURES / "user_frameworks.py"), "accelerate"]


@pytest.fixture(scope="module")
def accelerate_ref(tmp_path_factory) -> Path:
    """Accelerate's bs-32 reference in one process, recorded once: the schedule-bug test's
    reference and the one ``accelerate launch`` on two processes is diffed against."""
    folder = tmp_path_factory.mktemp("accelerate")
    api.record([PY, *ACCELERATE, "--out", str(folder / "x"), "--bs", "32"], folder / "ref",
               fingerprint_every=1)
    return folder / "ref"


@pytest.mark.parametrize("framework", ["trainer", "lightning", "accelerate"])
def test_a_schedule_sized_in_micro_batches_fails_in_each_framework_and_lightning_passes(
        tmp_path, framework, request):
    """Recorded free-running, one after the other (``lrcheck record``, then ``lrcheck
    diff``). Lightning clips (``gradient_clip_val``, inside ``optimizer.step``'s closure) in the
    reference and the correct candidate, which passes here; its bug also clips by hand in
    ``on_after_backward`` instead, after every micro-batch: ``cadence`` names that, at update 0,
    beside ``lr``. The Trainer's and Accelerate's correct pairs pass in lockstep in
    test_framework_bugs.py (a recording of each fewer here: seconds of a framework's start)."""
    run = [PY, str(FIXTURES / "user_frameworks.py"), framework, "--out", str(tmp_path / "x")]
    clip = ["--clip", "0.5"] if framework == "lightning" else []
    ref = [*run, "--bs", "32", *clip]
    if clip:
        good = _diff(tmp_path, ref, [*run, "--bs", "16", "--accum", "2", *clip], "good")
        assert good.exit_code == 0 and _checks(good)["params"].status == "pass"
        assert _checks(good)["data"].status == "pass"
        assert _checks(good)["weights"].status == "pass"
    by_hand = ["--clip-by-hand"] if clip else []
    shared = request.getfixturevalue("accelerate_ref") if framework == "accelerate" else None
    bug = _checks(_diff(tmp_path, ref, [*run, "--bs", "16", "--accum", "2", *clip, *by_hand,
                                        "--bug", "forget-accum"], "bug", shared))
    assert bug["lr"].status == "fail" and bug["lr"].first_divergence == 0
    if clip:
        assert "clip_grad_norm_ as often (1 per update)" in _checks(good)["cadence"].detail
        cadence = bug["cadence"]
        assert (cadence.status, cadence.first_divergence) == ("fail", 0)
        assert cadence.detail.startswith(
            "clip_grad_norm_ ran 2 times per update in the candidate against 1 in the "
            "reference (from update 0): clipping after every backward, not once per update")


def test_lrcheck_run_writes_the_report_and_exits_with_the_verdict_or_3(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(api.__file__).parents[1])}
    ref = f"{PY} {PLAIN[1]} --bs 32 --epochs 1"
    cand = f"{PY} {PLAIN[1]} --bs 16 --accum 2 --epochs 1"
    done = subprocess.run([PY, "-m", "lrcheck", "run", "--quiet", "--samples", "32", "--out",
                           str(tmp_path / "r"), ref, cand], env=env, capture_output=True, text=True)
    print(done.stdout, done.stderr)
    assert done.returncode == 0 and done.stdout.startswith("verdict: PASS")
    result = json.loads((tmp_path / "r" / "result.json").read_text())
    assert result["schema_version"] == 1 and result["verdict"] == "pass"
    assert {"report.md", "report.html", "reference", "candidate"} <= {
        p.name for p in (tmp_path / "r").iterdir()}
    failed = subprocess.run([PY, "-m", "lrcheck", "run", "--quiet", "--out", str(tmp_path / "f"),
                             ref, f"{PY} -c 'import sys; print(\"boom\"); sys.exit(5)'"],
                            env=env, capture_output=True, text=True)
    print(failed.stderr)
    assert failed.returncode == 3 and "exit code 5" in failed.stderr and "boom" in failed.stderr


def test_accelerate_launch_multi_gpu_records_two_ranks_on_the_cpu(tmp_path, accelerate_ref):
    """docs/own-training.md's Accelerate candidate as typed: ``accelerate launch --multi_gpu
    --num_processes 2`` starts two processes on a CPU machine (gloo; without --multi_gpu it
    starts one), ``lrcheck record`` records both, and their parameters agree."""
    env = {**os.environ, "PYTHONPATH": str(Path(api.__file__).parents[1]),
           "HF_HOME": str(tmp_path / "hf")}  # no accelerate config of the machine's user
    accelerate = str(Path(PY).with_name("accelerate"))
    script = [*ACCELERATE, "--out", str(tmp_path / "x")]
    # Its own session, so that a hang is stopped with every process accelerate started.
    proc = subprocess.Popen([PY, "-m", "lrcheck", "record", "--fingerprint-every", "1", "--out",
                             str(tmp_path / "two"), "--", accelerate, "launch", "--multi_gpu",
                             "--num_processes", "2", *script, "--bs", "8", "--accum", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    print(out, err)
    assert proc.returncode == 0
    assert "recorded 16 update(s) on 2 rank(s)" in err
    about = json.loads((tmp_path / "two" / "run.json").read_text())
    assert about["world_size"] == 2
    assert about["updates"] == {"rank0.jsonl": 16, "rank1.jsonl": 16}
    checks = _checks(api.diff(accelerate_ref, tmp_path / "two"))
    assert checks["updates"].status == "pass"
    assert checks["replicas (candidate)"].status == "pass"


def test_torchrun_whose_scheduler_steps_on_rank_0_only_fails_ranks_at_update_1(tmp_path):
    """``if rank == 0: scheduler.step()`` in a logging block: rank 0's LR is the reference's
    (``lr`` passes), rank 1's stays at its first value, which ``ranks`` names at update 1, where
    it first acts (update 0's LR is the one the scheduler set at construction, on every rank);
    the correct torchrun pair passes it (test_framework_bugs.py's torchrun pair, the same two
    commands: recorded once). Through ``lrcheck run``'s lockstep, which loads the reference's
    state but leaves each rank's LR its own."""
    ref = shlex.join([*PLAIN, "--bs", "32"])
    bug = _checks(api.run_commands(ref, shlex.join([*TORCHRUN, "--bs", "8", "--accum", "2",
                                                    "--bug", "scheduler-rank0-only"]),
                                   tmp_path / "bug"))
    print(bug["ranks (candidate)"].detail)
    assert bug["lr"].status == "pass"  # rank 0's schedule is right
    assert bug["ranks (candidate)"].status == "fail"
    assert bug["ranks (candidate)"].first_divergence == 1
    assert bug["ranks (candidate)"].detail.startswith(
        "rank 1's LR differs from rank 0's from update 1 (0.001 on rank 1, 0.002 on rank 0): "
        "its scheduler did not step (0 scheduler.step() calls on rank 1 against 1 on rank 0 "
        "before update 1)")
    # In lockstep every candidate rank judges its own update from the reference's state: rank
    # 1's update, made with its LR, parts there.
    params = bug["params"]
    print(params.detail)
    assert params.status == "fail" and params.first_divergence == 1
    assert params.detail.startswith("rank 1 of 2: lockstep")


def test_torchrun_that_clips_on_rank_0_only_fails_ranks_at_update_0(tmp_path):
    """``clip_grad_norm_`` inside rank 0's logging block: rank 0 clips as the reference does
    (``cadence``, rank 0's, passes), rank 1 never does, which ``ranks`` names from update 0.
    4 updates: the fewest the evidence needs, and the start-up is most of the run."""
    short = ["--clip", "0.5", "--epochs", "1", "--samples", "128"]
    bug = _checks(api.run_commands(
        shlex.join([*PLAIN, "--bs", "32", *short]),
        shlex.join([*TORCHRUN, "--bs", "8", "--accum", "2", *short, "--bug", "clip-rank0-only"]),
        tmp_path / "bug"))
    ranks = bug["ranks (candidate)"]
    print(ranks.detail)
    assert bug["cadence"].status == "pass" and bug["lr"].status == "pass"
    assert (ranks.status, ranks.first_divergence) == ("fail", 0)
    assert ranks.detail == ("rank 1's clip_grad_norm_ ran 0 times per update against rank 0's 1 "
                            "(from update 0): the 2 ranks of the candidate do not train alike")
