"""A suite's pairs in several worker processes on this machine (``lrcheck suite FILE --jobs N``).

The unit of work is one pair, handed out by ``queue.PairQueue``: a reference that several pairs
share is trained once, by the first of them, whose worker sends it up at once; the group's other
pairs then run in any worker, given the trained reference (and a noise-floor twin once one is
trained) instead of training it. So every pair's ``result.json`` is the one a sequential run
writes (timings aside), and a suite of one reference and many candidates uses every core. Each
worker saves its pairs' folders itself, through the ``PairFiles`` it is given, and sends their
outcomes back.

The workers are ``runner.workers``' processes (forked, on Linux, from one that imported
``PRELOAD`` once); what goes down their pipes is a ``Task`` (None: leave), what comes up a
``Progress``, ``Trained``, ``Done`` or ``Idle``. Each worker leads a process group of its own
and carries ``SUITE_WORKER_ENV`` in its environment: a Ctrl-C at the terminal reaches the suite
alone, which stops every worker once with the same signal (SIGINT, or the SIGTERM/SIGHUP it
got). A worker's running pair is then saved as ``incomplete``; pairs not started are
``not_run``. Workers that do not end within ``STOP_WAIT_S`` are killed.

A worker that dies (killed by the out-of-memory killer, say) is what a crash is in a sequential
suite: its pair is an error (exit 3), whatever it had started is killed (every process that
carries its ``WORKER_ID_ENV``: a recorded command, a torchrun job), and the other workers go
on; pairs left when no worker is are errors too. The suite's report is written.
"""

from __future__ import annotations

import os
import pickle
import signal
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

import numpy as np

from lrcheck.errors import RunError, Stopped, stop_words
from lrcheck.runner.workers import Ended, Message, NoWorkers, Pipe, Workers
from lrcheck.spec import RunSpec
from lrcheck.suite.outcome import PairOutcome
from lrcheck.suite.queue import PairQueue
from lrcheck.suite.run import OnDone, OnProgress, PairFiles
from lrcheck.suite.spec import Suite, SuiteEntry

if TYPE_CHECKING:
    from lrcheck.suite.baseline import BaselineRecord
    from lrcheck.trace import RunTrace

SUITE_WORKER_ENV = "LRCHECK_SUITE_WORKER"
# Set by each worker for what it starts: "<SUITE_WORKER_ENV's token>-<the worker's number>".
WORKER_ID_ENV = "LRCHECK_SUITE_WORKER_ID"
STOP_WAIT_S = 60.0
PROGRESS_EVERY_S = 0.2
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# What every worker imports to run a pair: imported once, by the process the workers are
# forked from, rather than by each (torch and scikit-learn: about 3 s of CPU a process).
PRELOAD = ("torch", "sklearn.datasets", "sklearn.metrics", "sklearn.model_selection",
           "sklearn.preprocessing", "lrcheck.comparison", "lrcheck.checks",
           "lrcheck.runner.pair", "lrcheck.runner.local", "lrcheck.runner.plain",
           "lrcheck.suite.run", "lrcheck.reports.files", "lrcheck.reports.html_report")
# An outcome as it comes back: the pair's index in the suite, and what it became.
_Done = Callable[[int, PairOutcome, Sequence[object]], None]


@dataclass(frozen=True)
class Task:
    """Down a worker's pipe: run pair ``index`` of the suite, given the runs already trained
    (pickled, by spec); ``shares``: send up each run it trains, which other pairs need."""

    index: int
    given: dict[RunSpec, bytes]
    shares: bool


@dataclass(frozen=True)
class Progress:
    """Up: pair ``index``'s run ``role`` has made ``done`` of its ``total`` updates."""

    index: int
    role: str
    done: int
    total: int


@dataclass(frozen=True)
class Trained:
    """Up: pair ``index`` trained the run ``spec`` (``trace``, pickled), which other pairs
    share."""

    index: int
    spec: RunSpec
    trace: bytes


@dataclass(frozen=True)
class Done:
    """Up: pair ``index`` became ``outcome``; ``drawings``: the plots its files kept to be drawn
    (``WorkerFiles.drain``)."""

    index: int
    outcome: PairOutcome
    drawings: Sequence[object]


@dataclass(frozen=True)
class Idle:
    """Up: the worker has finished its task."""


