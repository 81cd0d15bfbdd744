"""Never orphan: ``lrcheck run`` killed with SIGKILL (the OOM killer, a CI timeout) leaves
nothing running — each process of both commands ends itself once lrcheck is gone
(``procs.owner``) — and its lockstep exchange is swept at the next start. Slow: a real
``lrcheck run`` in a session of its own."""

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.procs.marks import marked
from lrcheck.procs.owner import ENV_OWNER, OWNER_FILE, identity
from lrcheck.record import together
from tests.helpers import HANG_S, session, wait_for

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_train.py"
GONE_S = 15.0  # the figure issue 37 asks for; the watch takes POLL_S + GRACE_S at most


def _lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def _exchanges(owner: str, out: Path) -> list[Path]:
    found = []
    for parent in {together.scratch(), str(out)}:
        for folder in Path(parent or out).glob(f"{together.PREFIX}*"):
            try:
                if (folder / OWNER_FILE).read_text() == owner:
                    found.append(folder)
            except OSError:
                continue
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_kill_9_of_run_leaves_nothing_running_and_its_exchange_is_swept(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(api.__file__).parents[1])}
    py = sys.executable
    endless = "--epochs 100000"
    argv = [py, "-m", "lrcheck", "run", "--quiet", "--out", str(tmp_path / "out"),
            f"{py} {SCRIPT} --bs 32 {endless}", f"{py} {SCRIPT} --bs 16 --accum 2 {endless}"]
    owner = ""
    with open(tmp_path / "output", "w") as output, session(argv, env=env, stdout=output,
                                                           stderr=output) as proc:
        try:
            owner = identity(proc.pid) or pytest.skip("no /proc: the owner cannot be watched")
            wait_for(lambda: all(_lines(tmp_path / "out" / side / "rank0.jsonl") >= 2
                                 for side in ("reference", "candidate")),
                     HANG_S, "both commands to train", proc=proc)
            left = _exchanges(owner, tmp_path / "out")
            assert left and len(marked(owner, ENV_OWNER)) >= 2
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            killed = time.monotonic()
            wait_for(lambda: not marked(owner, ENV_OWNER), GONE_S,
                     f"every process of the run to end within {GONE_S:g} s of lrcheck's kill")
            print(f"nothing left {time.monotonic() - killed:.2f} s after the kill")
        finally:
            _kill(marked(owner, ENV_OWNER) if owner else [])
    assert all(folder.exists() for folder in left)  # nobody swept them yet
    # What the next lrcheck run does first, into another report folder: the exchange in memory
    # goes, with its spare folder in the killed run's report folder.
    exchange, spare = together._exchange(tmp_path / "next")
    for made in (exchange, spare):
        if made is not None:
            shutil.rmtree(made)
    assert not any(folder.exists() for folder in left), left
