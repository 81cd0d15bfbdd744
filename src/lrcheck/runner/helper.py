"""One helper process that calls the functions it is sent, one after the other, in order: what
draws a report's plots (``reports.render``) while this process trains.

``Helper`` is a one-worker ``concurrent.futures`` executor on ``subprocess``: ``submit`` returns a
``Future``; a helper that dies fails what it had not finished with ``HelperGone``, a
``BrokenProcessPool``, as ``ProcessPoolExecutor`` does. The helper is ``python -c`` of ``_BOOT``,
not a multiprocessing process, so that nothing here starts multiprocessing's resource tracker (a
pool's queues do, and Python has no public way to stop it) and this process knows the helper by
its ``Popen``. Calls go down the helper's stdin as pickles (this process's ``sys.path`` first,
then the initializer), written by a thread of this process, so that ``submit`` never blocks and
a Ctrl-C never leaves half a pickle in the pipe; results come back on the helper's stdout, read
by another thread, which completes the futures and runs their callbacks. The helper's own
stdout is its stderr. It leaves through ``os._exit`` once its stdin ends (``shutdown``, or this
process gone), so a killed lrcheck never leaves it behind for long.

The helper ignores Ctrl-C, and a SIGHUP where this process stops on it (``_signals_held``): a
signal to the whole process group (Ctrl-C, a closed terminal) stops this process alone, which
then stops the helper once it has made what it was sent. ``in_two`` runs two calls in two
processes (a fork) and raises the first error."""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from typing import IO, TypeVar

T = TypeVar("T")

# What the helper runs: this process's sys.path (the first pickle) before lrcheck is imported.
_BOOT = ("import pickle, sys; sys.path[:] = pickle.load(sys.stdin.buffer); "
         "from lrcheck.runner.helper import serve; serve()")
_GONE = "the helper process is gone"


class HelperGone(BrokenProcessPool):
    """The helper process is gone: what it had not finished failed with this."""


