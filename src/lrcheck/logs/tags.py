"""Which logged tag measures what (docs/logs.md, "Tags"): the one table of the tags the
frameworks and users' loops write, mapped to a ``Quantity``. A tag not here is unmapped: it is
listed, and shown as incomparable where only one run has it."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from lrcheck.errors import SpecError
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
    # The PyTorch TensorBoard tutorial's and other loops' names, matched without regard to
    # case or to "-", "_" and " " (``normal``): ``Loss/train``, ``LearningRate``, ``LR``.
    "loss/train": Quantity.LOSS,
    "training/loss": Quantity.LOSS,
    "loss/training": Quantity.LOSS,
    "train/train_loss_step": Quantity.LOSS,
    "learningrate": Quantity.LR,
    "learning_rate/train": Quantity.LR,
    "lr/train": Quantity.LR,
    "train/learningrate": Quantity.LR,
    "optim/lr": Quantity.LR,
    "optimizer/lr": Quantity.LR,
    "grad_norm/train": Quantity.GRAD_NORM,
    "train/gradnorm": Quantity.GRAD_NORM,
    "gradnorm": Quantity.GRAD_NORM,
    "train/global_samples": Quantity.SAMPLES,
}
# The names of the quantities a user maps a tag to (``--tag lr=LearningRate``).
KEYS = {q.value: q for q in Quantity}

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


def normal(tag: str) -> str:
    """``tag`` as ``TAGS`` is matched: lower case, "-" and " " as "_"."""
    return tag.strip().lower().replace("-", "_").replace(" ", "_")


def quantity(tag: str) -> tuple[Quantity, int] | None:
    """What ``tag`` measures and, for an LR, its param group (0 for the first); None where
    it maps to none."""
    if tag in NOT or normal(tag) in NOT:
        return None
    for name in (tag, normal(tag)):
        if name in TAGS:
            return TAGS[name], 0
    found = MONITOR.match(tag)
    if found is None or found["nth"] is not None:
        return None
    return Quantity.LR, int(found["group"] or 1) - 1


ORDER = {tag: n for n, tag in enumerate(TAGS)}


def preference(tag: str) -> int:
    """Where ``tag`` stands in ``TAGS``'s order (as written before as matched; a monitor's
    tag after them all)."""
    return ORDER.get(tag, ORDER.get(normal(tag), len(ORDER)))


def parse_tags(given: Sequence[str] | Mapping[str, str] | None) -> dict[Quantity, str]:
    """The tags a user maps (``["lr=LearningRate", "loss=Loss/train"]``, or a mapping
    ``{"lr": "LearningRate"}``) by quantity; a key lrcheck does not know, or an item without
    ``=``, is a ``SpecError`` naming it."""
    items = list(given.items()) if isinstance(given, Mapping) else [
        tuple(item.split("=", 1)) if "=" in item else (item, "") for item in given or ()]
    found: dict[Quantity, str] = {}
    for key, tag in items:
        if key.strip() not in KEYS or not str(tag).strip():
            raise SpecError(f"tag mapping {key}={tag!r}: give QUANTITY=TAG, QUANTITY one of "
                            f"{', '.join(KEYS)} (for example lr=LearningRate)")
        found[KEYS[key.strip()]] = str(tag).strip()
    return found