class WorkerFiles(PairFiles, Protocol):
    """A worker's ``PairFiles`` (``reports.files.DeferredFiles``): what it kept to be drawn is
    sent with each outcome, for the suite process to draw (``draw``)."""

    def drain(self) -> Sequence[object]:
        """What was kept to be drawn since the last call."""


def run_parallel(suite: Suite, out: Path, jobs: int, *, files: WorkerFiles,
                 draw: Callable[[Sequence[object]], None],
                 baseline: dict[str, BaselineRecord] | None,
                 on_progress: OnProgress | None = None,
                 on_done: OnDone | None = None) -> tuple[list[PairOutcome], str | None]:
    """Every pair of ``suite`` in ``jobs`` workers: the outcomes in the suite's order, and why
    the suite stopped early (None when it did not). ``on_progress`` and ``on_done`` are called
    here, in this process, with the pair's index in ``suite``; ``draw`` with what each pair's
    worker kept to be drawn (``files.drain``)."""
    token = os.environ.get(SUITE_WORKER_ENV) or uuid.uuid4().hex  # a test may choose it
    queue = PairQueue(suite, jobs)
    workers = Workers(_work, (suite, out, files, baseline), mark_env=WORKER_ID_ENV, mark=token,
                      env={SUITE_WORKER_ENV: token}, preload=PRELOAD)
    running: dict[int, int] = {}  # worker → the pair it runs
    outcomes: dict[int, PairOutcome] = {}
    stopped: str | None = None

    def done(index: int, outcome: PairOutcome, drawings: Sequence[object] = ()) -> None:
        outcomes[index] = outcome
        if drawings:
            draw(drawings)
        if on_done is not None:
            on_done(index, outcome)

    try:
        # Started here, where a Ctrl-C is the suite's: the start waits for the workers' imports.
        workers.start(min(jobs, len(suite.entries)))
        _schedule(queue, workers, running, jobs, on_progress, done)
    except KeyboardInterrupt as stop:
        _stop(workers, running, suite, stop, done)
        left = [o.entry.name for _, o in sorted(outcomes.items()) if o.interrupted]
        stopped = (f"{stop_words(stop)} with {len(left)} pair{'s' * (len(left) != 1)} "
                   f"running ({', '.join(map(repr, left))}) of {len(suite.entries)}")
    finally:
        workers.end(STOP_WAIT_S)
    for index in range(len(suite.entries)):
        if index not in outcomes:
            done(index, PairOutcome(suite.entries[index], not_run=True))
    return [outcomes[i] for i in range(len(suite.entries))], stopped


def _schedule(queue: PairQueue, workers: Workers, running: dict[int, int], jobs: int,
              on_progress: OnProgress | None, done: _Done) -> None:
    """Hand out the pairs (``queue``) while their cores are free; collect what the workers send
    until every pair is done. A worker that died with a pair: that pair is an error; with no
    worker left, so is every pair not started."""
    free = jobs
    while queue.todo or running:
        for number, pipe in enumerate(workers.pipes):
            if number in running or pipe.closed:
                continue
            index = queue.take(free)
            if index is None:
                break
            try:
                workers.send(number, Task(index, queue.given(index), queue.shares(index)))
            except OSError:  # it died idle, before its end of the pipe was seen closed
                queue.put_back(index)
                workers.bury(number)
                continue
            running[number], free = index, free - queue.cores(index)
        match workers.receive():
            case NoWorkers():
                for index in list(queue.todo):
                    done(index, _error(queue.suite.entries[index], "not run: every suite "
                                       "worker had died before it could start"), ())
                return
            case Message(body=Progress() as news):
                if on_progress is not None:
                    on_progress(news.index, news.role, news.done, news.total)
            case Message(body=Trained() as news):
                queue.trained(news.index, news.spec, news.trace)
            case Message(body=Done() as news):
                done(news.index, news.outcome, news.drawings)
            case (Ended() | Message(body=Idle())) as news if news.worker in running:
                if isinstance(news, Ended):  # it died with its pair
                    _lost(news, queue.suite, running, done)
                index = running.pop(news.worker)
                free += queue.cores(index)
                queue.ended(index)


def _error(entry: SuiteEntry, why: str) -> PairOutcome:
    """A pair that ended without a report because its worker died: a crash (exit 3)."""
    return PairOutcome(entry, error=why, error_code=RunError.exit_code)


