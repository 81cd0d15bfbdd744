"""Which logged tag measures what (docs/logs.md, "Tags"): the one table of the tags the
frameworks and users' loops write, mapped to a ``Quantity``. A tag not here is unmapped: it is
listed, and shown as incomparable where only one run has it."""

from __future__ import annotations

import re

from lrcheck.logs.model import Quantity

# Tag -> quantity, in the order one is preferred where a log has several for one quantity.
TAGS: dict[str, Quantity] = {
    # The Transformers Trainer (trainer_state.json; TensorBoard with the train/ prefix).
    "learning_rate": Quantity.LR,
    "train/learning_rate": Quantity.LR,
    "loss": Quantity.LOSS,
    "train/loss": Quantity.LOSS,
    "grad_norm": Quantity.GRAD_NORM,
    "train/grad_norm": Quantity.GRAD_NORM,
    # Users' loops and Lightning's self.log names.
    "lr": Quantity.LR,
    "train/lr": Quantity.LR,
    "train_loss": Quantity.LOSS,
    "train_loss_step": Quantity.LOSS,
    "training_loss": Quantity.LOSS,
    "grad-norm": Quantity.GRAD_NORM,
    "gradient_norm": Quantity.GRAD_NORM,
    "train/gradient_norm": Quantity.GRAD_NORM,
    "samples": Quantity.SAMPLES,
    "samples_seen": Quantity.SAMPLES,
    "train/samples": Quantity.SAMPLES,
    "train/samples_seen": Quantity.SAMPLES,
    "num_samples_seen": Quantity.SAMPLES,
}

# Lightning's LearningRateMonitor: ``lr-<Optimizer>``, ``lr-<Optimizer>/pg<N>`` for param group
# N (from 1) of an optimizer with several, ``lr-<Optimizer>-<M>`` for the M-th optimizer of
# one class (from 1: a second optimizer, not compared).
MONITOR = re.compile(r"^lr-(?P<optimizer>[A-Za-z_][A-Za-z0-9_.]*?)(?:-(?P<nth>\d+))?"
                     r"(?:/pg(?P<group>\d+))?$")

# Tags that look like a quantity and are not: what a reader would map by mistake.
NOT = {
    "train/train_loss": "the Trainer's mean loss over the whole run, written once at the end",
    "train_loss_epoch": "Lightning's mean over an epoch",
    "train/num_input_tokens_seen": "tokens, not samples",
    "num_input_tokens_seen": "tokens, not samples",
}


def quantity(tag: str) -> tuple[Quantity, int] | None:
    """What ``tag`` measures and, for an LR, its param group (0 for the first); None where
    it maps to none."""
    if tag in NOT:
        return None
    if tag in TAGS:
        return TAGS[tag], 0
    found = MONITOR.match(tag)
    if found is None or found["nth"] is not None:
        return None
    return Quantity.LR, int(found["group"] or 1) - 1


def preference(tag: str) -> int:
    """Where ``tag`` stands in ``TAGS``'s order (a monitor's tag after them all)."""
    order = list(TAGS)
    return order.index(tag) if tag in TAGS else len(order)
