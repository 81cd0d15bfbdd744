"""The one guard around every hook body the recorder installs in a user's process (the
optimizer's step hooks, the counted calls, the scheduler's and the GradScaler's wraps, the
lockstep exchange, the listeners of every module call, the taps of the losses and of TRL's
fused LM head): an error there must never reach the user's training.

A ``Guard`` runs a body; the first exception (``Exception``: Ctrl-C and ``SystemExit`` pass)
switches what it guards off for the rest of the process, with the reason, through the
``switch_off`` it was armed with (``record.process``: the process's description says it, where
the verdict reads it; ``record.lockstep``: the lockstep file and the exchange say it), and prints
one warning line. Once off, every body it guards is skipped: the training goes on unrecorded
(or free of lockstep), never half-recorded. Only the body is guarded: a wrapper calls the user's
own function outside the guard, so that the user's own errors reach the user unchanged.

``MODULE_CALLS`` is the one wrapper of ``torch.nn.Module.__call__``: its listeners
(``record.taps``: the samples each training forward fed; ``record.precision``: the census of the
first forward's types) each run before and after every module call inside their own guard, so
that an error in one switches that listener off with the reason, and the user's forward runs
whatever happens."""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections.abc import Callable
from typing import ParamSpec, Protocol, TypeVar

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
            return self.run(where, body, *args, **kwargs)

        return guarded

    def run(self, where: str, body: Callable[P, R], *args: P.args, **kwargs: P.kwargs
            ) -> R | None:
        """``body(*args, **kwargs)`` while the guard is on (None once it is off); an exception
        it raises trips the guard (None)."""
        if self.off is not None:
            return None
        try:
            return body(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the user's training goes on
            self.trip(reason(where, exc))
            return None

    def anyway(self, where: str, body: Callable[[], object]) -> None:
        """``body`` run even where the guard is off (closing files at the process's exit); an
        exception it raises trips the guard."""
        try:
            body()
        except Exception as exc:  # noqa: BLE001 - the user's program ends as it would have
            self.trip(reason(where, exc))


# One recording per process: the guard of its hooks, armed by ``record.process.install_hooks``.
RECORDING = Guard("recording")


class Listener(Protocol):
    """What hears every module call (``ModuleCalls``), inside its ``guard`` (``where``: the
    reason's name for it): ``before`` the call, with the module, its arguments and its depth (0:
    the outermost call), whose result ``after`` gets once the call returned ``out`` or raised
    (``raised``)."""

    guard: Guard
    where: str

    def before(self, module: object, args: tuple[object, ...], kwargs: dict[str, object],
               depth: int) -> object: ...

    def after(self, state: object, out: object, raised: bool) -> None: ...


class ModuleCalls:
    """The one wrapper of ``torch.nn.Module.__call__``, installed while it has listeners: each
    listener's ``before`` runs in the order they were added, the last added first (as a wrapper
    added later would wrap the earlier ones), then the call, then each ``after`` in the
    opposite order; each inside the listener's guard. A call made while ``torch.compile``
    traces is not heard."""

    def __init__(self) -> None:
        self.listeners: list[Listener] = []
        self._original: Callable[..., object] | None = None
        self._wrapper: Callable[..., object] | None = None
        self._local = threading.local()

    def listen(self, listener: Listener) -> Callable[[], None]:
        """``listener`` hears every module call from now on; returns its removal."""
        if self._original is None:
            self._install()
        self.listeners.append(listener)
        return functools.partial(self.remove, listener)

    def remove(self, listener: Listener) -> None:
        """``listener`` hears no more calls; torch's own ``__call__`` is back once none does
        (where nothing wrapped it after this wrapper)."""
        if listener in self.listeners:
            self.listeners.remove(listener)
        if self.listeners or self._original is None:
            return
        import torch

        if torch.nn.Module.__call__ is self._wrapper:
            torch.nn.Module.__call__ = self._original  # type: ignore[method-assign]
            self._original = self._wrapper = None

    def _install(self) -> None:
        import torch

        original = torch.nn.Module.__call__
        compiling = torch.compiler.is_compiling

        @functools.wraps(original)
        def call(module: torch.nn.Module, *args: object, **kwargs: object) -> object:
            if not self.listeners or compiling():
                return original(module, *args, **kwargs)
            return self._heard(original, module, args, kwargs)

        self._original, self._wrapper = original, call
        torch.nn.Module.__call__ = call  # type: ignore[method-assign]

    def _heard(self, original: Callable[..., object], module: object,
               args: tuple[object, ...], kwargs: dict[str, object]) -> object:
        depth = getattr(self._local, "depth", 0)
        heard = [(listener, listener.guard.run(listener.where, listener.before, module, args,
                                               kwargs, depth))
                 for listener in reversed(self.listeners)]
        self._local.depth = depth + 1
        out: object = None
        raised = True
        try:
            out = original(module, *args, **kwargs)
            raised = False
        finally:
            self._local.depth = depth
            for listener, state in reversed(heard):
                listener.guard.run(listener.where, listener.after, state, out, raised)
        return out


# This process's one wrapper of ``torch.nn.Module.__call__``.
MODULE_CALLS = ModuleCalls()
