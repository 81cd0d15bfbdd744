"""A launched job seen from the parent, with a stand-in for torchrun: what ``Launched`` keeps
when it is stopped part-way, and how it names the run that was going on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

from lrcheck.errors import RunError, SpecError
from lrcheck.runner import handoff, procs
from lrcheck.runner.launch import Launched
from lrcheck.spec import RunSpec
from lrcheck.trace import EpochMetrics, RunTrace, UpdateRecord

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

CANDIDATE = RunSpec(task="wine", bs=8, accum=2, world=2)
REFERENCE = RunSpec(task="wine", bs=32, accum=1, world=1)


def _trace(spec: RunSpec, n: int) -> RunTrace:
    updates = [UpdateRecord(k, (0.1,), 1.0, 32 * (k + 1), k, 0) for k in range(n)]
    return RunTrace(spec, updates, [EpochMetrics(0, n - 1, 0.9, 0.9)], np.zeros((n, 3)), n,
                    {"total_updates": n}, (), None, 0.5)


def _job(tmp_path, script: str = "import time; time.sleep(600)") -> Launched:
    token = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-c", script],
                            env={**os.environ, procs.MARKER_ENV: token}, start_new_session=True)
    seen: list[tuple[str, int]] = []
    hooks = {role: (lambda record, total, role=role: seen.append((role, record.step)))
             for role in ("candidate", "reference")}
    job = Launched(CANDIDATE, ("candidate", "reference"), tmp_path, proc, token, hooks)
    job.seen = seen  # type: ignore[attr-defined]
    return job


def test_a_job_stopped_during_the_reference_keeps_the_finished_candidate(tmp_path):
    # Rank 0 finished the candidate (its trace is written) and started the reference.
    handoff.write_environment(tmp_path, {"torch": "x", "device": "cpu"})
    handoff.write_trace(tmp_path, _trace(CANDIDATE, 4), "candidate")
    for k in range(2):
        handoff.append_line(tmp_path, handoff.update_line(_trace(REFERENCE, 2).updates[k], 4,
                                                          "reference"))
    job = _job(tmp_path)
    job.stop()
    assert set(job.finished) == {"candidate"}
    assert len(job.finished["candidate"].updates) == 4
    assert job.environment == {"torch": "x", "device": "cpu"}
    assert job.seen == [("reference", 0), ("reference", 1)]
    assert job.watch.role == "reference"
    assert not tmp_path.exists()  # interrupted: the folder goes
    assert procs.marked(job.token) == []


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
    assert procs.marked(job.token) == []


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
    deadline = time.monotonic() + 10
    with pytest.raises(RunError, match=r"the reference run \(rank 0 alone\) ended with torchrun "
                                       r"exit code 1"):
        job.wait(timeout=30)
    assert time.monotonic() < deadline
