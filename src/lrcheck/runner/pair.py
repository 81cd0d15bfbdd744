"""Runs both sides of a pair in this process and returns their traces."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lrcheck.errors import LrcheckError, RunError
from lrcheck.experiments.tasks import TASKS
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.trace import RunTrace

Progress = Callable[[str, int, int], None]


@dataclass
class PairTraces:
    reference: RunTrace
    candidate: RunTrace
    environment: dict[str, Any]


def run_one(spec: RunSpec, role: str, progress: Progress | None = None) -> RunTrace:
    """Train ``spec`` (world 1) in this process. A crash inside training is a ``RunError``."""
    from lrcheck.runner.device import resolve_device
    from lrcheck.runner.loop import train

    device = resolve_device(spec.device)
    data = TASKS[spec.task].load(spec.seed, spec.samples)
    on_update = (lambda done, total: progress(role, done, total)) if progress else None
    return guarded(f"the {role} run",
                   lambda: train(spec, data, device=device, on_update=on_update))


def guarded(what: str, run: Callable[[], RunTrace]) -> RunTrace:
    """``run()`` with its warnings kept in the trace; a crash becomes a ``RunError`` naming
    ``what``."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = run()
    except LrcheckError:
        raise
    except Exception as exc:
        raise RunError(f"{what} crashed: {type(exc).__name__}: {exc}") from exc
    # torch's own warnings (such as "scheduler.step() before optimizer.step()") are findings
    # about the run: keep them in the report instead of printing them.
    trace.extra["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    return trace


def run_pair(pair: PairSpec, progress: Progress | None = None,
             cache: dict[RunSpec, RunTrace] | None = None) -> PairTraces:
    """The reference, then the candidate, each from scratch. With ``cache``, a reference
    already trained (the same frozen ``RunSpec``) is taken from it and a new one is added."""
    from lrcheck.runner.device import resolve_device
    from lrcheck.runner.loop import environment

    if pair.candidate.world > 1 or pair.reference.world > 1:
        raise RunError("multi-process runs need torchrun, which this build does not launch yet")
    device = resolve_device(pair.candidate.device)
    reference = cache.get(pair.reference) if cache is not None else None
    if reference is None:
        reference = run_one(pair.reference, "reference", progress)
        if cache is not None:
            cache[pair.reference] = reference
    candidate = run_one(pair.candidate, "candidate", progress)
    return PairTraces(reference, candidate, environment(device, pair.candidate.world))
