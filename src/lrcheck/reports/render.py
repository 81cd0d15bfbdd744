"""Where a report's plots are drawn: here, or in one helper process.

Drawing the three PNGs of a report costs about a second: importing matplotlib (0.6–0.7 s on a
2-CPU machine) and drawing them (0.1–0.2 s each). The trainings use one core (runner/local.py),
so on a machine with a second one ``Renderer(background=True)`` starts a helper at once: it
imports matplotlib and loads its fonts while this process imports torch and trains, then draws
each plot it is sent — in a suite, while this process trains the next pair. This process never
imports matplotlib.

``finish()`` waits for every plot sent so far and raises the first drawing error. This
process is idle then, so the plots the helper has not begun are taken back and sent again as one
task that the helper draws in two processes (``draw_in_two``: it forks, matplotlib already
loaded; each process gets about half the drawing time): the end of a suite waits for the last
pair's plots and matrix.png. So that every plot not yet begun can be taken back, the helper is
handed one plot at a time, the next when it has drawn the last. If the
helper cannot start or dies, the plots are drawn here instead: a report is never lost to the
helper. The helper ignores Ctrl-C, and a SIGHUP when this process stops on it (a closed
terminal: ``cli``); this process handles them, and ``close()`` lets the helper draw what it was
sent, then stops it and multiprocessing's resource tracker.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import multiprocessing
import os
import pickle
import signal
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from lrcheck.reports.plots import Plot


def second_cpu() -> bool:
    """Whether this process may run on more than one CPU (a helper pays off only then)."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except AttributeError:  # not on Linux
        return (os.cpu_count() or 1) > 1


class _Task:
    """Plots the helper draws as one task, in order (``in_two``: with ``draw_in_two``), and the
    future ``finish()`` waits on."""

    def __init__(self, plots: list[Plot], in_two: bool = False) -> None:
        self.plots, self.in_two = plots, in_two
        self.future: Future[None] = Future()


