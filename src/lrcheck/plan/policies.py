"""Scheduler-stepping policies (docs/design.md, "Policies"), as data.

A policy answers two questions: in what unit the schedule's length is given (optimizer updates,
or micro-batches), and whether ``scheduler.step()`` runs after
every micro-batch or only after each optimizer step. Policies apply to lrcheck's own loop
(``--framework plain``); a framework decides itself (``plan/frameworks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Policy:
    name: str
    steps_every_micro_batch: bool
    lengths_in_micro_batches: bool
    description: str
    who: str


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
]

POLICIES: dict[str, Policy] = {p.name: p for p in _POLICIES}

