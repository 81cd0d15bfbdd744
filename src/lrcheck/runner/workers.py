"""Worker processes, each with a pipe of its own to this process: the suite's ``--jobs``
(``suite/parallel.py`` says what goes down the pipes).

Each worker leads a process group of its own (a Ctrl-C at the terminal reaches this process
alone) and carries a mark in its environment (``mark_env=<mark>-<its number>``), which whatever
it starts inherits: what a dead worker had started is found by it and killed (``bury``).

The workers are started by one leader process, spawned (a fresh interpreter), which imports
what every worker needs once (``preload``: torch and scikit-learn, about 3 s of CPU a process)
and then forks them; elsewhere than on Linux, where forking a process that has loaded torch is
not safe, it spawns them instead and each imports what it needs itself. The leader tells this
process each worker's pid as it starts and its exit status as it ends, ignores Ctrl-C (which is
this process's to handle), and leaves once every worker has. That is what Python's fork server
does, without its private parts: Python has no public way to stop a fork server or to choose
what it preloads for one use, and this one is stopped and reaped with its workers (``end``), so
that whoever waits for this process (``wait4``) counts their memory too.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Protocol

from lrcheck.procs.marks import marked

# How long a worker whose pipe ended is given to be told as ended by the leader.
REAP_S = 5.0


class Pipe(Protocol):
    """A worker's end of its pipe (a ``multiprocessing.connection.Connection``): what it sends
    and receives pickles."""

    def send(self, obj: object) -> None: ...

    def recv(self) -> object: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Message:
    """What worker ``worker`` sent."""

    worker: int
    body: object


@dataclass(frozen=True)
class Ended:
    """Worker ``worker``'s pipe ended: it left, or died (``exitcode``: negative for the signal
    that killed it; None where it is not known). What it had started was killed."""

    worker: int
    pid: int | None
    exitcode: int | None


@dataclass(frozen=True)
class NoWorkers:
    """Every worker's pipe has ended."""


@dataclass(frozen=True)
class Quiet:
    """Nothing came in the time given."""


Event = Message | Ended | NoWorkers | Quiet


@dataclass(frozen=True)
class _Setup:
    """What the leader needs: the workers' target (called as ``target(number, pipe, *args)``),
    their marks, what to import before forking them."""

    target: Callable[..., None]
    args: tuple[object, ...]
    mark_env: str
    marks: tuple[str, ...]
    preload: tuple[str, ...]


