"""The errors lrcheck raises; each carries the exit code the CLI turns it into (docs/design.md,
"Exit codes")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pathlib import Path


class LrcheckError(Exception):
    """Base class. ``exit_code`` is what the command line exits with."""

    exit_code = 1


class SpecError(LrcheckError):
    """Bad input: a flag, a file, a spec. The message names the bad value and the fix."""

    exit_code = 2


class RunError(LrcheckError):
    """A run crashed, hung past its timeout, or a worker died."""

    exit_code = 3


class Recorded(Protocol):
    """What a command had recorded, as ``result.json`` holds it (``result.Report``, or the
    ``result.IncompleteResult`` an ``Interrupted`` carries). Stated here, not imported, so that
    this module imports none of lrcheck's."""

    def to_dict(self) -> dict[str, object]: ...


class Interrupted(Exception):
    """Ctrl-C (or SIGTERM, SIGHUP: ``Stopped``) stopped a comparison or a trace. ``result`` holds
    what the runs had recorded (a ``result.IncompleteResult``); ``saved``, where it was written
    (None until it is: see ``saved_in``).

    Not an ``LrcheckError``: being stopped is not the pair's failure, and code that handles
    lrcheck's errors (a suite recording a pair that crashed, say) must let it through."""

    exit_code = 130

    def __init__(self, message: str, result: Recorded, saved: Path | None = None,
                 how: str = "interrupted (Ctrl-C)") -> None:
        super().__init__(message)
        self.result = result
        self.saved = saved
        self.how = how  # stop_words of what stopped it

    def saved_in(self, path: Path) -> Interrupted:
        """The same stop, once what was recorded has been written to ``path``."""
        return Interrupted(str(self), self.result, path, self.how)


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
