"""A launched job seen from the parent, with a stand-in for torchrun: what ``Launched`` keeps
when it is stopped part-way, and how it names the run that was going on."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import numpy as np
import pytest

from lrcheck.environment import Environment
from lrcheck.errors import RunError, SpecError
from lrcheck.procs import marks
from lrcheck.runner.ranks import handoff
from lrcheck.runner.ranks.launch import Exited, Launched, TorchrunLog
from lrcheck.spec import RunSpec
from lrcheck.trace import EpochMetrics, RunTrace, UpdateRecord

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

CANDIDATE = RunSpec(task="wine", bs=8, accum=2, world=2)
REFERENCE = RunSpec(task="wine", bs=32, accum=1, world=1)


def _trace(spec: RunSpec, n: int) -> RunTrace:
    updates = [UpdateRecord(k, (0.1,), 1.0, 32 * (k + 1), k, 0) for k in range(n)]
    return RunTrace(spec, updates, [EpochMetrics(0, n - 1, 0.9, 0.9)], np.zeros((n, 3)), n,
                    None, (), None, 0.5)


def _job(tmp_path, script: str = "import time; time.sleep(600)") -> Launched:
    token = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-c", script],
                            env={**os.environ, marks.MARKER_ENV: token}, start_new_session=True)
    seen: list[tuple[str, int]] = []
    hooks = {role: (lambda record, total, role=role: seen.append((role, record.step)))
             for role in ("candidate", "reference")}
    job = Launched(CANDIDATE, "candidate", ("candidate", "reference"), tmp_path, proc, token,
                   hooks)
    job.seen = seen  # type: ignore[attr-defined]
    return job


def test_a_job_stopped_during_the_reference_keeps_the_finished_candidate(tmp_path):
    # Rank 0 finished the candidate (its trace is written) and started the reference.
    handoff.write_environment(tmp_path, Environment(lrcheck="0.1.0", torch="x", device="cpu"))
    handoff.write_trace(tmp_path, _trace(CANDIDATE, 4), "candidate")
    for k in range(2):
        handoff.append_line(tmp_path, handoff.update_line(_trace(REFERENCE, 2).updates[k], 4,
                                                          "reference"))
    job = _job(tmp_path)
    job.stop()
    assert set(job.finished) == {"candidate"}
    assert len(job.finished["candidate"].updates) == 4
    assert job.environment == Environment(lrcheck="0.1.0", torch="x", device="cpu")
    assert job.seen == [("reference", 0), ("reference", 1)]
    assert job.watch.role == "reference"
    assert not tmp_path.exists()  # interrupted: the folder goes
    assert marks.marked(job.token) == []


def test_a_stall_after_the_candidate_is_told_as_the_reference_s(tmp_path):
    handoff.append_line(tmp_path, handoff.started_line("candidate"))
    handoff.append_line(tmp_path, handoff.update_line(_trace(CANDIDATE, 1).updates[0], 1,
                                                      "candidate"))
    handoff.append_line(tmp_path, handoff.started_line("reference"))
    job = _job(tmp_path)
    with pytest.raises(RunError, match=r"the reference run \(rank 0 alone\) made no progress "
                                       r"for 0.5 s \(--timeout\) before the first update"):
        job.wait(timeout=0.5)
    assert tmp_path.exists()  # a failure keeps the logs
    assert marks.marked(job.token) == []


def test_bad_input_from_the_ranks_is_a_spec_error(tmp_path):
    handoff.write_error(tmp_path, 1, "--resume-at 50: the run has 8 updates", "candidate",
                        bad_input=True)
    job = _job(tmp_path)
    with pytest.raises(SpecError, match="--resume-at 50"):
        job.wait(timeout=30)
    assert not tmp_path.exists()


def test_a_job_that_ends_without_the_reference_s_trace_names_the_reference(tmp_path):
    handoff.write_trace(tmp_path, _trace(CANDIDATE, 2), "candidate")
    job = _job(tmp_path, script="import sys; sys.exit(1)")
    with pytest.raises(RunError, match=r"the reference run \(rank 0 alone\) ended with torchrun "
                                       r"exit code 1"):
        job.wait(timeout=30)


# What torchrun 2.x logs when a worker dies (trimmed from a real log).
TORCHRUN_LOG = (
    "W1130 07:23:07.354000 3865 torch/distributed/elastic/multiprocessing/api.py:1028] "
    "Sending process {other} closing signal SIGTERM\n"
    "E1130 07:23:07.419000 3865 torch/distributed/elastic/multiprocessing/api.py:1002] "
    "failed (exitcode: -9) local_rank: 1 (pid: {pid}) of binary: /usr/bin/python\n"
) + """\
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: {other})
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: {pid})
  error_file: <N/A>
