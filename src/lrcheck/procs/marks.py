"""Finding and stopping the processes of one launch: torchrun and its workers.

torchrun starts each worker in a session of its own, so signalling torchrun's process group does
not reach them, and a worker whose torchrun died is re-parented away from it. Every process of a
launch therefore carries a marker in its environment (``LRCHECK_LAUNCH=<token>``, inherited from
the parent's ``Popen``), and stopping a launch signals every process that carries it.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

from lrcheck.procs.owner import alive as alive  # where the runner's callers find it

MARKER_ENV = "LRCHECK_LAUNCH"
TERM_GRACE_S = 2.0
KILL_WAIT_S = 5.0
_PROC = Path("/proc")
HAS_PROC = _PROC.is_dir()  # Linux: processes can be looked up by pid


def marked(token: str, name: str = MARKER_ENV) -> list[int]:
    """Live processes whose environment has ``name=token`` (by default a launch's
    ``LRCHECK_LAUNCH``; none where there is no /proc, or for processes of other users)."""
    needle = f"{name}={token}".encode()
    found = []
    for entry in _PROC.iterdir() if HAS_PROC else ():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _signal(pids: list[int], proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
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


def stop(proc: subprocess.Popen[bytes], token: str) -> None:
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


def exit_now(code: int) -> NoReturn:
    """Leave with ``code`` once this process's work is done: atexit handlers run and stdout and
    stderr are flushed, but the interpreter is not finalised.

    Finalising is what made a torchrun rank abort after its run had finished ("terminate called
    without an active exception", SIGABRT; docs/multiprocess.md). A rank that has used gloo
    still has gloo's worker threads (``pt_gloo_runloop``) then: the process group lives as long
    as the DDP model that holds it. A worker thread drops its reference to a finished
    collective's work object just after waking the waiting thread, and that object's destructor
    takes the GIL to release the Python thread-local state it captured. When the main thread
    has meanwhile reached ``Py_FinalizeEx``, a thread that asks for the GIL is ended with
    ``pthread_exit``, whose unwinding through that ``noexcept`` destructor calls
    ``std::terminate``. ``os._exit`` ends every thread at once, with nothing left to unwind.
    Everything a run reports is in files that were closed (and renamed) before this is called.
    Leaving this way also skips Python's teardown of torch and scikit-learn (about a second).
    """
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more to tell
            pass
    os._exit(code)
