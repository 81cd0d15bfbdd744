"""``lrcheck run --interrupt-at N --resume CMD``: the candidate interrupted as a preemption
interrupts it, then resumed by the user's own command, both recorded into one folder as one
command: ``python -m lrcheck.record.interrupt --at N --resume CMD -- CANDIDATE...`` is the
candidate command ``lrcheck run`` records (``command_pair``), and its two processes become one
timeline per rank (``record.folder``), judged by ``continuation`` at the boundary.

How lrcheck knows update N was made, and where the interrupt lands: the process's own hooks
tell it. ``ENV_INTERRUPT`` (``N:FIFO``) is set for the candidate's processes; in the optimizer
step pre-hook of update N (0-based: N updates made, updates 0 to N-1 recorded), each rank
writes ``"rank world pid"`` into the FIFO and waits for SIGTERM (``signal.pause``, again after any
other signal a handler took: a loader's SIGCHLD). The driver reads the FIFO (a blocking read, no
sleep, no polling of files) until every rank has written, then sends the signal to the
candidate's process group (a session of its own) and to each rank's (torchrun starts every rank
in a session of its own: killing torchrun alone would leave its ranks paused for ever): SIGTERM,
then SIGKILL after ``grace`` seconds where any still runs; or SIGKILL at once. The resume starts
once every rank is gone. The interrupt
thus lands at one known point, after update N-1 and before update N's step (update N's
backward passes were run, its step was not: a preemption's usual loss), whatever the machine's
load; a process whose SIGTERM handler lets it carry on (to save a checkpoint) makes the
updates it makes, which are recorded, and the resume is aligned by what it restored
(``record.restore``). A candidate that ends before update N is told apart: the driver's thread
that waits for it writes ``exited`` into the FIFO.

In the middle of a window (``--micro M``, ``ENV_INTERRUPT`` ``N.M:FIFO``): the same handshake,
made right after the outermost ``torch.autograd.backward`` that brings the backward passes since
update N-1's step to M. At either point the window cut (its update, the backward passes made
into it, the samples fed: ``record.taps``' row hashes) goes into the process's description
(``end.cut``, ``record.stages``).

The resume command (split as a shell would, run without the interrupt) starts once the
interrupted process group is gone, with ``ENV_RESUMED``: its processes note, once, how many of
the tensors their first backward pass reaches hold a non-zero gradient already (``start.
carried_gradients``: a checkpoint that carried a cut window's gradients), for
``checks.continuation``. Before it starts, the driver marks the candidate's side of lockstep
ended (``roles.ended``), since the processes that followed the reference are gone: the reference
goes on alone rather than waiting for them until the whole command ends. The driver exits with
the resume's exit code (the interrupted process's code is said on stderr)."""

from __future__ import annotations

import argparse
import functools
import os
import select
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from lrcheck.record.roles import CANDIDATE, ENV_EXCHANGE, ENV_RESUMED, ended

if TYPE_CHECKING:
    import torch

    from lrcheck.record.process import ProcessRecorder, _Optimizer

# ``spec.interrupt``'s, not imported from there: every recorded process imports this module.
SIGNALS = ("TERM", "KILL")
DEFAULT_GRACE_S = 30.0

ENV_INTERRUPT = "PYTHON_LRCHECK_INTERRUPT"
EXITED = "exited"


# In the recorded process -----------------------------------------------------------------

def install(recorder: ProcessRecorder) -> None:
    """With ``ENV_INTERRUPT`` set, stop this process at its first optimizer's update N: before
    its step, or (``N.M``) after the M-th backward pass of its window (see the module's
    docstring); with ``ENV_RESUMED``, note whether gradients were there before this process's
    first backward pass (``carried_gradients``). ``recorder``:
    ``record.process.ProcessRecorder``."""
    if os.environ.get(ENV_RESUMED):
        carried_gradients(recorder)
    value = os.environ.get(ENV_INTERRUPT, "")  # torchrun's ranks are told too
    if not value:
        return
    point, _, fifo = value.partition(":")
    at, _, micro = point.partition(".")
    if micro:
        _after_backward(recorder, int(at), int(micro), fifo)
        return
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    def pre(optimizer: object, args: object, kwargs: object) -> None:
        st = recorder.optimizers.get(id(optimizer))
        if st is None or st.index != 0 or st.depth != 1 or st.recorder.step != int(at):
            return
        _stop(recorder, st, fifo)

    register_optimizer_step_pre_hook(pre)


