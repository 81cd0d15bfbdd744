"""What ends a command, in one place: its exit code (docs/design.md, "Exit codes"), the one line
it tells on stderr, and the signals that stop it as Ctrl-C does. A traceback reaching a user is a bug."""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from enum import Enum
from types import FrameType
from typing import Any, Protocol, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from lrcheck.errors import Interrupted, LrcheckError, RunError, Stopped, stop_words

# The click that typer runs on: its own vendored copy (typer._click) in recent typer, click itself
# before.
_click = importlib.import_module(typer.BadParameter.__module__)

T = TypeVar("T")

STOP_SIGNALS = ("SIGTERM", "SIGHUP")


def speaks() -> bool:
    """Whether this process tells what happened: under torchrun every rank runs the command, and
    rank 0 alone speaks for them (a crash excepted: the rank it happened on tells it)."""
    return os.environ.get("RANK", "0") == "0"


def error_line(text: str) -> None:
    """``text`` as lrcheck's one error line on stderr."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"[bold red]lrcheck: error:[/] {escape(' '.join(text.split()))}", markup=True)


def note(text: str) -> None:
    """A line on stderr that is not an error: lrcheck did what was asked, and says how."""
    if speaks():
        Console(stderr=True, highlight=False, soft_wrap=True).print(escape(f"lrcheck: note: {text}"))


def warning(text: str) -> None:
    """A line on stderr about something that went wrong beside the verdict, which stands."""
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        escape(f"lrcheck: warning: {text}"))


def noted(build: Callable[[], T]) -> T:
    """``build()``, with the ``FutureWarning`` the library gives for an old spelling (``--policy
    accelerate``) told as a note; any other warning is shown as Python shows it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FutureWarning)
        try:
            return build()
        finally:
            for warned in caught:
                if issubclass(warned.category, FutureWarning):
                    note(str(warned.message))
                else:
                    warnings.showwarning(warned.message, warned.category, warned.filename,
                                         warned.lineno)


def _choice_message(usage: object) -> str | None:
    """A fixed choice that is none of its values, said as the library says it (``spec.choose``)
    rather than as typer's validation does."""
    param = getattr(usage, "param", None)
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    errors = getattr(getattr(usage, "__cause__", None), "errors", None)
    if param is None or not (isinstance(annotation, type) and issubclass(annotation, Enum)
                             and callable(errors)):
        return None
    given = next((e.get("input") for e in errors() if "input" in e), None)
    flag = max(param.opts, key=len)
    return f"{flag} {given!r} is not known; choose one of: {', '.join(m.value for m in annotation)}"


class _ClickError(Protocol):
    """What ``_usage_code`` reads of a click exception (``ClickException``, ``UsageError``)."""

    exit_code: int

    def show(self) -> None: ...

    def format_message(self) -> str: ...


def _usage_code(usage: _ClickError) -> int:
    """A usage error (the click typer runs on, ``_click``, which mypy does not see) told in one
    line: exit 2; click >= 8.2's ``NoArgsIsHelpError`` is help, shown."""
    if type(usage).__name__ == "NoArgsIsHelpError":
        usage.show()
        return int(usage.exit_code)
    where = usage.ctx.command_path if isinstance(usage, _click.UsageError) and usage.ctx \
        else None
    text = _choice_message(usage) or usage.format_message().rstrip(".")
    error_line(text + (f"; see '{where} --help'" if where else ""))
    return 2


def exit_code(exc: BaseException) -> int:
    """The one place where what ended a command becomes its line on stderr and its exit code
    (docs/design.md, "Exit codes"): a usage error or bad input 2, a crash 3, Ctrl-C or a signal 130 (``main`` makes
    a signal's 128 + its number). Anything else is a bug, raised as it is."""
    errors = Console(stderr=True, highlight=False, soft_wrap=True)
    if isinstance(exc, _click.ClickException):
        return _usage_code(exc)
    if isinstance(exc, Interrupted):
        if speaks():
            saved = "" if exc.saved is None else f"; what was recorded: {exc.saved}"
            errors.print(escape(f"lrcheck: {exc}{saved}"))
        return exc.exit_code
    if isinstance(exc, (KeyboardInterrupt, typer.Abort)):  # Abort: click's word for Ctrl-C
        if speaks():
            stop = exc if isinstance(exc, KeyboardInterrupt) else exc.__cause__
            errors.print(f"lrcheck: {stop_words(stop or KeyboardInterrupt())}")
        return 130
    if isinstance(exc, LrcheckError):
        if speaks() or isinstance(exc, RunError):
            error_line(str(exc))
        return exc.exit_code
    raise exc


class Commands(typer.core.TyperGroup):
    """lrcheck's commands. Whatever ends one goes through ``exit_code``: its usage errors (a
    value that does not parse, an unknown flag, a missing or extra argument) are told as every
    other bad input is, in one line and exit 2, instead of click's usage block; Ctrl-C is told,
    not typer's silent 130. Help, with or without arguments, is unchanged."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        """``lrcheck suite merge …`` is the command ``suite-merge`` (a suite file named
        ``merge`` is ``./merge``)."""
        if args[:2] == ["suite", "merge"]:
            args = ["suite-merge", *args[2:]]
        return list(super().parse_args(ctx, args))

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except (LrcheckError, Interrupted, KeyboardInterrupt) as exc:
            raise typer.Exit(exit_code(exc)) from None

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             windows_expand_args: bool = True, **extra: object) -> object:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args,
                                **extra)
        except (_click.ClickException, typer.Abort) as exc:  # while the flags are read
            code = exit_code(exc)
        sys.exit(code if isinstance(code, int) else 0)


def stop_on_signals(under_torchrun: bool) -> list[int]:
    """SIGTERM and SIGHUP stop lrcheck as Ctrl-C does (``errors.Stopped``), so a CI runner that
    cancels a job, or a closed terminal, still stops every worker and saves what was recorded.
    Returns the list the signals that arrived are added to. A second one is ignored: lrcheck is
    already stopping. Not ``under_torchrun``, which stops its ranks with SIGTERM itself."""
    import signal

    arrived: list[int] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        for name in STOP_SIGNALS:
            signal.signal(getattr(signal, name), signal.SIG_IGN)
        arrived.append(signum)
        raise Stopped(signum)

    if not under_torchrun:
        for name in STOP_SIGNALS:
            if hasattr(signal, name):
                signal.signal(getattr(signal, name), stop)
    return arrived


def exit_status(code: str | int | None, arrived: list[int]) -> int:
    """The process's exit status for what ``SystemExit`` carried: None 0, a message 1 (printed),
    and 128 + the signal's number for a command stopped by SIGTERM or SIGHUP instead of Ctrl-C's
    130."""
    if code is None:
        return 0
    if not isinstance(code, int):  # what sys.exit("message") means
        print(code, file=sys.stderr)
        return 1
    if code == 130 and arrived:
        return 128 + arrived[0]
    return code
