"""The loss of a micro-batch, normalised so that the gradient of an update is the mean over the
whole effective batch, whatever ``bs``, ``accum`` and ``world`` are (DESIGN.md, "how data
flows"). Every loop uses it, lrcheck's own and the frameworks' alike."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lrcheck.experiments.tasks import IGNORE_INDEX
from lrcheck.spec import RunSpec


def item_losses(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy per loss item: per sample, or per token (padding positions give 0)."""
    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                           reduction="none", ignore_index=IGNORE_INDEX)


def micro_batch_loss(per_item: torch.Tensor, n_local: torch.Tensor, spec: RunSpec,
                     n_global: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss to backpropagate for one micro-batch of this rank, and its (detached) share of
    the update's training loss (summed over micro-batches, then over ranks). ``n_local`` and
    ``n_global``: loss items (samples or tokens) in this rank's micro-batch and in the whole
    effective batch."""
    if spec.loss_norm == "global":
        # Sum over the micro-batch, divided by the items of the global batch: the gradient is
        # then the mean over the whole effective batch. x world undoes DDP's average.
        return per_item.sum() * (spec.world / n_global), per_item.detach().sum() / n_global
    # The common per-micro-batch mean divided by accum.
    loss = per_item.sum() / n_local.clamp(min=1) / spec.accum
    return loss, loss.detach() / spec.world
