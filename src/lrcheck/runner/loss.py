"""The loss of a micro-batch, normalised so that the gradient of an update is the mean over the
whole effective batch, whatever ``bs``, ``accum`` and ``world`` are (docs/design.md, "Why
exact equality is possible, and how data flows"). Every loop uses it, lrcheck's own and the
frameworks' alike."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from lrcheck.experiments.tasks import IGNORE_INDEX
from lrcheck.spec import RunSpec


def item_losses(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, *,
                float_logits: bool = False) -> torch.Tensor:
    """Cross-entropy per loss item: per sample, or per token (padding positions give 0);
    ``float_logits``: from the logits in float32 (a bfloat16 model's)."""
    logits = model(x)
    if float_logits:
        logits = logits.float()
    if logits.ndim > 2:  # tokens: one item per position (a view per micro-batch costs ~5 µs)
        logits, y = logits.reshape(-1, logits.shape[-1]), y.reshape(-1)
    return F.cross_entropy(logits, y, reduction="none", ignore_index=IGNORE_INDEX)


def micro_batch_loss(per_item: torch.Tensor, n_local: Callable[[], torch.Tensor],
                     spec: RunSpec, n_global: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss to backpropagate for one micro-batch of this rank, and its (detached) share of
    the update's training loss (summed over micro-batches, then over ranks). ``n_local()`` and
    ``n_global``: loss items (samples or tokens) in this rank's micro-batch and in the whole
    effective batch; ``n_local`` is called only by ``--loss-norm mean`` (counting is two tensor
    operations on every micro-batch)."""
    if spec.loss_norm == "global":
        # Sum over the micro-batch, divided by the items of the global batch: the gradient is
        # then the mean over the whole effective batch. x world undoes DDP's average. The sum
        # is taken once; the share is its value, detached.
        total = per_item.sum()
        return total * (spec.world / n_global), total.detach() / n_global
    # The common per-micro-batch mean divided by accum.
    loss = per_item.sum() / n_local().clamp(min=1) / spec.accum
    return loss, loss.detach() / spec.world
