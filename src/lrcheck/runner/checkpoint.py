"""Checkpoints for ``--resume-at`` / ``--resume-at-micro``: what a real training script saves
(model, optimizer, scheduler and GradScaler ``state_dict``s, the RNG states, the data position)
plus, when the run stops inside an accumulation window, the gradients and loss gathered so far
in it. Loading goes into parts built again from scratch, so whatever a ``state_dict`` does not
capture (a schedule kept in a closure, say) is lost, as it would be in a real resume."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from lrcheck.runner.loop import Parts, Window, _Run


def save(folder: Path, parts: Parts, run: _Run, window: Window) -> Path:
    """Write the checkpoint of ``run`` paused at ``window`` into ``folder``; its path."""
    state: dict[str, Any] = {
        "model": parts.net.state_dict(),
        "optimizer": parts.optimizer.state_dict(),
        "scheduler": parts.scheduler.state_dict(),
        "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
        "rng": {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
        "position": {"update": window.update, "micro": window.micro},
        "counters": {"samples_seen": run.samples_seen, "scheduler_steps": run.scheduler_steps},
        "window": {"grads": [None if p.grad is None else p.grad.detach().clone()
                             for p in parts.net.parameters()],
                   "loss_sum": window.loss_sum.detach().clone(),
                   "steps_before": window.steps_before}
                  if window.loss_sum is not None else None,  # paused inside a window
    }
    path = folder / f"checkpoint-rank{run.rank}.pt"
    torch.save(state, path)
    return path


def load(path: Path, parts: Parts, run: _Run) -> Window:
    """Load the checkpoint at ``path`` into freshly built ``parts`` and ``run``'s counters; the
    window to resume from."""
    from lrcheck.runner.loop import Window

    state = torch.load(path, map_location=run.device, weights_only=False)
    parts.net.load_state_dict(state["model"])
    parts.optimizer.load_state_dict(state["optimizer"])
    parts.scheduler.load_state_dict(state["scheduler"])
    if parts.scaler is not None and state["scaler"] is not None:
        parts.scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["torch"])
    if state["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    run.samples_seen = state["counters"]["samples_seen"]
    run.scheduler_steps = state["counters"]["scheduler_steps"]
    position = state["position"]
    saved = state["window"]
    if saved is None:
        return Window(position["update"], 0, None, run.scheduler_steps)
    for param, grad in zip(parts.net.parameters(), saved["grads"], strict=True):
        param.grad = grad
    return Window(position["update"], position["micro"], saved["loss_sum"],
                  saved["steps_before"])
