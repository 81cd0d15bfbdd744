"""Python's cyclic garbage collector, held off while a command starts.

A command that trains imports torch, scikit-learn and torch._dynamo (which the first optimizer
imports): some 350,000 objects, nearly all of which live as long as the process. While they are
being created, the collector's full pass ran six times over all of them (0.5 s of a 9 s suite on
a 2-CPU machine, read from ``gc.callbacks``), and every later full pass scans them all again.

``hold()``, at the start of a command (``cli.main``, a torchrun rank's ``worker.main``), turns
the collector off. ``release()``, once a run is built (``Recording.attach``: every loop attaches
its model, so everything it needs is imported), when a command is about to wait on other
processes (a torchrun launch) and after each pair of a suite (one whose runs failed before they
were built included), collects once (the cycles starting made: some 16 MB that freezing would
keep for good), moves every object still alive into the permanent generation, which later
passes skip (``gc.freeze``), and turns the collector on again. The suite of ``make bench`` took
0.4–0.5 s less (BENCHMARKS.md). A command that never trains or launches (``diff``, ``list``,
``--help``) imports little and ends without it.
"""

from __future__ import annotations

import gc

_held = False


def hold() -> None:
    """Turn the collector off until ``release()`` (nothing when it was already off)."""
    global _held
    if gc.isenabled():
        gc.disable()
        _held = True


def release() -> None:
    """If ``hold()`` turned the collector off: collect, freeze what is alive, turn it on."""
    global _held
    if _held:
        _held = False
        gc.collect()
        gc.freeze()
        gc.enable()
