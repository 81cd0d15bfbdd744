"""``lrcheck run --interrupt-at N --resume CMD``: the candidate interrupted as a preemption
interrupts it, then resumed by the user's own command, both recorded into one folder as one
command: ``python -m lrcheck.record.interrupt --at N --resume CMD -- CANDIDATE...`` is the
candidate command ``lrcheck run`` records (``command_pair``), and its two processes become one
timeline per rank (``record.folder``), judged by ``continuation`` at the boundary.

How lrcheck knows update N was made, and where the interrupt lands: the process's own hooks
tell it. ``ENV_INTERRUPT`` (``N:FIFO``) is set for the candidate's processes; in the optimizer
step pre-hook of update N (0-based: N updates made, updates 0 to N-1 recorded), each rank
writes ``"rank world"`` into the FIFO and waits for a signal (``signal.pause``). The driver reads
the FIFO (a blocking read, no sleep, no polling of files) until every rank has written, then
sends the signal to the candidate's process group (a session of its own): SIGTERM, then
SIGKILL after ``grace`` seconds where the group still runs; or SIGKILL at once. The interrupt
thus lands at one known point, after update N-1 and before update N's step (update N's
backward passes were run, its step was not: a preemption's usual loss), whatever the machine's
load; a process whose SIGTERM handler lets it carry on (to save a checkpoint) makes the
updates it makes, which are recorded, and the resume is aligned by what it restored
(``record.restore``). A candidate that ends before update N is told apart: the driver's thread
that waits for it writes ``exited`` into the FIFO.

The resume command (split as a shell would, run without the interrupt) starts once the
interrupted process group is gone; the driver exits with its exit code (the interrupted
process's code is said on stderr)."""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lrcheck.record.process import ProcessRecorder

# ``spec.interrupt``'s, not imported from there: every recorded process imports this module.
SIGNALS = ("TERM", "KILL")
DEFAULT_GRACE_S = 30.0

ENV_INTERRUPT = "PYTHON_LRCHECK_INTERRUPT"
EXITED = "exited"


# In the recorded process -----------------------------------------------------------------

def install(recorder: ProcessRecorder) -> None:
    """With ``ENV_INTERRUPT`` set, stop this process's first optimizer before its update N's
    step (see the module's docstring); ``recorder``: ``record.process.ProcessRecorder``."""
    value = os.environ.get(ENV_INTERRUPT, "")  # torchrun's ranks are told too
    if not value:
        return
    at, _, fifo = value.partition(":")
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def pre(optimizer: object, args: object, kwargs: object) -> None:
        st = recorder.optimizers.get(id(optimizer))
        if st is None or st.index != 0 or st.depth != 1 or st.recorder.step != int(at):
            return
        recorder.describe()  # where it stands now: its description's ``end``
        rank, world = (int(os.environ.get(k, d)) for k, d in (("RANK", "0"),
                                                              ("WORLD_SIZE", "1")))
        fd = os.open(fifo, os.O_WRONLY)
        try:
            os.write(fd, f"{rank} {world}\n".encode())
        finally:
            os.close(fd)
        signal.pause()  # the interrupt; a handler that returns lets the process carry on

    register_optimizer_step_pre_hook(pre)


# The driver ------------------------------------------------------------------------------

def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lrcheck.record.interrupt")
    parser.add_argument("--at", type=int, required=True)
    parser.add_argument("--signal", choices=SIGNALS, default="TERM")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE_S)
    parser.add_argument("--resume", required=True)
    parser.add_argument("candidate", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.candidate[:1] == ["--"]:
        args.candidate = args.candidate[1:]
    if not args.candidate:
        parser.error("no candidate command after --")
    return args


def _reached(fifo: Path, proc: subprocess.Popen[bytes]) -> bool:
    """Whether every rank of ``proc`` reached the interrupt point (False: it exited first)."""
    def waiter() -> None:
        proc.wait()
        try:  # no reader left (the point was reached; the FIFO gone): nothing to tell
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        try:
            os.write(fd, f"{EXITED}\n".encode())
        finally:
            os.close(fd)

    threading.Thread(target=waiter, daemon=True).start()
    seen: set[int] = set()
    world = 1
    # Read and write: a rank that wrote and closed is no end of the file, the waiter's line is.
    with os.fdopen(os.open(fifo, os.O_RDWR), encoding="utf-8") as reader:
        for line in reader:
            if line.strip() == EXITED:
                return False
            rank, world = (int(w) for w in line.split())
            seen.add(rank)
            if len(seen) >= world:
                return True
    return False


def interrupt(proc: subprocess.Popen[bytes], sig: str, grace: float) -> int | None:
    """Signal ``proc``'s process group as a preemption does; its exit code (None: unknown)."""
    def kill(s: signal.Signals) -> None:
        try:
            os.killpg(proc.pid, s)
        except (ProcessLookupError, PermissionError):
            pass

    kill(signal.SIGKILL if sig == "KILL" else signal.SIGTERM)
    if sig == "TERM":
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    kill(signal.SIGKILL)  # what is left of the group (a loader's workers) once grace is over
    return proc.wait()


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="lrcheck-interrupt-") as tmp:
        fifo = Path(tmp) / "reached"
        os.mkfifo(fifo)
        env = {**os.environ, ENV_INTERRUPT: f"{args.at}:{fifo}"}
        proc = subprocess.Popen(args.candidate, env=env, start_new_session=True)
        try:
            reached = _reached(fifo, proc)
        except BaseException:
            interrupt(proc, "KILL", 0)
            raise
        if not reached:
            print(f"lrcheck: the candidate ended (exit code {proc.returncode}) before update "
                  f"{args.at}: it was not interrupted, the resume command was not run",
                  file=sys.stderr)
            return proc.returncode if proc.returncode > 0 else 3
        code = interrupt(proc, args.signal, args.grace)
    print(f"lrcheck: the candidate was interrupted before update {args.at}'s step (SIG"
          f"{args.signal}; exit code {code}); resuming: {args.resume}", file=sys.stderr)
    return subprocess.call(shlex.split(args.resume))


if __name__ == "__main__":
    sys.exit(main())
