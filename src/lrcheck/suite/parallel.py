"""A suite's pairs in several worker processes on this machine (``lrcheck suite FILE --jobs N``).

The unit of work is one pair, handed out by ``queue.PairQueue``: a reference that several pairs
share is trained once, by the first of them, whose worker sends it up at once; the group's other
pairs then run in any worker, given the trained reference (and a noise-floor twin once one is
trained) instead of training it. So every pair's ``result.json`` is the one a sequential run
writes (timings aside), and a suite of one reference and many candidates uses every core. Each
worker saves its pairs' folders itself, through the ``PairFiles`` it is given, and sends their
outcomes back.

Each worker leads a process group of its own and carries ``SUITE_WORKER_ENV`` in its
environment: a Ctrl-C at the terminal reaches the suite alone, which stops every worker once
with the same signal (SIGINT, or the SIGTERM/SIGHUP it got). A worker's running pair is then
saved as ``incomplete``; pairs not started are ``not_run``. Workers that do not end within
``STOP_WAIT_S`` are killed.

A worker that dies (killed by the out-of-memory killer, say) is what a crash is in a sequential
suite: its pair is an error (exit 3), whatever it had started is killed (every process that
carries its ``WORKER_ID_ENV``: a recorded command, a torchrun job), and the other workers go
on; pairs left when no worker is are errors too. The suite's report is written.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext, SpawnContext
from multiprocessing.process import BaseProcess
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

import numpy as np

from lrcheck.errors import RunError, SpecError, Stopped, stop_words
from lrcheck.runner.dist.procs import marked
from lrcheck.spec import RunSpec
from lrcheck.suite.outcome import PairOutcome
from lrcheck.suite.queue import PairQueue
from lrcheck.suite.run import OnDone, OnProgress, PairFiles
from lrcheck.suite.spec import Suite, SuiteEntry

SUITE_WORKER_ENV = "LRCHECK_SUITE_WORKER"
# Set by each worker for what it starts: "<SUITE_WORKER_ENV's token>-<the worker's number>".
WORKER_ID_ENV = "LRCHECK_SUITE_WORKER_ID"
STOP_WAIT_S = 60.0
PROGRESS_EVERY_S = 0.2
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# What every worker imports to run a pair: imported once, by the fork server the workers are
# forked from, rather than by each (torch and scikit-learn: about 3 s of CPU a process).
PRELOAD = ("torch", "sklearn.datasets", "sklearn.metrics", "sklearn.model_selection",
           "sklearn.preprocessing", "lrcheck.comparison", "lrcheck.checks",
           "lrcheck.runner.pair", "lrcheck.runner.local", "lrcheck.runner.plain",
           "lrcheck.suite.run", "lrcheck.reports.files", "lrcheck.reports.html_report")
# An outcome as it comes back: the pair's index in the suite, and what it became.
_Done = Callable[[int, PairOutcome, Sequence[object]], None]


def parse_jobs(text: str | int) -> int:
    """``--jobs``: a whole number >= 1, or ``auto``: the cores this process may use."""
    if text == "auto":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
    try:
        jobs = int(text)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise SpecError(f"--jobs {text!r}: expected a whole number >= 1, or auto (the usable "
                        "cores)")
    return jobs


class WorkerFiles(PairFiles, Protocol):
    """A worker's ``PairFiles`` (``reports.files.DeferredFiles``): what it kept to be drawn is
    sent with each outcome, for the suite process to draw (``draw``)."""

    def drain(self) -> Sequence[object]:
        """What was kept to be drawn since the last call."""


@dataclass
class _Worker:
    """A worker process and this end of its pipe: pairs go down it, messages come up.
    ``index``: the pair it runs (None when idle)."""

    process: BaseProcess
    pipe: Connection
    mark: str  # its WORKER_ID_ENV
    index: int | None = None


def run_parallel(suite: Suite, out: Path, jobs: int, *, files: WorkerFiles,
                 draw: Callable[[Sequence[object]], None],
                 baseline: dict[str, dict[str, Any]] | None,
                 on_progress: OnProgress | None = None,
                 on_done: OnDone | None = None) -> tuple[list[PairOutcome], str | None]:
    """Every pair of ``suite`` in ``jobs`` workers: the outcomes in the suite's order, and why
    the suite stopped early (None when it did not). ``on_progress`` and ``on_done`` are called
    here, in this process, with the pair's index in ``suite``; ``draw`` with what each pair's
    worker kept to be drawn (``files.drain``)."""
    context, stop_server = _context()
    token = os.environ.get(SUITE_WORKER_ENV) or uuid.uuid4().hex  # a test may choose it
    queue = PairQueue(suite, jobs)
    workers: list[_Worker] = []
    outcomes: dict[int, PairOutcome] = {}
    stopped: str | None = None

    def done(index: int, outcome: PairOutcome, drawings: Sequence[object] = ()) -> None:
        outcomes[index] = outcome
        if drawings:
            draw(drawings)
        if on_done is not None:
            on_done(index, outcome)

    try:
        # Started here, where a Ctrl-C is the suite's: the first start waits for the fork
        # server's imports.
        _start(context, workers, min(jobs, len(suite.entries)), token,
               (suite, out, files, baseline))
        _schedule(queue, workers, jobs, on_progress, done)
    except KeyboardInterrupt as stop:
        _stop(workers, suite, stop, done)
        running = [o.entry.name for _, o in sorted(outcomes.items()) if o.interrupted]
        stopped = (f"{stop_words(stop)} with {len(running)} pair{'s' * (len(running) != 1)} "
                   f"running ({', '.join(map(repr, running))}) of {len(suite.entries)}")
    finally:
        _end(workers)
        with contextlib.suppress(OSError):  # a server killed with the terminal's group: gone
            stop_server()
    for index in range(len(suite.entries)):
        if index not in outcomes:
            done(index, PairOutcome(suite.entries[index], not_run=True))
    return [outcomes[i] for i in range(len(suite.entries))], stopped


def _start(context: ForkServerContext | SpawnContext, workers: list[_Worker], count: int,
           token: str, args: tuple[Suite, Path, WorkerFiles, dict[str, dict[str, Any]] | None]
           ) -> None:
    """Start ``count`` workers into ``workers``, each carrying ``token`` in its environment."""
    os.environ[SUITE_WORKER_ENV] = token  # inherited by the fork server and the workers
    try:
        for number in range(count):
            mine, theirs = context.Pipe()
            mark = f"{token}-{number}"
            process = context.Process(target=_work, args=(number, mark, *args, theirs),
                                      daemon=True)
            process.start()
            theirs.close()
            workers.append(_Worker(process, mine, mark))
    finally:
        os.environ.pop(SUITE_WORKER_ENV, None)


def _context() -> tuple[ForkServerContext | SpawnContext, Callable[[], None]]:
    """The workers' start method, and what stops what it started once they are gone. On Linux:
    forked from a fork server that has imported ``PRELOAD``, stopped and reaped after them (else
    it would stay, idle, until this process exits; ``_stop`` is the method Python 3.11 to 3.13
    name it), and this process's fork server preload put back. Elsewhere spawned, as Python does
    by default on macOS (forking a process that has loaded torch's native libraries is not safe
    there) and must on Windows. A fork server this process had started already is used as it is
    (its workers then import torch themselves) and left running."""
    if sys.platform != "linux":
        return multiprocessing.get_context("spawn"), lambda: None
    from multiprocessing import forkserver

    context = multiprocessing.get_context("forkserver")
    server = forkserver._forkserver
    if getattr(server, "_forkserver_pid", 0) is not None:  # running already, or not known
        return context, lambda: None
    before = list(getattr(server, "_preload_modules", []))
    context.set_forkserver_preload(list(PRELOAD))

    def stop() -> None:
        try:
            getattr(server, "_stop", lambda: None)()
        finally:
            setattr(server, "_preload_modules", before)  # noqa: B010 (not typed)

    return context, stop


def _schedule(queue: PairQueue, workers: list[_Worker], jobs: int,
              on_progress: OnProgress | None, done: _Done) -> None:
    """Hand out the pairs (``queue``) while their cores are free; collect what the workers send
    until every pair is done. A worker that died with a pair: that pair is an error; with no
    worker left, so is every pair not started."""
    free = jobs
    while queue.todo or any(w.index is not None for w in workers):
        for worker in (w for w in workers if w.index is None and not w.pipe.closed):
            index = queue.take(free)
            if index is None:
                break
            try:
                worker.pipe.send((index, queue.given(index), queue.shares(index)))
            except OSError:  # it died idle, before its end of the pipe was seen closed
                queue.put_back(index)
                _bury(worker)
                continue
            worker.index, free = index, free - queue.cores(index)
        message = _receive(workers)
        if message[0] == "progress" and on_progress is not None:
            on_progress(*message[2:])
        elif message[0] == "trained":
            queue.trained(*message[2:])
        elif message[0] == "done":
            done(message[2], message[3], message[4])
        elif message[0] == "none":
            for index in list(queue.todo):
                done(index, _error(queue.suite.entries[index], "not run: every suite worker "
                                   "had died before it could start"), ())
            return
        elif message[0] in ("idle", "died"):
            worker = workers[message[1]]
            if message[0] == "died":
                _lost(worker, queue.suite, message[2], done)
            if worker.index is not None:
                free += queue.cores(worker.index)
                queue.ended(worker.index)
            worker.index = None


def _error(entry: SuiteEntry, why: str) -> PairOutcome:
    """A pair that ended without a report because its worker died: a crash (exit 3)."""
    return PairOutcome(entry, error=why, error_code=RunError.exit_code)


def _lost(worker: _Worker, suite: Suite, why: str, done: _Done) -> None:
    """The pair of a worker that died running it (``why``) told as an error."""
    assert worker.index is not None  # a worker is told as died only with a pair
    done(worker.index, _error(suite.entries[worker.index], why), ())


def _receive(workers: list[_Worker], timeout: float | None = None) -> tuple[Any, ...]:
    """The next message from a worker: ``("gone", n)`` for one that left, ``("died", n, why)``
    for one that died with a pair (what it started is killed). ``timeout``: ``("wait",)``
    when none came in time."""
    from multiprocessing.connection import wait

    pipes = {w.pipe: n for n, w in enumerate(workers) if not w.pipe.closed}
    if not pipes:
        return ("none",)
    ready = wait(list(pipes), timeout)
    if not ready:
        return ("wait",)
    pipe = ready[0]
    assert isinstance(pipe, Connection)
    try:
        message: tuple[Any, ...] = pipe.recv()
        return message
    except (EOFError, OSError):
        number = pipes[pipe]
        worker = workers[number]
        _bury(worker)
        if worker.index is None:
            return ("gone", number)
        code = worker.process.exitcode
        how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
               and -code in signal.valid_signals() else f"exit code {code}")
        return ("died", number, f"its suite worker {number + 1} (pid {worker.process.pid}) "
                f"died while running it ({how}; the out-of-memory killer sends SIGKILL); what "
                "the pair had started was stopped")


def _bury(worker: _Worker) -> None:
    """A worker found dead: its pipe closed, the process reaped, and whatever it had started
    killed: every process carrying its ``WORKER_ID_ENV`` (a recorded command, a torchrun job
    in a session of its own)."""
    worker.pipe.close()
    worker.process.join(5.0)
    for pid in marked(worker.mark, WORKER_ID_ENV):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _stop(workers: list[_Worker], suite: Suite, stop: KeyboardInterrupt, done: _Done) -> None:
    """Stop every worker with the signal that stopped the suite and collect what their
    running pairs became (incomplete)."""
    sig = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
    # A second signal while the workers save: the suite is already stopping.
    before = {s: signal.signal(s, signal.SIG_IGN) for s in _STOP_SIGNALS}
    try:
        for worker in workers:
            if worker.index is not None and worker.process.pid is not None:
                try:
                    os.kill(worker.process.pid, sig)
                except ProcessLookupError:
                    pass
        _collect(workers, suite, done)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _collect(workers: list[_Worker], suite: Suite, done: _Done) -> None:
    """What the stopped workers' running pairs became, until each is idle or gone (a worker
    that died: its pair an error)."""
    deadline = time.monotonic() + STOP_WAIT_S
    while any(w.index is not None for w in workers) and time.monotonic() < deadline:
        message = _receive(workers, 0.5)
        if message[0] == "none":
            break
        if message[0] == "done":
            done(message[2], message[3], message[4])
        elif message[0] == "died":
            _lost(workers[message[1]], suite, message[2], done)
            workers[message[1]].index = None
        elif message[0] == "idle":
            workers[message[1]].index = None


def _end(workers: list[_Worker]) -> None:
    """Every worker told to leave and gone: killed when it does not leave in time."""
    for worker in workers:
        try:
            worker.pipe.send(None)
        except (OSError, ValueError):  # it has left already
            pass
    deadline = time.monotonic() + STOP_WAIT_S
    for worker in workers:
        worker.process.join(max(0.0, deadline - time.monotonic()))
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        elif worker.process.pid is not None:
            _gone(worker.process.pid, deadline)
        worker.pipe.close()


def _gone(pid: int, deadline: float) -> None:
    """A worker told as ended may still run when the fork server it was forked from was killed
    (with the terminal's process group): wait for it until ``deadline``, then kill it. A worker
    leads its own process group, which is how it is told from a process that took its pid; a
    zombie has ended."""
    def there() -> bool:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state, _, group = stat.read().rsplit(")", 1)[1].split()[:3]
        except OSError:
            return False
        return state != "Z" and int(group) == pid

    while there() and time.monotonic() < deadline:
        time.sleep(0.05)
    if there():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def _work(number: int, mark: str, suite: Suite, out: Path, files: WorkerFiles,
          baseline: dict[str, dict[str, Any]] | None, pipe: Connection) -> None:
    """A worker: run each pair it is given (``run.run_suite`` of that pair, with the runs it
    is given already trained), sending its progress, what it trains that other pairs need,
    and its outcome, until it is given None or stopped. What it starts carries ``mark``."""
    os.setpgrp()  # Ctrl-C at the terminal reaches the suite, which tells the workers once
    os.environ[WORKER_ID_ENV] = mark
    _stop_on_signals()
    try:
        _pairs(number, suite, out, files, baseline, pipe)
    except (KeyboardInterrupt, EOFError, BrokenPipeError):  # stopped, or the suite is gone
        pass
    pipe.close()


def _pairs(number: int, suite: Suite, out: Path, files: WorkerFiles,
           baseline: dict[str, dict[str, Any]] | None, pipe: Connection) -> None:
    from lrcheck.suite.run import run_suite

    while (task := pipe.recv()) is not None:
        index, given, shares = task
        relay = _Relay(pipe, number, (index,), files)
        trained = _Trained(given, relay.trained if shares else None)
        try:
            result = run_suite(Suite(suite.path, (suite.entries[index],)), out, files=files,
                               baseline=baseline, references=trained,
                               on_progress=relay.progress, on_done=relay.done)
        finally:
            pipe.send(("idle", number))
        if result.interrupted is not None:
            break


class _Trained(dict[RunSpec, Any]):
    """A worker's runs already trained for its pair (``run_suite``'s ``references``): those it
    was given, unpickled; each new one is also told to ``send`` (when given), pickled, the
    moment it is added."""

    def __init__(self, given: dict[RunSpec, bytes],
                 send: Callable[[RunSpec, bytes], None] | None) -> None:
        super().__init__({spec: pickle.loads(trace) for spec, trace in given.items()})
        self._send = send

    def __setitem__(self, spec: RunSpec, trace: Any) -> None:
        if spec not in self and self._send is not None:
            self._send(spec, pickle.dumps(trace, protocol=pickle.HIGHEST_PROTOCOL))
        super().__setitem__(spec, trace)


@dataclass
class _Relay:
    """A worker's pair's progress, trained runs and outcome, sent up its pipe with the suite's
    index; progress at most every ``PROGRESS_EVERY_S``."""

    pipe: Connection
    number: int
    indices: tuple[int, ...]
    files: WorkerFiles
    last: float = 0.0

    def progress(self, i: int, role: str, done: int, total: int) -> None:
        if done == total or time.monotonic() - self.last > PROGRESS_EVERY_S:
            self.last = time.monotonic()
            self.pipe.send(("progress", self.number, self.indices[i], role, done, total))

    def trained(self, spec: RunSpec, trace: bytes) -> None:
        self.pipe.send(("trained", self.number, self.indices[0], spec, trace))

    def done(self, i: int, outcome: PairOutcome) -> None:
        self.pipe.send(("done", self.number, self.indices[i], _sendable(outcome),
                        self.files.drain()))


def _sendable(outcome: PairOutcome) -> PairOutcome:
    """The outcome without the reference's parameters and optimizer states (what its candidate
    ran in lockstep from), which the suite's report does not need."""
    if outcome.report is None:
        return outcome
    ref = outcome.report.reference
    return replace(outcome, report=replace(outcome.report, reference=replace(
        ref, params=np.empty((0, *ref.params.shape[1:]), ref.params.dtype),
        optimizer_states=None)))


def _stop_on_signals() -> None:
    """SIGTERM and SIGHUP stop the worker as Ctrl-C does (``errors.Stopped``); once stopping,
    a further signal is ignored."""
    def stop(signum: int, frame: FrameType | None) -> None:
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise KeyboardInterrupt if signum == signal.SIGINT else Stopped(signum)

    for sig in _STOP_SIGNALS:
        signal.signal(sig, stop)
