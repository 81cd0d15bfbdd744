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
