"""Scheduler-stepping policies (DESIGN.md, "Policies"), as data.

A policy answers two questions: in what unit the schedule's length is given (optimizer updates,
micro-batches, or optimizer updates times ``world``), and whether ``scheduler.step()`` runs after
every micro-batch or only after each optimizer step. ``extra`` names the optional dependency (an
extra of the ``lrcheck`` package) that a policy runs through, if any.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from lrcheck.errors import SpecError


@dataclass(frozen=True)
class Policy:
    name: str
    steps_every_micro_batch: bool
    lengths_in_micro_batches: bool
    description: str
    who: str
    lengths_times_world: bool = False
    extra: str | None = None


_POLICIES = [
    Policy("per-update", False, False,
           "schedule in optimizer updates; scheduler.step() after each optimizer step",
           "Transformers Trainer, Lightning, DeepSpeed, torchtune, timm"),
    Policy("per-micro-batch", True, False,
           "schedule in optimizer updates; scheduler.step() after every micro-batch (the bug)",
           "hand-written loops; Accelerate before its fix"),
    Policy("per-micro-batch-scaled", True, True,
           "schedule in micro-batches (lengths x accum); scheduler.step() after every micro-batch",
           "Ludwig after its fix"),
    # Accelerate's AcceleratedScheduler leaves the LR alone on micro-batches that do not sync,
    # and steps it once per process on each optimizer step (split_batches=False): the schedule
    # is sized from the unprepared single-process dataloader (accelerate #1382), whose updates
    # are this run's updates times world.
    Policy("accelerate", False, False,
           "trained through HF Accelerate (prepare, accumulate, backward); schedule in updates of "
           "the single-process loader (updates x world); AcceleratedScheduler decides the steps",
           "HF Accelerate, run for real", lengths_times_world=True, extra="accelerate"),
]

POLICIES: dict[str, Policy] = {p.name: p for p in _POLICIES}


def require_extra(policy: str) -> dict[str, str]:
    """``{extra: version}`` of the optional dependency ``policy`` runs through (``{}`` when it
    needs none); a ``SpecError`` naming the install command when it is not installed."""
    extra = POLICIES[policy].extra
    if extra is None:
        return {}
    try:
        module = importlib.import_module(extra)
    except ImportError:
        raise SpecError(f"--policy {policy} trains through {extra}, which is not installed; "
                        f"install it with: pip install 'lrcheck[{extra}]'") from None
    return {extra: str(module.__version__)}