def _after_backward(recorder: ProcessRecorder, at: int, micro: int, fifo: str) -> None:
    """Stop this process once the first optimizer made ``at`` updates and ``micro`` backward
    passes of its next window ran: after the outermost ``torch.autograd.backward`` that makes
    them ``micro`` (``recorder``'s counts of the cadence, ``record.calls``, are taken inside
    it), before the next."""
    import torch

    original: Callable[..., None] = torch.autograd.backward

    @functools.wraps(original)
    def backward(*args: object, **kwargs: object) -> None:
        original(*args, **kwargs)
        if torch._C._current_autograd_node() is None:
            first = next(iter(recorder.optimizers.values()), None)
            if first is not None and first.recorder.step == at and (
                    recorder.totals["backward"] - first.seen.get("backward", 0) == micro):
                _stop(recorder, first, fifo)

    torch.autograd.backward = backward


def _stop(recorder: ProcessRecorder, st: _Optimizer, fifo: str) -> None:
    """The interrupt point reached: the window cut there and where the process stands written
    into its description (guarded: an error there switches the recording off, the interrupt
    lands anyway), the driver told (``"rank world"`` into ``fifo``), then the wait for its
    signal, outside the guard (the user's SIGTERM handler may raise what it raises)."""
    from lrcheck.record.guard import RECORDING

    def note() -> None:
        ids = [micro.ids.tolist() for micro in recorder.taps.micro]
        made = recorder.totals["backward"] - st.seen.get("backward", 0)
        recorder.standing.cut = {"update": st.recorder.step, "backward": made, "fed": ids}
        recorder.describe()  # where it stands now: its description's ``end``

    from lrcheck.record.rollouts import rank_and_world

    RECORDING("the note of where the interrupt landed", note)()
    rank, world = rank_and_world()  # torch.distributed's: mp.spawn sets no RANK

    def tell() -> None:
        fd = os.open(fifo, os.O_WRONLY)
        try:
            os.write(fd, f"{rank} {world} {os.getpid()}\n".encode())
        finally:
            os.close(fd)

    _until_terminated(tell)


def _until_terminated(tell: Callable[[], None]) -> None:
    """``tell()`` the driver, then wait for its SIGTERM (or die of its SIGKILL), and let the
    signal do what it would have done: the user's handler runs (one that returns lets the
    process carry on, to save a checkpoint, say), or the default ends the process. Told once
    the wait's handler is in place: a SIGTERM right after it is not lost. Another signal a
    handler took (a loader's SIGCHLD) wakes ``pause`` but not this wait."""
    got: list[int] = []
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: FrameType | None) -> None:
        got.append(signum)
        signal.signal(signal.SIGTERM, previous)
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            os.kill(os.getpid(), signal.SIGTERM)  # ends the process as the default would

    try:
        signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread: the first signal ends the wait
        tell()
        signal.pause()
        return
    tell()
    while not got:
        signal.pause()


def carried_gradients(recorder: ProcessRecorder) -> None:
    """Before this process's first outermost backward pass, whether the parameters it reaches
    hold a gradient already (a checkpoint that carried the gradients of a window cut in the
    middle, loaded into ``.grad``): the number of those tensors whose gradient is not all zero,
    into ``recorder.standing.carried`` (its description's ``carried_gradients``). Once: the
    autograd graph walked from the loss to its leaves."""
    import torch

    from lrcheck.record.guard import RECORDING
    from lrcheck.record.optimizers import local_tensor

    original: Callable[..., None] = torch.autograd.backward

    def look(tensors: object) -> None:
        recorder.standing.carried = sum(  # this rank's shard: no collective
            1 for leaf in _leaves(tensors) if leaf.grad is not None
            and bool(local_tensor(leaf.grad).count_nonzero()))

    looked: list[bool] = []

    @functools.wraps(original)
    def backward(tensors: object, *args: object, **kwargs: object) -> None:
        if not looked:  # once
            looked.append(True)
            if torch.autograd.backward is backward:  # not wrapped again since
                torch.autograd.backward = original
            RECORDING("the look at the gradients carried into a resume", look)(tensors)
        original(tensors, *args, **kwargs)

    torch.autograd.backward = backward


def _leaves(tensors: object) -> list[torch.Tensor]:
    """The leaf tensors (parameters) the graph of ``tensors`` reaches."""
    import torch

    roots = [tensors] if isinstance(tensors, torch.Tensor) else (
        list(tensors) if isinstance(tensors, (list, tuple)) else [])
    stack = [t.grad_fn for t in roots if isinstance(t, torch.Tensor)]
    seen: set[object] = set()
    found = []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            found.append(variable)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return found


