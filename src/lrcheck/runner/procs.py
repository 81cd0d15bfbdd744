"""Finding and stopping the processes of one launch: torchrun and its workers.

torchrun starts each worker in a session of its own, so signalling torchrun's process group does
not reach them, and a worker whose torchrun died is re-parented away from it. Every process of a
launch therefore carries a marker in its environment (``LRCHECK_LAUNCH=<token>``, inherited from
the parent's ``Popen``), and stopping a launch signals every process that carries it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

MARKER_ENV = "LRCHECK_LAUNCH"
TERM_GRACE_S = 2.0
KILL_WAIT_S = 5.0
_PROC = Path("/proc")


def _alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its parent, does not count)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def marked(token: str) -> list[int]:
    """Live processes whose environment has ``LRCHECK_LAUNCH=token`` (none where there is no
    /proc, or for processes of other users)."""
    needle = f"{MARKER_ENV}={token}".encode()
    found = []
    for entry in _PROC.iterdir() if _PROC.is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _signal(pids: list[int], proc: subprocess.Popen, sig: signal.Signals) -> None:
    if proc.poll() is None:  # once reaped, its group id could name someone else's group
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _wait_gone(token: str, seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while (left := marked(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def stop(proc: subprocess.Popen, token: str) -> None:
    """Stop torchrun (``proc``, leader of its own session) and every worker of its launch:
    SIGTERM, then SIGKILL for whatever is still running after ``TERM_GRACE_S``. Returns once
    none is left running and torchrun is reaped."""
    running = marked(token)
    if proc.poll() is None or running:
        _signal(running, proc, signal.SIGTERM)
        left = _wait_gone(token, TERM_GRACE_S)
        if left or proc.poll() is None:
            _signal(left, proc, signal.SIGKILL)
            _wait_gone(token, KILL_WAIT_S)
    try:
        proc.wait(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:  # SIGKILL was sent; only an unkillable process gets here
        pass
