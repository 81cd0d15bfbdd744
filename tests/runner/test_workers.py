"""runner.workers: workers started from one leader, each with its pipe, its own process group
and its mark; a worker that dies is told with how it died, what it started is killed, and
nothing is left once they end."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from lrcheck.procs.marks import HAS_PROC, alive, marked
from lrcheck.runner.workers import Ended, Message, NoWorkers, Quiet, Workers
from tests.helpers import HANG_S, wait_for

ENV = "LRCHECK_TEST_WORKERS"


def echo(number, pipe, greeting):
    """A worker: says who it is, then answers each message until it is given None; "start"
    starts a child that sleeps (and carries the worker's mark)."""
    pipe.send((greeting, number, os.getpid(), os.getpgrp(), os.environ.get(ENV)))
    while (body := pipe.recv()) is not None:
        if body == "start":
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            pipe.send(child.pid)
        else:
            pipe.send(body * 2)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="finding what the workers started needs /proc")
def test_workers_answer_die_with_their_children_and_leave_nothing():
    token = f"test-{os.getpid()}-{os.urandom(4).hex()}"
    workers = Workers(echo, ("hello",), mark_env=ENV, mark=token, env={})
    try:
        workers.start(2)
        hello = {}
        while len(hello) < 2:
            event = workers.receive(HANG_S)
            assert isinstance(event, Message), event
            hello[event.worker] = event.body
        for number, (greeting, said, pid, group, mark) in hello.items():
            assert (greeting, said, group, mark) == ("hello", number, pid, f"{token}-{number}")
        assert workers.receive(0.1) == Quiet()
        workers.send(0, 21)
        assert workers.receive(HANG_S) == Message(0, 42)
        workers.send(1, "start")
        child = workers.receive(HANG_S)
        assert isinstance(child, Message) and alive(child.body)
        os.kill(hello[1][2], signal.SIGKILL)
        assert workers.receive(HANG_S) == Ended(1, hello[1][2], -signal.SIGKILL)
        wait_for(lambda: not alive(child.body), HANG_S, "the dead worker's child to be killed")
        with pytest.raises(OSError):
            workers.send(1, 1)
    finally:
        workers.end(HANG_S)
    assert not any(alive(pid) for _, _, pid, _, _ in hello.values())
    assert not marked(f"{token}-0", ENV) and not marked(f"{token}-1", ENV)
    assert workers.receive(0) == NoWorkers()