class Renderer:
    """Draws ``Plot``s: in a helper process when ``background`` (and it starts), else here.

    The helper is handed one task at a time, the next once it has finished the last (a pool
    queues one more ahead of its worker, which then can no longer be taken back): a plot it
    has not begun stays here, where ``finish()`` can take it back."""

    def __init__(self, background: bool = False) -> None:
        self._pool: ProcessPoolExecutor | None = None  # None: plots are drawn here
        self._started: ProcessPoolExecutor | None = None  # what close() shuts down
        # The pool's thread hands tasks over too; reentrant: a task already done when its
        # callback is added is told at once, in the thread that handed it over.
        self._lock = threading.RLock()
        self._tasks: list[_Task] = []  # every task sent since the last finish(), in order
        self._waiting: collections.deque[_Task] = collections.deque()  # not yet handed over
        self._busy = False  # the helper has a task
        if background:
            self._start()

    @property
    def in_background(self) -> bool:
        return self._pool is not None

    def helper(self) -> int | None:
        """The helper's process id, once it has started (None when plots are drawn here)."""
        if self._pool is None:
            return None
        try:
            return self._pool.submit(helper_pid).result()
        except (BrokenProcessPool, RuntimeError):
            return None

    def _start(self) -> None:
        try:
            with _stop_signals_held():  # the helper's and the tracker's, for good
                try:
                    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                               initializer=warm_up)
                    self._started = pool
                    pool.submit(helper_pid)  # starts the helper now, not at the first plot
                except (OSError, RuntimeError):
                    self.close()
                    return  # no helper: every plot is drawn here
                self._pool = pool
        except BaseException:  # a signal held meanwhile, told as the block ends: stop them
            self.close()
            raise

    def draw(self, plots: Iterable[Plot]) -> None:
        """Draw ``plots``: send them to the helper (and return at once), or draw them here."""
        for plot in plots:
            with self._lock:
                here = self._pool is None
                if not here:
                    task = _Task([plot])
                    self._tasks.append(task)
                    self._waiting.append(task)
            if here:
                plot.draw()
            else:
                self._hand_over()

    def _hand_over(self) -> None:
        """Give the helper the next waiting task if it has none (called again from the pool's
        thread when the helper finishes one). Without a helper, or when it is gone, every
        waiting task fails with ``BrokenProcessPool``, and ``finish()`` draws its plots here.
        Handing over holds the lock, so ``close()`` never finds a task half handed over; a
        Ctrl-C meanwhile leaves the task waiting again (drawn twice at worst, never lost)."""
        failed: list[_Task] = []
        with self._lock:
            while not self._busy and self._waiting:
                task = self._waiting.popleft()
                if self._pool is None:
                    failed.append(task)
                    continue
                self._busy = True
                try:
                    inner = self._pool.submit(draw_in_two if task.in_two else _draw_all,
                                              task.plots)
                    inner.add_done_callback(functools.partial(self._done, task))
                except (BrokenProcessPool, RuntimeError):
                    self._busy = False
                    failed.append(task)
                except BaseException:
                    self._busy = False
                    self._waiting.appendleft(task)
                    raise
        for task in failed:
            task.future.set_exception(BrokenProcessPool("the plot helper is gone"))

    def _done(self, task: _Task, done: Future[Any]) -> None:
        """The helper has finished ``task``; the next is handed over."""
        error = BrokenProcessPool("the plot helper is gone") if done.cancelled() else (
            done.exception())
        with self._lock:
            self._busy = False
            if not task.future.done():  # a task handed over twice is told once
                if error is None:
                    task.future.set_result(None)
                else:
                    task.future.set_exception(error)
        self._hand_over()

    def finish(self) -> None:
        """Wait until every plot sent so far is drawn. A plot whose helper died is drawn here;
        the first plot that failed to draw raises its error (after the others are drawn)."""
        self._take_back()
        with self._lock:
            tasks, self._tasks = self._tasks, []
        error: BaseException | None = None
        for task in tasks:
            try:
                task.future.result()
            except BrokenProcessPool:
                with self._lock:
                    self._pool = None
                self._hand_over()  # the tasks still waiting fail too, and are drawn here
                try:
                    _draw_all(task.plots)
                except Exception as exc:  # noqa: BLE001 - raised below, as a drawing error
                    error = error or exc
            except Exception as exc:  # noqa: BLE001 - raised below, once the rest are drawn
                error = error or exc
        if error is not None:
            raise error

    def _take_back(self) -> None:
        """This process is about to wait: the plots the helper has not begun become one
        ``draw_in_two`` task, in their order."""
        if not hasattr(os, "fork"):
            return
        with self._lock:
            if self._pool is None or not self._waiting:
                return
            task = _Task([plot for taken in self._waiting for plot in taken.plots], in_two=True)
            self._tasks = [t for t in self._tasks if t not in self._waiting] + [task]
            self._waiting.clear()
            self._waiting.append(task)
        self._hand_over()

    def close(self) -> None:
        """Stop the helper once it has drawn what it was sent (errors are ``finish()``'s to
        raise): an interrupted suite keeps the plots of the pairs it finished. A Ctrl-C while
        waiting stops the helper at once. Either way no process is left once this returns:
        lrcheck leaves through ``os._exit``, and a child still running then would be left to
        init (the helper, or multiprocessing's resource tracker)."""
        with self._lock:
            usable, pool = self._pool is not None, self._started
            self._pool = self._started = None
            waiting = list(self._waiting)
            self._waiting.clear()
            self._tasks = []
            if pool is None:
                return
            try:
                for task in waiting if usable else []:  # in order, after the one it has
                    pool.submit(_draw_all, task.plots)
            except (BrokenProcessPool, RuntimeError):
                pass  # the helper is gone: nothing more will be drawn
        try:
            pool.shutdown(wait=True)
        except KeyboardInterrupt:  # a second Ctrl-C while waiting: the user wants out now
            helpers = list((getattr(pool, "_processes", None) or {}).values())
            for process in helpers:
                process.kill()
            pool.shutdown(wait=True, cancel_futures=True)
        finally:
            _stop_resource_tracker()

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, kind: type[BaseException] | None, *rest: object) -> None:
        try:
            if kind is None:
                self.finish()
        finally:
            self.close()


def warm_up() -> None:
    """In the helper, before its first plot: import matplotlib and load the fonts a plot uses,
    by drawing a small figure into memory; and make the helper leave without finalising its
    interpreter (``_leave_now``)."""
    import atexit
    import io

    from lrcheck.reports.plots import new_figure

    atexit.register(_leave_now)
    fig, axis = new_figure(figsize=(1, 1))
    axis.set_title("lrcheck")
    fig.savefig(io.BytesIO(), format="png")


