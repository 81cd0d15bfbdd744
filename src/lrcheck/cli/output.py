"""How a command shows what it did: the tables (or result.json) on stdout, a progress bar on
stderr, and where the report is; the report's folder, made and cleaned up."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.markup import escape

from lrcheck.errors import Interrupted

if TYPE_CHECKING:
    from rich.progress import Progress as Bar
    from rich.progress import TaskID

    from lrcheck.api import Progress, Report
    from lrcheck.reports.render import Renderer
    from lrcheck.spec import PairSpec

DEFAULT_REPORTS = Path("lrcheck-reports")
SUITE_LOG_WIDTH = 160
LOG_WIDTH = 110  # tables printed to a file or a CI log: wide enough not to fold every detail


def stdout_console(width: int = LOG_WIDTH) -> Console:
    """stdout; when it is a file or a CI log, at least ``width`` columns wide."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, width))
    return console


def _flush_output() -> None:
    """What Python and C hold buffered for stdout and stderr, written now."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    with contextlib.suppress(AttributeError, OSError, TypeError):
        import ctypes

        ctypes.CDLL(None).fflush(None)  # every C stdio stream (printf from a library)


class JsonStdout:
    """stdout that carries the JSON alone (``--json``), whatever a framework or any library
    prints while the command runs: while ``held``, file descriptor 1, where print(), logging
    and C libraries write and which every process started meanwhile inherits, is stderr's, and
    ``write`` goes to the real stdout."""

    def __init__(self) -> None:
        self._fd: int | None = None  # while held: the real stdout's file descriptor, or
        self._stream: TextIO | None = None  # sys.stdout where it was not on 1 (a CliRunner's)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        original = sys.stdout
        _flush_output()
        try:
            saved = os.dup(1)
        except OSError:  # no file descriptor 1: nothing else can write there either
            yield
            return
        try:
            on_fd_1 = original.fileno() == 1
        except (AttributeError, OSError, ValueError):
            on_fd_1 = False
        self._fd, self._stream = (saved, None) if on_fd_1 else (None, original)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        try:
            yield
        finally:
            _flush_output()
            sys.stdout = original
            os.dup2(saved, 1)
            os.close(saved)
            self._fd = self._stream = None

    def write(self, text: str) -> None:
        if self._fd is None:
            stream = self._stream or sys.stdout
            stream.write(text)
            stream.flush()
            return
        data = text.encode("utf-8")
        while data:
            data = data[os.write(self._fd, data):]


@dataclass(frozen=True)
class Output:
    """How a command shows what it did: the tables on stdout (``json``: result.json instead, and
    nothing else on stdout while the command runs: ``running``; ``quiet``: the verdict line
    only), a progress bar on stderr when that is a terminal, the report's folder on stderr.
    Under torchrun rank 0 alone shows anything (``speaks``)."""

    json: bool = False
    quiet: bool = False
    speaks: bool = True
    stdout: JsonStdout = field(default_factory=JsonStdout, compare=False, repr=False)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Where the command runs: with ``json``, stdout is held for the JSON alone."""
        if not self.json:
            yield
            return
        with self.stdout.held():
            yield

    @property
    def progress(self) -> bool:
        return self.speaks and not (self.quiet or self.json)

    def starting(self, what: str) -> None:
        """A line where a progress bar will be shown: the first bar takes seconds to come
        (torch, the data, the runs are being set up), and a blank terminal looks hung."""
        errors = Console(stderr=True, highlight=False)
        if self.progress and errors.is_terminal:
            errors.print(f"lrcheck: {what}…", markup=False)

    def show(self, report: Report, folder: Path) -> None:
        """``report``, saved in ``folder``, on stdout; the folder on stderr."""
        console = stdout_console()
        if self.json:  # the file just written, not a second serialisation of a long trace
            self.stdout.write((folder / "result.json").read_text(encoding="utf-8"))
        elif self.quiet:
            from lrcheck.reports.table import verdict_text

            console.print(verdict_text(report))
        else:
            from lrcheck.reports.kinds import render

            console.print(render(report))
        Console(stderr=True, highlight=False).print(escape(f"report: {folder}"), soft_wrap=True)
        sys.stdout.flush()


class ProgressBar:
    """Each run's updates as a bar on stderr while the runs train, when ``active`` and stderr is
    a terminal; ``update`` is the ``progress`` callback of the library calls (None when there
    is no bar)."""

    def __init__(self, active: bool) -> None:
        self._bar: Bar | None = None
        self._tasks: dict[str, TaskID] = {}
        console = Console(stderr=True, highlight=False)
        if active and console.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._bar = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console,
                                 transient=True)
            self._bar.start()

    @property
    def update(self) -> Progress | None:
        return None if self._bar is None else self._update

    def _update(self, role: str, done: int, total: int) -> None:
        assert self._bar is not None  # update is None without a bar
        if role not in self._tasks:
            self._tasks[role] = self._bar.add_task(f"{role} updates", total=total)
        self._bar.update(self._tasks[role], completed=done)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def plots(active: bool) -> Renderer:
    """Where the command's plots are drawn: in a helper process started now, whose matplotlib
    import and drawing overlap the training (``reports.render``), when this process writes the
    report and the machine has a second CPU; else in this process. Used as a context manager:
    the helper is stopped at the end."""
    from lrcheck.reports.render import Renderer, second_cpu

    return Renderer(background=active and second_cpu())


def save_and_show(report: Report, folder: Path, renderer: Renderer, output: Output) -> None:
    """Save ``report`` in ``folder`` (its plots drawn by ``renderer``, which is stopped then),
    and show it."""
    from lrcheck.reports.files import write_report

    saved = write_report(report, folder, renderer)
    renderer.finish()
    renderer.close()
    output.show(report, saved)


@contextlib.contextmanager
def saving_incomplete(folder: Path, output: Output) -> Iterator[None]:
    """What an interrupted run had recorded, saved in ``folder`` (by rank 0 alone under
    torchrun): ``Interrupted`` is raised again, saying where."""
    try:
        yield
    except Interrupted as exc:
        if not output.speaks:
            raise
        from lrcheck.reports.files import write_incomplete

        raise exc.saved_in(write_incomplete(exc.result, folder)) from None


@contextlib.contextmanager
def prepared(pair: PairSpec, out: Path | None, *, create: bool,
             default: Path | None = None) -> Iterator[Path]:
    """Validate what can be validated before training (``api.check_setup``: the scheduler
    factory imports, the device exists); the report folder (created when ``create``: under
    torchrun only rank 0 writes), removed again when the command ends before anything was
    written there (bad input that only the runs' data shows, a crash)."""
    from lrcheck.api import check_setup
    from lrcheck.reports.files import report_folder

    check_setup([pair.candidate])
    folder = out if out is not None else (default or DEFAULT_REPORTS / pair.name)
    if not create:
        yield folder
        return
    with report_folder(folder) as made:
        yield made
