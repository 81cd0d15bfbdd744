"""Runs both sides of a pair in this process and returns their traces."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lrcheck.errors import LrcheckError, RunError
from lrcheck.experiments.tasks import TASKS
from lrcheck.runner.policies import require_extra
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

    if spec.policy == "accelerate":
        from lrcheck.runner.accelerated import train
    else:
        from lrcheck.runner.loop import train
    device = resolve_device(spec.device)
    data = TASKS[spec.task].load(spec.seed, spec.samples)
    on_update = (lambda done, total: progress(role, done, total)) if progress else None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trace = train(spec, data, device=device, on_update=on_update)
    except LrcheckError:
        raise
    except Exception as exc:
        raise RunError(f"the {role} run crashed: {type(exc).__name__}: {exc}") from exc
    # torch's own warnings (such as "scheduler.step() before optimizer.step()") are findings
    # about the run: keep them in the report instead of printing them.
    trace.extra["warnings"] = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    return trace


def run_pair(pair: PairSpec, progress: Progress | None = None) -> PairTraces:
    """The reference, then the candidate, each from scratch."""
    from lrcheck.runner.device import resolve_device
    from lrcheck.runner.loop import environment

    if pair.candidate.world > 1 or pair.reference.world > 1:
        raise RunError("multi-process runs need torchrun, which this build does not launch yet")
    device = resolve_device(pair.candidate.device)
    frameworks = require_extra(pair.candidate.policy)  # a missing extra is bad input: say so now
    reference = run_one(pair.reference, "reference", progress)
    candidate = run_one(pair.candidate, "candidate", progress)
    return PairTraces(reference, candidate,
                      {**environment(device, pair.candidate.world), **frameworks})
