"""Checkpoints for ``--resume-at`` / ``--resume-at-micro``: what a real training script saves
(model, optimizer, scheduler and GradScaler ``state_dict``s, the RNG states, the data position)
plus, when the run stops inside an accumulation window, the gradients and loss gathered so far
in it. Loading goes into parts built again from scratch, so whatever a ``state_dict`` does not
capture (a schedule kept in a closure, say) is lost, as it would be in a real resume.

The loop's own position is an explicit ``LoopPosition``, which the loop owns and a checkpoint saves
and gives back."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from lrcheck.errors import SpecError
from lrcheck.plan.order import global_batches, micro_batches
from lrcheck.plan.steps import StepPlan
from lrcheck.runner.build import Parts
from lrcheck.spec import RunSpec
from lrcheck.words import plural


@dataclass
class OpenWindow:
    """What the update in progress has gathered: its first ``micro`` micro-batches of this rank
    (their gradients are in the parameters' ``.grad``), their share of the update's loss, and the
    ``scheduler.step()`` calls made before the update began."""

    micro: int
    loss_sum: torch.Tensor
    steps_before: int


@dataclass
class LoopPosition:
    """Where lrcheck's own loop stands: the update in progress (or the next one), the samples
    seen and ``scheduler.step()`` calls made so far, and the window in progress (None between
    updates)."""

    update: int = 0
    samples_seen: int = 0
    scheduler_steps: int = 0
    window: OpenWindow | None = None

    @property
    def micro_done(self) -> int:
        """Micro-batches of update ``update`` already trained."""
        return 0 if self.window is None else self.window.micro


@dataclass(frozen=True)
class Pause:
    """Where a run stops for its checkpoint: after micro-batch ``micro`` of update ``update``
    (counted from 0 within the update), or after the whole update when ``micro`` is None."""

    update: int
    micro: int | None = None


def resume_point(spec: RunSpec, plan: StepPlan) -> Pause | None:
    """Where ``--resume-at K`` (after update K) or ``--resume-at-micro M`` (after micro-batch M
    of this rank, counted over the run) stops the run."""
    if spec.resume_at is not None:
        if spec.resume_at >= plan.total_updates - 1:
            raise SpecError(f"--resume-at {spec.resume_at}: the run has "
                            f"{plural(plan.total_updates, 'update')}; resume after one of "
                            f"0..{plan.total_updates - 2}")
        return Pause(spec.resume_at)
    if spec.resume_at_micro is not None:
        done = 0
        for batch in global_batches(plan.num_samples, plan.effective_batch, spec.epochs,
                                    spec.seed, spec.tail):
            count = len(micro_batches(batch.indices, spec.bs, spec.world))
            if spec.resume_at_micro < done + count:
                m = spec.resume_at_micro - done
                last = m == count - 1
                if last and batch.update >= plan.total_updates - 1:
                    break
                return Pause(batch.update, None if last else m)
            done += count
        raise SpecError(f"--resume-at-micro {spec.resume_at_micro}: the run has "
                        f"{plural(plan.total_micro_batches, 'micro-batch', 'micro-batches')}; "
                        f"resume after one of 0..{plan.total_micro_batches - 2}")
    return None


def save(folder: Path, parts: Parts, progress: LoopPosition, rank: int) -> Path:
    """Write the checkpoint of rank ``rank``'s ``parts`` at ``progress`` into ``folder``; its
    path."""
    window = progress.window
    state: dict[str, object] = {
        "model": parts.net.state_dict(),
        "optimizer": parts.optimizer.state_dict(),
        "scheduler": parts.scheduler.state_dict(),
        "scaler": parts.scaler.state_dict() if parts.scaler is not None else None,
        "rng": {"torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
        "position": {"update": progress.update, "micro": progress.micro_done},
        "counters": {"samples_seen": progress.samples_seen,
                     "scheduler_steps": progress.scheduler_steps},
        "window": {"grads": [None if p.grad is None else p.grad.detach().clone()
                             for p in parts.net.parameters()],
                   "loss_sum": window.loss_sum.detach().clone(),
                   "steps_before": window.steps_before} if window is not None else None,
    }
    path = folder / f"checkpoint-rank{rank}.pt"
    torch.save(state, path)
    return path


def load(path: Path, parts: Parts, device: str) -> LoopPosition:
    """Load the checkpoint at ``path`` into freshly built ``parts``; the progress to go on
    from."""
    state = torch.load(path, map_location=device, weights_only=False)
    parts.net.load_state_dict(state["model"])
    parts.optimizer.load_state_dict(state["optimizer"])
    parts.scheduler.load_state_dict(state["scheduler"])
    if parts.scaler is not None and state["scaler"] is not None:
        parts.scaler.load_state_dict(state["scaler"])
    torch.set_rng_state(state["rng"]["torch"])
    if state["rng"]["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["rng"]["cuda"])
    position, counters, saved = state["position"], state["counters"], state["window"]
    progress = LoopPosition(position["update"], counters["samples_seen"],
                            counters["scheduler_steps"])
    if saved is not None:
        for param, grad in zip(parts.net.parameters(), saved["grads"], strict=True):
            param.grad = grad
        progress.window = OpenWindow(position["micro"], saved["loss_sum"], saved["steps_before"])
    return progress