# The driver ------------------------------------------------------------------------------

def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lrcheck.record.interrupt")
    parser.add_argument("--at", type=int, required=True)
    parser.add_argument("--micro", type=int)
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


def _reached(fifo: Path, proc: subprocess.Popen[bytes]) -> dict[int, int] | None:
    """Each rank's pid once every rank of ``proc`` reached the interrupt point (None: it exited
    first)."""
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

    seen: dict[int, int] = {}
    world = 1
    # Read and write: a rank that wrote and closed is no end of the file, the waiter's line is.
    # Opened before the waiter starts: a command that ends at once would otherwise find no
    # reader, its line unwritten, and this loop would wait for ever.
    with os.fdopen(os.open(fifo, os.O_RDWR), encoding="utf-8") as reader:
        threading.Thread(target=waiter, daemon=True).start()
        for line in reader:
            if line.strip() == EXITED:
                return None
            rank, world, pid = (int(w) for w in line.split())
            seen[rank] = pid
            if len(seen) >= world:
                return seen
    return None


def interrupt(proc: subprocess.Popen[bytes], sig: str, grace: float,
              ranks: Iterable[int] = ()) -> int | None:
    """Signal ``proc``'s process group, and each of the ``ranks``' (pids: under torchrun, each
    in a session of its own), as a preemption does; wait until all are gone; ``proc``'s exit
    code (None: unknown)."""
    pids = {proc.pid, *ranks}

    def kill(s: signal.Signals) -> None:
        for pid in pids:
            try:
                group = os.getpgid(pid)
                if group != os.getpgrp():  # never lrcheck's own
                    os.killpg(group, s)
            except (ProcessLookupError, PermissionError):
                pass

    kill(signal.SIGKILL if sig == "KILL" else signal.SIGTERM)
    if sig == "TERM":
        _wait_gone(proc, pids - {proc.pid}, grace)
    kill(signal.SIGKILL)  # what is left (a loader's workers, a rank past grace)
    _wait_gone(proc, pids - {proc.pid}, None)
    return proc.returncode


def _wait_gone(proc: subprocess.Popen[bytes], others: set[int], timeout: float | None) -> None:
    """Until ``proc`` and the processes ``others`` (not its children: a pidfd each) have ended,
    or ``timeout`` seconds have passed."""
    end = None if timeout is None else time.monotonic() + timeout
    for pid in others:
        try:
            fd = os.pidfd_open(pid)
        except OSError:  # gone already
            continue
        try:
            left = None if end is None else max(0.0, end - time.monotonic())
            select.select([fd], [], [], left)  # readable once the process has ended
        finally:
            os.close(fd)
    try:
        proc.wait(timeout=None if end is None else max(0.0, end - time.monotonic()))
    except subprocess.TimeoutExpired:
        pass


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    point = (f"update {args.at}" if args.micro is None else
             f"backward pass {args.micro} of update {args.at}'s window")
    where = f"before {point}'s step" if args.micro is None else f"after {point}"
    with tempfile.TemporaryDirectory(prefix="lrcheck-interrupt-") as tmp:
        fifo = Path(tmp) / "reached"
        os.mkfifo(fifo)
        mark = f"{args.at}" if args.micro is None else f"{args.at}.{args.micro}"
        env = {**os.environ, ENV_INTERRUPT: f"{mark}:{fifo}"}
        proc = subprocess.Popen(args.candidate, env=env, start_new_session=True)
        try:
            reached = _reached(fifo, proc)
        except BaseException:
            interrupt(proc, "KILL", 0)
            raise
        if reached is None:
            print(f"lrcheck: the candidate ended (exit code {proc.returncode}) before "
                  f"{point}: it was not interrupted, the resume command was not run",
                  file=sys.stderr)
            return proc.returncode if proc.returncode > 0 else 3
        code = interrupt(proc, args.signal, args.grace, reached.values())
    print(f"lrcheck: the candidate was interrupted {where} (SIG{args.signal}; exit code "
          f"{code}); resuming: {args.resume}", file=sys.stderr)
    if os.environ.get(ENV_EXCHANGE):  # its lockstep ended with it: the reference goes on alone
        ended(Path(os.environ[ENV_EXCHANGE]), CANDIDATE).touch()
    return subprocess.call(shlex.split(args.resume), env={**os.environ, ENV_RESUMED: "1"})


if __name__ == "__main__":
    sys.exit(main())