"""


def test_torchrun_s_log_gives_the_first_failure_each_exit_code_and_the_workers_it_stopped():
    log = TorchrunLog.parse(TORCHRUN_LOG.format(pid=3880, other=3879))
    assert log.first == Exited(rank=1, pid=3880, code=-9)
    assert log.codes == {3880: -9, 3879: -15}
    assert log.stopped == {3879}
    assert log.how(3880) == "killed by SIGKILL"
    assert log.how(3879) == "killed by SIGTERM"
    assert TorchrunLog.parse("failed (exitcode: 1) local_rank: 0 (pid: 7)").how(7) == (
        "exit code 1 without reporting an error")
    assert TorchrunLog().how(3880) == "its process is gone (torchrun's log does not say how)"


def _gone() -> int:
    """The pid of a process that has exited and been reaped."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _alive_pid() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])


def test_a_rank_that_died_is_named_with_its_signal_and_its_last_log_line(tmp_path):
    # Rank 1 died without a word; rank 0, which lost it, reported the consequence.
    peer = _alive_pid()
    dead = _gone()
    try:
        (tmp_path / "rank0.pid").write_text(str(peer.pid))
        (tmp_path / "rank1.pid").write_text(str(dead))
        handoff.log_path(tmp_path, 1).write_text("building the model\nupdate 3 done\n\n")
        handoff.write_error(tmp_path, 0, "RuntimeError: Connection closed by peer", "candidate")
        (tmp_path / handoff.TORCHRUN_LOG).write_text(TORCHRUN_LOG.format(pid=dead, other=peer.pid))
        job = _job(tmp_path, script="import sys; sys.exit(1)")
        with pytest.raises(RunError) as caught:
            job.wait(timeout=30)
    finally:
        peer.kill()
        peer.wait()
    assert str(caught.value) == (
        "rank 1 of 2 died in the candidate run: killed by SIGKILL; its last log line: "
        f"'update 3 done'; full log: {tmp_path / 'rank1.log'}")


def test_a_rank_torchrun_stopped_after_another_failed_is_not_blamed(tmp_path):
    # Rank 0 raised; torchrun then stopped rank 1 (its log says so): rank 0's error is the cause.
    stopped = _gone()
    (tmp_path / "rank0.pid").write_text(str(_gone()))
    (tmp_path / "rank1.pid").write_text(str(stopped))
    handoff.write_error(tmp_path, 0, "ValueError: boom", "candidate")
    (tmp_path / handoff.TORCHRUN_LOG).write_text(
        f"Sending process {stopped} closing signal SIGTERM\n")
    job = _job(tmp_path, script="import sys; sys.exit(1)")
    with pytest.raises(RunError, match=r"^rank 0 of 2 failed in the candidate run: "
                                       r"ValueError: boom; full log: "):
        job.wait(timeout=30)


def test_rank_0_dying_in_the_reference_is_told_as_rank_0_alone(tmp_path):
    handoff.write_trace(tmp_path, _trace(CANDIDATE, 2), "candidate")
    handoff.append_line(tmp_path, handoff.started_line("reference"))
    dead = _gone()
    (tmp_path / "rank0.pid").write_text(str(dead))
    handoff.write_done(tmp_path, 1)
    (tmp_path / "rank1.pid").write_text(str(_gone()))
    (tmp_path / handoff.TORCHRUN_LOG).write_text(
        f"failed (exitcode: -6) local_rank: 0 (pid: {dead}) of binary: python\n")
    job = _job(tmp_path, script="import sys; sys.exit(1)")
    with pytest.raises(RunError, match=r"^rank 0 of 1 died in the reference run: killed by "
                                       r"SIGABRT; its log is empty; full log: "):
        job.wait(timeout=30)
