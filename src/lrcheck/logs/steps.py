"""What a logged step means (docs/logs.md, "What a step means"): the conventions a user
states (``--log-steps``, ``stated_steps``), the one inferred from the steps themselves where
the writer does not say (``from_steps``), and the candidates a recording chooses among
(``candidates``, for ``logs.truth``)."""

from __future__ import annotations

from collections.abc import Sequence

from lrcheck.errors import SpecError
from lrcheck.logs.model import StepMeaning, StepUnit

# The conventions a user can state: updates from 0 or 1, micro-batches or samples
# (``micro-batches:4``: 4 per update; without a count, the recording says it).
CONVENTIONS = ("updates-from-0", "updates-from-1", "micro-batches[:N]", "samples[:N]")
WORDS = {0: "updates from 0 (a loop's add_scalar(tag, value, k))",
         1: "updates from 1 (a global_step read after the update, as the Trainer's)"}


def updates_from(first: int, how: str) -> StepMeaning:
    """Steps that count updates from ``first``, ``how`` the sentence's start ("stated")."""
    return StepMeaning(StepUnit.UPDATE, first, 1, f"{how}: steps count {WORDS[first]}")


def micro_batches(per_update: int, first: int, how: str) -> StepMeaning:
    """Steps that count micro-batches from ``first``, ``per_update`` each (0: not known)."""
    each = f", {per_update} per update" if per_update else ""
    return StepMeaning(StepUnit.MICRO_BATCH, first, per_update,
                       f"{how}: steps count micro-batches from {first}{each}")


def samples(per_update: int, how: str) -> StepMeaning:
    """Steps that count the samples seen after each update, ``per_update`` each."""
    each = f", {per_update} per update" if per_update else ""
    return StepMeaning(StepUnit.SAMPLE, per_update, per_update,
                       f"{how}: steps count the samples seen after each update{each}")


def stated_steps(text: str) -> StepMeaning:
    """The convention ``text`` states (one of ``CONVENTIONS``); another is a ``SpecError``."""
    name, _, count = text.strip().partition(":")
    if name in ("updates-from-0", "updates-from-1") and not count:
        return updates_from(int(name[-1]), "stated")
    if name in ("micro-batches", "samples") and (not count or count.isdigit() and int(count)):
        per = int(count or 0)
        return micro_batches(per, 0, "stated") if name == "micro-batches" else \
            samples(per, "stated")
    raise SpecError(f"log steps {text!r}: one of {', '.join(CONVENTIONS)} (N: how many per "
                    "update; without it the recording says)")


def counted(meaning: StepMeaning, what: str) -> StepMeaning:
    """``meaning``, where it counts micro-batches or samples, with their number per update
    known: without a recording, a count not stated is a ``SpecError`` about ``what``."""
    if meaning.per_update:
        return meaning
    unit = "micro-batches" if meaning.unit is StepUnit.MICRO_BATCH else "samples"
    raise SpecError(f"{what}: steps stated to count {unit}, but not how many per update: give "
                    f"it ({unit}:N, for example {unit}:4); only a recording can tell it")


def from_steps(steps: Sequence[int], every: int | None) -> StepMeaning | None:
    """The convention the steps themselves show, where the writer does not say it: a first
    step of 0 counts updates from 0; a first step equal to the logging interval, every step
    a multiple of it, counts them from 1 (a step read after the update: the first logged at
    1, or at N every N). None: the steps show neither."""
    if not steps:
        return None
    first, step = min(steps), every or 1
    if first == 0:
        return updates_from(0, "inferred from the steps (the first logged is step 0)")
    if first == step and all(s % step == 0 for s in steps):
        interval = f", each a multiple of its interval {step}" if step > 1 else ""
        return updates_from(1, f"inferred from the steps (the first logged is step {first}"
                               f"{interval}, none at 0)")
    return None


def candidates(detected: StepMeaning, accum: int | None, per_sample: int | None
               ) -> list[StepMeaning]:
    """The conventions a recording chooses among, ``detected`` (what the log said, or was
    stated) first: updates from 0 or 1, micro-batches (``accum`` per update) from 0 or 1,
    samples (``per_sample`` per update)."""
    how = "found from the recording"
    found = [detected, updates_from(0, how), updates_from(1, how)]
    if accum is not None and accum > 1:
        found += [micro_batches(accum, 0, how), micro_batches(accum, 1, how)]
    if per_sample:
        found.append(samples(per_sample, how))
    return found