class Helper:
    """A helper process started at once, calling ``initializer`` first (a failure there ends
    it: every call then fails with ``HelperGone``). ``OSError`` when it cannot start."""

    def __init__(self, initializer: Callable[[], None] | None = None) -> None:
        proc: subprocess.Popen[bytes] | None = None
        try:
            with _signals_held():  # the helper's, for good
                proc = subprocess.Popen([sys.executable, "-c", _BOOT], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        except BaseException:  # a SIGHUP held meanwhile, told as the block ends: no helper
            if proc is not None:
                proc.kill()
                proc.wait()
            raise
        self._proc = proc
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._lock = threading.Lock()
        self._futures: dict[int, Future[object]] = {}  # sent or to be sent, not yet answered
        self._next = 0
        self._closed = False  # shutdown() was called
        self._broken = False  # the helper is gone
        # What the writer thread sends: (the call's ident, or None for the two that come first,
        # the bytes); None: the end.
        self._outbox: queue.SimpleQueue[tuple[int | None, bytes] | None] = queue.SimpleQueue()
        for first in (sys.path, initializer):
            self._outbox.put((None, pickle.dumps(first, protocol=pickle.HIGHEST_PROTOCOL)))
        self._writer = threading.Thread(target=self._write, args=(self._proc.stdin,),
                                        name="lrcheck-helper-writer", daemon=True)
        self._reader = threading.Thread(target=self._read, args=(self._proc.stdout,),
                                        name="lrcheck-helper-reader", daemon=True)
        self._writer.start()
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        """Call ``fn(*args)`` in the helper, after what was sent before. ``RuntimeError`` after
        ``shutdown``, ``HelperGone`` once the helper is gone; an ``fn`` or arguments
        that do not pickle fail the future."""
        future: Future[T] = Future()
        try:
            call = pickle.dumps((fn, args), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - told through the future, as a pool does
            future.set_exception(exc)
            return future
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot schedule new calls after shutdown")
            if self._broken:
                raise HelperGone(_GONE)
            ident, self._next = self._next, self._next + 1
            self._futures[ident] = future  # type: ignore[assignment]
        self._outbox.put((ident, pickle.dumps((ident, call), protocol=pickle.HIGHEST_PROTOCOL)))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No more calls: the helper makes those sent (not the ones not yet begun, with
        ``cancel_futures``) and leaves; ``wait``: until it has."""
        with self._lock:
            self._closed = True
            pending = list(self._futures.values()) if cancel_futures else []
        for future in pending:
            future.cancel()  # one already running is left to finish
        self._outbox.put(None)
        if wait:
            self._reader.join()
            self._proc.wait()

    def kill(self) -> None:
        """Kill the helper now (what it had not finished fails); it is reaped."""
        self._proc.kill()
        self._proc.wait()

    def _write(self, stream: IO[bytes]) -> None:
        """This process's writer thread: each call, pickled, down the helper's stdin (those
        cancelled meanwhile left out), until ``shutdown`` closes it."""
        try:
            while (item := self._outbox.get()) is not None:
                ident, data = item
                if ident is not None:
                    with self._lock:
                        future = self._futures.get(ident)
                        if future is None:  # the helper is gone
                            continue
                        if not future.set_running_or_notify_cancel():
                            del self._futures[ident]  # cancelled before it was sent
                            continue
                stream.write(data)
                stream.flush()
        except OSError:  # the helper is gone: the reader tells the futures
            pass
        finally:
            try:
                stream.close()
            except OSError:
                pass

    def _read(self, stream: IO[bytes]) -> None:
        """This process's reader thread: each result completes its future; once the helper's
        stdout ends, whatever is unanswered failed with ``HelperGone``."""
        try:
            while True:
                ident, ok, value = pickle.load(stream)
                with self._lock:
                    future = self._futures.pop(ident, None)
                if future is None:
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
        except Exception:  # noqa: BLE001 - EOF, or a helper killed mid-reply: it is gone
            pass
        with self._lock:
            self._broken = True
            left = [future for future in self._futures.values()
                    if future.running() or future.set_running_or_notify_cancel()]
            self._futures = {}
        for future in left:
            future.set_exception(HelperGone(_GONE))
        stream.close()


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """While the helper is started: Ctrl-C ignored, which the helper inherits and Python then
    leaves ignored there; and SIGHUP blocked when this process stops on it (a Python handler:
    ``cli``), a mask the helper inherits and never lifts, while this process is told of a SIGHUP
    sent meanwhile as soon as the block ends. (SIGHUP is blocked, not ignored: one that came
    while ignored would be lost.)"""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers; a helper started here keeps Ctrl-C
        return
    hangup = getattr(signal, "SIGHUP", None)
    held = ({hangup} if hangup is not None and hasattr(signal, "pthread_sigmask")
            and callable(signal.getsignal(hangup)) else set())
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)


def serve() -> None:
    """The helper (``_BOOT``): call the initializer, then each call read from stdin, sending
    back ``(ident, ok, result or error)``; leave through ``os._exit`` when stdin ends."""
    calls = sys.stdin.buffer
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what a call prints goes to stderr, not into the replies
    initializer = pickle.load(calls)
    status = 0
    try:
        if initializer is not None:
            initializer()
        while True:
            try:
                ident, data = pickle.load(calls)
            except EOFError:
                break
            try:
                fn, args = pickle.loads(data)
                reply: tuple[int, bool, object] = (ident, True, fn(*args))
            except BaseException as exc:  # noqa: BLE001 - sent back, as the call's error
                reply = (ident, False, exc)
            replies.write(_dumps(reply))
            replies.flush()
    except BaseException:  # noqa: BLE001 - the initializer failed, or this process is gone
        status = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(status)


def _dumps(reply: tuple[int, bool, object]) -> bytes:
    """``reply`` pickled; a result or an error that does not pickle is sent as an error that
    names it."""
    try:
        return pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - told as the call's error
        value = reply[2]
        what = f"{type(value).__name__}: {value}" if isinstance(value, BaseException) else (
            f"a result of type {type(value).__name__}")
        return pickle.dumps((reply[0], False, RuntimeError(f"{what} (and it does not pickle: "
                                                           f"{exc})")))


def in_two(first: Callable[[], None], second: Callable[[], None], what: str) -> None:
    """``first()`` in a forked child and ``second()`` here, at the same time; the first error
    raised, ``second``'s before ``first``'s (the child's comes through a pipe; ``what`` names
    the child where it ended without one). The child dies with this process
    (``PR_SET_PDEATHSIG``, Linux) and leaves through ``os._exit``."""
    read, write = os.pipe()
    parent = os.getpid()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child leaves through os._exit
        status = 1
        try:
            os.close(read)
            _die_with_parent(parent)
            report = b""
            try:
                first()
            except Exception as exc:  # noqa: BLE001 - sent to the parent
                try:
                    report = pickle.dumps(exc)
                except Exception:  # noqa: BLE001 - an error that does not pickle
                    report = pickle.dumps(RuntimeError(f"{type(exc).__name__}: {exc}"))
            with os.fdopen(write, "wb") as pipe:
                pipe.write(report)
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    error: Exception | None = None
    try:
        second()
    except Exception as exc:  # noqa: BLE001 - raised below, once the child is done
        error = exc
    with os.fdopen(read, "rb") as pipe:
        report = pipe.read()
    _, status = os.waitpid(child, 0)
    if report:
        error = error or pickle.loads(report)
    elif status != 0:
        error = error or RuntimeError(f"{what} ended with status {status}")
    if error is not None:
        raise error


def _die_with_parent(parent: int) -> None:
    """Have Linux kill this process when its parent dies (a Ctrl-C that kills the helper
    leaves no child of its behind); elsewhere, and when the parent is already gone, leave."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)
