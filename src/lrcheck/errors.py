"""The errors lrcheck raises; each carries the exit code the CLI turns it into (DESIGN.md)."""

from __future__ import annotations


class LrcheckError(Exception):
    """Base class. ``exit_code`` is what the command line exits with."""

    exit_code = 1


class SpecError(LrcheckError):
    """Bad input: a flag, a file, a spec. The message names the bad value and the fix."""

    exit_code = 2


class RunError(LrcheckError):
    """A run crashed, hung past its timeout, or a worker died."""

    exit_code = 3


class Interrupted(LrcheckError):
    """Ctrl-C stopped a comparison. ``result`` (a ``lrcheck.result.IncompleteResult``) holds what
    the runs had recorded."""

    exit_code = 130

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result


class Stopped(KeyboardInterrupt):
    """A signal asked lrcheck to stop (SIGTERM, SIGHUP). It is handled as Ctrl-C is — every
    worker stopped, what was recorded saved with verdict "incomplete" — and the command exits
    with 128 + the signal's number, as a shell reports a process that signal ended (143 for
    SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stop_words(exc: BaseException) -> str:
    """How a stop is told: "interrupted (Ctrl-C)" or "terminated (SIGTERM)"."""
    if isinstance(exc, Stopped):
        import signal

        return f"terminated ({signal.Signals(exc.signum).name})"
    return "interrupted (Ctrl-C)"
