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
sent, then stops it. The helper process itself, and the fork that draws in two, are
``runner.helper``'s.
"""

from __future__ import annotations

import collections
import functools
import os
import threading
from collections.abc import Iterable
from concurrent.futures import Future

from lrcheck.reports.plots import Plot
from lrcheck.runner.helper import Helper, HelperGone, in_two


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

    The helper is handed one task at a time, the next once it has finished the last (one sent
    ahead could no longer be taken back): a plot it has not begun stays here, where
    ``finish()`` can take it back."""

    def __init__(self, background: bool = False) -> None:
        self._pool: Helper | None = None  # None: plots are drawn here
        self._started: Helper | None = None  # what close() shuts down
        # The helper's reader thread hands tasks over too; reentrant: a task already done when its
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
        except (HelperGone, RuntimeError):
            return None

    def _start(self) -> None:
        try:
            pool = Helper(initializer=warm_up)
        except (OSError, ValueError):
            return  # no helper: every plot is drawn here
        self._pool = self._started = pool

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
        """Give the helper the next waiting task if it has none (called again from the helper's
        reader thread when the helper finishes one). Without a helper, or when it is gone, every
        waiting task fails with ``HelperGone``, and ``finish()`` draws its plots here.
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
                except (HelperGone, RuntimeError):
                    self._busy = False
                    failed.append(task)
                except BaseException:
                    self._busy = False
                    self._waiting.appendleft(task)
                    raise
        for task in failed:
            task.future.set_exception(HelperGone("the plot helper is gone"))

    def _done(self, task: _Task, done: Future[None]) -> None:
        """The helper has finished ``task``; the next is handed over."""
        error = HelperGone("the plot helper is gone") if done.cancelled() else (
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
            except HelperGone:
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
        lrcheck leaves through ``os._exit``, and a helper still running then would be left to
        init."""
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
            except (HelperGone, RuntimeError):
                pass  # the helper is gone: nothing more will be drawn
        try:
            pool.shutdown(wait=True)
        except KeyboardInterrupt:  # a second Ctrl-C while waiting: the user wants out now
            pool.kill()
            pool.shutdown(wait=True, cancel_futures=True)

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
    by drawing a small figure into memory. (The helper leaves through ``os._exit``, as lrcheck
    does: not tearing matplotlib and numpy down saves about 0.1 s that ``close()`` waits for.)"""
    import io

    from lrcheck.reports.plots import new_figure

    fig, axis = new_figure(figsize=(1, 1))
    axis.set_title("lrcheck")
    fig.savefig(io.BytesIO(), format="png")


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
    child draws the PNGs of one half (``halves``), this one the others (``runner.helper.in_two``);
    the pages (.html), which inline PNGs drawn before them, come after both. The first error is
    raised, once the pages are drawn."""
    pictures = [plot for plot in plots if plot.path.suffix != ".html"]
    pages = [plot for plot in plots if plot.path.suffix == ".html"]
    if len(pictures) < 2:
        _draw_all(plots)
        return
    theirs, mine = halves(pictures)
    error: Exception | None = None
    try:
        in_two(functools.partial(_draw_all, theirs), functools.partial(_draw_all, mine),
               f"the process drawing {[str(p.path) for p in theirs]}")
    except Exception as exc:  # noqa: BLE001 - raised below, once the pages are drawn
        error = exc
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


def helper_pid() -> int:
    return os.getpid()