def _leave_now() -> None:
    """The helper leaves through ``os._exit``, as lrcheck itself does (``cli.main``), when its
    interpreter exits: by then its worker loop has ended, multiprocessing has sent every result
    and flushed stdout and stderr (``Process._bootstrap``), and each plot's file was closed and
    renamed. What is skipped is the teardown of matplotlib and numpy, about 0.1 s that
    ``close()`` waits for. The status is 0: a plot's error reaches this process through its
    future, and the pool does not read a helper's exit status."""
    os._exit(0)


def _draw_all(plots: list[Plot]) -> None:
    """Draw every plot, in order; then raise the first error."""
    error: Exception | None = None
    for plot in plots:
        try:
            plot.draw()
        except Exception as exc:  # noqa: BLE001 - raised below, once the rest are drawn
            error = error or exc
    if error is not None:
        raise error


def draw_in_two(plots: list[Plot]) -> None:
    """In the helper, while lrcheck waits for it: draw ``plots`` in two processes. A forked
    child draws the PNGs of one half (``halves``), this one the others; the pages (.html),
    which inline PNGs drawn before them, come after both. The first error is raised here, the
    child's through a pipe; the child dies with this process (``PR_SET_PDEATHSIG``) and leaves
    through ``os._exit``."""
    pictures = [plot for plot in plots if plot.path.suffix != ".html"]
    pages = [plot for plot in plots if plot.path.suffix == ".html"]
    if len(pictures) < 2:
        _draw_all(plots)
        return
    theirs, mine = halves(pictures)
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
                _draw_all(theirs)
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
        _draw_all(mine)
    except Exception as exc:  # noqa: BLE001 - raised below, once the rest are drawn
        error = exc
    with os.fdopen(read, "rb") as pipe:
        report = pipe.read()
    _, status = os.waitpid(child, 0)
    if report:
        error = error or pickle.loads(report)
    elif status != 0:
        error = error or RuntimeError(f"the process drawing {[str(p.path) for p in theirs]} "
                                      f"ended with status {status}")
    try:
        _draw_all(pages)
    except Exception as exc:  # noqa: BLE001 - raised below
        error = error or exc
    if error is not None:
        raise error


def halves(pictures: list[Plot]) -> tuple[list[Plot], list[Plot]]:
    """``pictures`` in two halves of about the same drawing time (by ``Plot.weight``, heaviest
    first, each to the lighter half), each in its order; the first holds the heaviest."""
    halves: tuple[list[int], list[int]] = ([], [])
    loads = [0.0, 0.0]
    for i in sorted(range(len(pictures)), key=lambda i: -pictures[i].weight):
        lighter = 0 if loads[0] <= loads[1] else 1
        halves[lighter].append(i)
        loads[lighter] += pictures[i].weight
    return ([pictures[i] for i in sorted(halves[0])], [pictures[i] for i in sorted(halves[1])])


def _die_with_parent(parent: int) -> None:
    """Have Linux kill this process when its parent dies (a Ctrl-C that kills the helper
    leaves no drawing child); elsewhere, and when the parent is already gone, leave."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)


def helper_pid() -> int:
    return os.getpid()


@contextlib.contextmanager
def _stop_signals_held() -> Iterator[None]:
    """While the helper, and multiprocessing's resource tracker that its queues start, are
    started: Ctrl-C ignored, which the helper inherits and Python then leaves ignored there (the
    tracker ignores it itself); and SIGHUP blocked when this process stops on it (a Python
    handler: ``cli``), a mask both inherit and never lift, while this process is told of a
    SIGHUP sent meanwhile as soon as the block ends. So a signal to the whole process group
    (Ctrl-C, a closed terminal) stops this process alone, which then stops them: a tracker that
    the SIGHUP killed was started again by the helper's shutdown, and the new one printed a
    KeyError traceback for every semaphore it had never seen. (SIGHUP is blocked, not ignored:
    one that came while ignored would be lost; the tracker lifts a block of SIGINT and SIGTERM
    as it starts, and it ignores SIGTERM itself.)"""
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


def _stop_resource_tracker() -> None:
    """Stop and reap multiprocessing's resource tracker, which the helper's queues started in
    this process: it would otherwise leave only after this process, as init's orphan. (Python
    3.11 to 3.13 name the method ``_stop``; multiprocessing starts the tracker again if
    anything here needs it later.)"""
    from multiprocessing import resource_tracker

    tracker = resource_tracker._resource_tracker
    stop = getattr(tracker, "_stop", None)
    if stop is not None and getattr(tracker, "_pid", None) is not None:  # not started: none
        stop()
