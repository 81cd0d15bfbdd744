"""Stopping a launch: torchrun's workers live in sessions of their own, so signalling torchrun's
group is not enough; every process that carries the launch's marker must go."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from lrcheck.procs import marks
from tests.helpers import HANG_S, wait_for

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="needs /proc (Linux)")

# A stand-in for torchrun: it starts a "worker" in a new session, as torchrun does, and both
# ignore SIGTERM, so only SIGKILL stops them.
LAUNCHER = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c",
                  "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                  "time.sleep(600)"],
                 start_new_session=True)
time.sleep(600)
"""


def test_stop_kills_the_launcher_and_its_worker_in_another_session(monkeypatch):
    monkeypatch.setattr(marks, "TERM_GRACE_S", 0.3)
    token = uuid.uuid4().hex
    env = {**os.environ, marks.MARKER_ENV: token}
    proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], env=env, start_new_session=True)
    # The worker carries the marker from its fork on, and has its session only once its
    # setsid() ran: wait for both, not for the moment between.
    def started() -> list[int] | None:
        found = marks.marked(token)
        worker = [p for p in found if p != proc.pid]
        try:
            alone = len(found) == 2 and os.getsid(worker[0]) != os.getsid(proc.pid)
        except (IndexError, ProcessLookupError):
            return None
        return found if alone else None

    pids = wait_for(started, HANG_S, "the launcher and its worker in a session of its own",
                    proc=proc)
    assert len(pids) == 2 and proc.pid in pids  # out of reach of the launcher's group

    marks.stop(proc, token)  # both ignore SIGTERM: only the SIGKILL after the grace stops them
    assert marks.marked(token) == []
    assert proc.returncode == -9


def test_stop_after_a_clean_exit_is_a_no_op():
    token = uuid.uuid4().hex
    proc = subprocess.Popen([sys.executable, "-c", "pass"],
                            env={**os.environ, marks.MARKER_ENV: token})
    proc.wait()
    marks.stop(proc, token)
    assert proc.returncode == 0