class Workers:
    """``count`` workers (``start``), each running ``target(number, pipe, *args)`` (``pipe``: a
    ``Pipe``); ``env`` is set in the environment of every process here (the leader's too)."""

    def __init__(self, target: Callable[..., None], args: tuple[object, ...], *,
                 mark_env: str, mark: str, env: Mapping[str, str],
                 preload: Sequence[str] = ()) -> None:
        self._target, self._args, self._env = target, args, dict(env)
        self._mark_env, self._mark, self._preload = mark_env, mark, tuple(preload)
        self.pipes: list[Connection] = []
        self._leader: BaseProcess | None = None
        self._status: Connection | None = None  # the leader's news: ("started" | "ended", n, _)
        self._pids: dict[int, int] = {}
        self._codes: dict[int, int | None] = {}  # the workers told as ended

    def mark(self, number: int) -> str:
        return f"{self._mark}-{number}"

    def start(self, count: int) -> None:
        """Start the leader and, through it, ``count`` workers; returns once each has started
        (the first waits for the leader's imports), or the leader is gone."""
        context = multiprocessing.get_context("spawn")
        theirs: list[Connection] = []
        for _ in range(count):
            mine, other = context.Pipe()
            self.pipes.append(mine)
            theirs.append(other)
        self._status, news = context.Pipe(duplex=False)
        setup = _Setup(self._target, self._args, self._mark_env,
                       tuple(self.mark(n) for n in range(count)), self._preload)
        before = {name: os.environ.get(name) for name in self._env}
        os.environ.update(self._env)  # inherited by the leader and the workers
        try:
            self._leader = context.Process(target=_lead, args=(setup, theirs, news),
                                           name="lrcheck-workers")
            self._leader.start()
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            for end in (*theirs, news):
                end.close()
        while len(self._pids) < count and self._news(None):
            pass

    def send(self, number: int, body: object) -> None:
        """``body`` down worker ``number``'s pipe; ``OSError`` when it is gone."""
        self.pipes[number].send(body)

    def receive(self, timeout: float | None = None) -> Event:
        """The next message from a worker, or what happened instead: a worker's pipe ended
        (``Ended``, the worker buried), none is left, nothing came within ``timeout``."""
        while True:
            pipes = {pipe: n for n, pipe in enumerate(self.pipes) if not pipe.closed}
            if not pipes:
                return NoWorkers()
            status = [] if self._status is None or self._status.closed else [self._status]
            ready = wait([*pipes, *status], timeout)
            if not ready:
                return Quiet()
            from_workers = [conn for conn in ready if conn in pipes]
            if not from_workers:
                self._news(0)
                continue
            pipe = from_workers[0]
            assert isinstance(pipe, Connection)
            number = pipes[pipe]
            try:
                return Message(number, pipe.recv())
            except (EOFError, OSError):
                self.bury(number)
                return Ended(number, self._pids.get(number), self._codes.get(number))

    def signal(self, number: int, sig: int) -> None:
        """Send ``sig`` to worker ``number`` where it runs still."""
        pid = self._pids.get(number)
        if pid is not None and number not in self._codes:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def bury(self, number: int) -> None:
        """A worker found gone: its pipe closed, its end awaited (``REAP_S``), and whatever it
        had started killed: every process carrying its mark (a recorded command, a torchrun
        job in a session of its own)."""
        self.pipes[number].close()
        deadline = time.monotonic() + REAP_S
        while number not in self._codes and self._news(deadline - time.monotonic()):
            pass
        for pid in marked(self.mark(number), self._mark_env):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def end(self, wait_s: float) -> None:
        """Every worker told to leave (None down its pipe) and gone within ``wait_s``: killed
        when it does not leave in time; then the leader."""
        for pipe in self.pipes:
            try:
                pipe.send(None)
            except (OSError, ValueError):  # it has left already
                pass
        deadline = time.monotonic() + wait_s
        while len(self._codes) < len(self._pids) and self._news(deadline - time.monotonic()):
            pass
        leader_gone = self._status is None or self._status.closed
        for number, pid in self._pids.items():
            if number in self._codes:
                continue
            if leader_gone:  # no one to tell its end: it leads its own group until it has ended
                _gone(pid, deadline)
            else:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if self._leader is not None:
            self._leader.join(REAP_S)
            if self._leader.is_alive():
                self._leader.kill()
                self._leader.join()
        for conn in (*self.pipes, *([self._status] if self._status is not None else [])):
            conn.close()

    def _news(self, timeout: float | None) -> bool:
        """Read the leader's next news, waiting up to ``timeout`` seconds (None: as long as it
        takes). False when none came: the leader is gone, or the time is up."""
        status = self._status
        if status is None or status.closed:
            return False
        if timeout is not None and not status.poll(max(0.0, timeout)):
            return False
        try:
            what, number, value = status.recv()
        except Exception:  # noqa: BLE001 - ended, or cut short by a Ctrl-C: no more news
            status.close()
            return False
        if what == "started":
            self._pids[number] = value
        else:
            self._codes[number] = value
        return True


def _gone(pid: int, deadline: float) -> None:
    """A worker whose leader was killed (with the terminal's process group, say) may still run:
    wait for it until ``deadline``, then kill its group. A worker leads its own process group,
    which is how it is told from a process that took its pid; a zombie has ended."""
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


def _lead(setup: _Setup, pipes: list[Connection], news: Connection) -> None:
    """The leader: import ``setup.preload``, start a worker per pipe (forked on Linux, else
    spawned), tell each one's pid, then each one's exit status as it ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the suite's, which tells the workers
    fork = sys.platform == "linux"
    if fork:
        for name in setup.preload:
            with contextlib.suppress(ImportError):
                __import__(name)
    context = multiprocessing.get_context("fork") if fork else multiprocessing.get_context("spawn")
    workers: dict[int, BaseProcess] = {}
    for number, pipe in enumerate(pipes):
        others = [p for p in pipes if p is not pipe] + [news]
        worker = context.Process(target=_work, args=(setup, number, pipe, others if fork else []),
                                 daemon=True, name=f"lrcheck-worker-{number}")
        worker.start()
        workers[number] = worker
        news.send(("started", number, worker.pid))
    for pipe in pipes:
        pipe.close()  # the workers hold theirs: a worker's end is its pipe's end
    ends = {worker.sentinel: number for number, worker in workers.items()}
    while ends:
        for sentinel in wait(list(ends)):
            assert isinstance(sentinel, int)
            number = ends.pop(sentinel)
            workers[number].join()
            with contextlib.suppress(OSError):  # this process is gone: no one to tell
                news.send(("ended", number, workers[number].exitcode))


def _work(setup: _Setup, number: int, pipe: Connection, others: list[Connection]) -> None:
    """A worker: the other workers' pipes and the leader's news closed (a forked worker has
    copies), a process group of its own, its mark set, then its target."""
    for conn in others:
        conn.close()
    os.setpgrp()  # Ctrl-C at the terminal reaches the suite, which tells the workers once
    os.environ[setup.mark_env] = setup.marks[number]
    setup.target(number, pipe, *setup.args)