def _lost(event: Ended, suite: Suite, running: dict[int, int], done: _Done) -> None:
    """The pair of a worker that died running it told as an error, saying how it died."""
    code = event.exitcode
    how = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
           and -code in signal.valid_signals() else f"exit code {code}")
    done(running[event.worker], _error(
        suite.entries[running[event.worker]],
        f"its suite worker {event.worker + 1} (pid {event.pid}) died while running it ({how}; "
        "the out-of-memory killer sends SIGKILL); what the pair had started was stopped"), ())


def _stop(workers: Workers, running: dict[int, int], suite: Suite, stop: KeyboardInterrupt,
          done: _Done) -> None:
    """Stop every worker with the signal that stopped the suite and collect what their
    running pairs became (incomplete)."""
    sig = stop.signum if isinstance(stop, Stopped) else signal.SIGINT
    # A second signal while the workers save: the suite is already stopping.
    before = {s: signal.signal(s, signal.SIG_IGN) for s in _STOP_SIGNALS}
    try:
        for number in running:
            workers.signal(number, sig)
        _collect(workers, running, suite, done)
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)


def _collect(workers: Workers, running: dict[int, int], suite: Suite, done: _Done) -> None:
    """What the stopped workers' running pairs became, until each is idle or gone (a worker
    that died: its pair an error)."""
    deadline = time.monotonic() + STOP_WAIT_S
    while running and time.monotonic() < deadline:
        match workers.receive(0.5):
            case NoWorkers():
                break
            case Message(body=Done() as news):
                done(news.index, news.outcome, news.drawings)
            case Ended() as news if news.worker in running:
                _lost(news, suite, running, done)
                running.pop(news.worker)
            case Message(body=Idle()) as news:
                running.pop(news.worker, None)


def _work(number: int, pipe: Pipe, suite: Suite, out: Path, files: WorkerFiles,
          baseline: dict[str, BaselineRecord] | None) -> None:
    """A worker (``runner.workers``' target): run each pair it is given (``run.run_pairs`` of
    that pair, with the runs it is given already trained), sending its progress, what it trains
    that other pairs need, and its outcome, until it is given None or stopped."""
    _stop_on_signals()
    try:
        _pairs(suite, out, files, baseline, pipe)
    except (KeyboardInterrupt, EOFError, BrokenPipeError):  # stopped, or the suite is gone
        pass
    pipe.close()


def _pairs(suite: Suite, out: Path, files: WorkerFiles,
           baseline: dict[str, BaselineRecord] | None, pipe: Pipe) -> None:
    from lrcheck.suite.run import run_pairs

    while isinstance(task := pipe.recv(), Task):  # None: leave
        relay = _Relay(pipe, task.index, files)
        trained = _Trained(task.given, relay.trained if task.shares else None)
        try:
            result = run_pairs(Suite(suite.path, (suite.entries[task.index],)), out,
                               files=files, baseline=baseline, references=trained,
                               on_progress=relay.progress, on_done=relay.done)
        finally:
            pipe.send(Idle())
        if result.interrupted is not None:
            break


class _Trained(dict[RunSpec, "RunTrace"]):
    """A worker's runs already trained for its pair (``run_pairs``' ``references``): those it
    was given, unpickled; each new one is also told to ``send`` (when given), pickled, the
    moment it is added."""

    def __init__(self, given: dict[RunSpec, bytes],
                 send: Callable[[RunSpec, bytes], None] | None) -> None:
        super().__init__({spec: pickle.loads(trace) for spec, trace in given.items()})
        self._send = send

    def __setitem__(self, spec: RunSpec, trace: RunTrace) -> None:
        if spec not in self and self._send is not None:
            self._send(spec, pickle.dumps(trace, protocol=pickle.HIGHEST_PROTOCOL))
        super().__setitem__(spec, trace)


@dataclass
class _Relay:
    """A worker's pair's progress, trained runs and outcome, sent up its pipe with the pair's
    index in the suite; progress at most every ``PROGRESS_EVERY_S``."""

    pipe: Pipe
    index: int
    files: WorkerFiles
    last: float = 0.0

    def progress(self, i: int, role: str, done: int, total: int) -> None:
        if done == total or time.monotonic() - self.last > PROGRESS_EVERY_S:
            self.last = time.monotonic()
            self.pipe.send(Progress(self.index, role, done, total))

    def trained(self, spec: RunSpec, trace: bytes) -> None:
        self.pipe.send(Trained(self.index, spec, trace))

    def done(self, i: int, outcome: PairOutcome) -> None:
        self.pipe.send(Done(self.index, _sendable(outcome), self.files.drain()))


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
