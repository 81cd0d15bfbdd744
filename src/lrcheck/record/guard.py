"""The one guard around every hook body the recorder installs in a user's process (the
optimizer's step hooks, the counted calls, the scheduler's and the GradScaler's wraps, the
lockstep exchange): an error there must never reach the user's training.

A ``Guard`` runs a body; the first exception (``Exception``: Ctrl-C and ``SystemExit`` pass)
switches what it guards off for the rest of the process, with the reason, through the
``switch_off`` it was armed with (``record.process``: the process's description says it, where
the verdict reads it; ``record.lockstep``: the lockstep file and the exchange say it), and prints
one warning line. Once off, every body it guards is skipped: the training goes on unrecorded
(or free of lockstep), never half-recorded. Only the body is guarded: a wrapper calls the user's
own function outside the guard, so that the user's own errors reach the user unchanged."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


def reason(where: str, exc: BaseException) -> str:
    """``exc`` in one line, naming the hook it came from."""
    text = str(exc).strip().splitlines()
    return f"{where} raised {type(exc).__name__}" + (f": {text[0]}" if text else "")


class Guard:
    """What switches off together (``what``: "recording", "lockstep") and why (``off``: None
    while on)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.off: str | None = None
        self._switch_off: Callable[[str], None] | None = None

    def arm(self, switch_off: Callable[[str], None] | None = None) -> None:
        """On again (a new recording in this process), ``switch_off(reason)`` called once when
        a body fails."""
        self.off, self._switch_off = None, switch_off

    def trip(self, why: str) -> None:
        """Off, with ``why``; the first reason is kept."""
        if self.off is not None:
            return
        self.off = why
        print(f"lrcheck: warning: {self.what} is off in process {os.getpid()} (the training "
              f"goes on): {why}", file=sys.stderr)
        if self._switch_off is not None:
            try:
                self._switch_off(why)
            except Exception:  # noqa: BLE001 - saying why must not break the training either
                pass

    def __call__(self, where: str, body: Callable[P, R]) -> Callable[P, R | None]:
        """``body`` guarded: it runs while the guard is on, and an exception it raises trips the
        guard (the call returns None)."""
        @functools.wraps(body)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R | None:
            if self.off is not None:
                return None
            try:
                return body(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - the user's training goes on
                self.trip(reason(where, exc))
                return None

        return guarded

    def anyway(self, where: str, body: Callable[[], object]) -> None:
        """``body`` run even where the guard is off (closing files at the process's exit); an
        exception it raises trips the guard."""
        try:
            body()
        except Exception as exc:  # noqa: BLE001 - the user's program ends as it would have
            self.trip(reason(where, exc))


# One recording per process: the guard of its hooks, armed by ``record.process.install_hooks``.
RECORDING = Guard("recording")
