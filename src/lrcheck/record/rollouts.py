"""GRPO's rollouts replayed into the candidate of a lockstep pair (``lrcheck run``), so that
the two runs update on the same rollouts whatever their world size. TRL's ``GRPOTrainer``
generates once per generation batch, each rank its own slice with its own RNG: a 2-process
candidate would sample other completions than a 1-process reference. Here, once TRL's GRPO
module is imported (looked at the Trainer's ``model.zero_grad()`` before its first update),
``GRPOTrainer._generate_and_score_completions`` is wrapped: the reference (one process) writes
each call's result (prompts, completions, masks, advantages, the window's token count, the
reference model's log-probs: all that the loss reads) into the exchange folder,
``rollout-{k}.pt``; each rank R of W of the candidate waits for call k's and returns its
R-th of W contiguous slices of the rows, in place of generating. Rewards and advantages are
the reference's, computed over the whole generation batch, as TRL computes them gathered
over the ranks. A reference on several processes writes none (its rows are spread over its
ranks: ``rollout-{k}.none`` says so). Where the reference wrote no rollout (it ended first, or
ran on several processes), or its rows do not divide into the candidate's (another generation
batch), the candidate generates its own and ``data`` says whether they differ. A one-process
candidate also takes the torch RNG's state as the reference's generation left it (``RNG``):
TRL shuffles the generation batch before splitting it into updates, so where one generation
serves several updates (``steps_per_generation`` above the accumulation) the rows each update
gets are the reference's. Each candidate
rank keeps its count of both in its record folder (``rollouts-rank{R}.json``, ``HELD``), for
the verdict to say what was held equal (``record.tokens.read_held``)."""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import torch

from lrcheck.record import exchange
from lrcheck.record.guard import RECORDING
from lrcheck.record.roles import CANDIDATE, ENV_DIR, ENV_EXCHANGE, ENV_ROLE, REFERENCE, ended
from lrcheck.record.tokens import HELD

GRPO = "trl.trainer.grpo_trainer"
# The key of the torch RNG's state, as the reference's generation left it, in a rollout file.
RNG = "lrcheck.rng_state"
_patched: list[bool] = []


def rank_and_world() -> tuple[int, int]:
    """This process's rank and the world size (torch.distributed's, else the launcher's)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def look() -> None:
    """Wrap TRL's GRPO generation (the module's docstring) once its module is imported, in a
    process of a lockstep pair."""
    role, folder = os.environ.get(ENV_ROLE, ""), os.environ.get(ENV_EXCHANGE, "")
    trainer = getattr(sys.modules.get(GRPO), "GRPOTrainer", None)
    if _patched or trainer is None or role not in (REFERENCE, CANDIDATE) or not folder:
        return
    _patched.append(True)
    original = trainer._generate_and_score_completions
    calls = [0]
    held = {"replayed": 0, "generated": 0}

    @functools.wraps(original)
    def generated(self: object, batch: list[object]) -> object:
        k, calls[0] = calls[0], calls[0] + 1
        rank, world = rank_and_world()
        if role == CANDIDATE:
            device = self.accelerator.device  # type: ignore[attr-defined]
            got = RECORDING.run("the replay of the reference's rollouts", replayed, Path(folder),
                                k, (rank, world, len(batch)), device)
            held["replayed" if got is not None else "generated"] += 1
            RECORDING.run("the count of the replayed rollouts", kept, rank, held)
            if got is not None:
                return got
        out = original(self, batch)
        if role == REFERENCE and world == 1:
            RECORDING.run("the record of the rollouts", written, Path(folder), k, out)
        elif role == REFERENCE and rank == 0:  # its rows are spread over its ranks: none
            RECORDING.run("the record of the rollouts", (Path(folder) / f"rollout-{k}.none").touch)
        return out

    trainer._generate_and_score_completions = generated


def kept(rank: int, held: dict[str, int]) -> None:
    """This candidate rank's counts of replayed and generated rollouts, in its record folder."""
    path = Path(os.environ[ENV_DIR]) / HELD.format(rank=rank)
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(held))
    os.replace(part, path)


def written(folder: Path, k: int, out: dict[str, object]) -> None:
    """Call ``k``'s rollouts, its tensors on the CPU, written whole into ``folder``."""
    path = folder / f"rollout-{k}.pt"
    part = path.with_name(path.name + ".part")
    kept = {key: v.detach().cpu() for key, v in out.items() if isinstance(v, torch.Tensor)}
    torch.save({**kept, RNG: torch.get_rng_state()}, part)
    os.replace(part, path)


def replayed(folder: Path, k: int, share: tuple[int, int, int],
             device: torch.device) -> dict[str, torch.Tensor] | None:
    """The reference's call ``k`` for rank R of W that generates ``rows`` rows (``share``):
    its R-th of W slices of every per-row tensor, the others whole; None where the reference
    wrote none, or its rows are not W × ``rows``. On one process (W 1), the torch RNG is left
    as the reference's generation left it (``RNG``)."""
    rank, world, rows = share
    path, none = folder / f"rollout-{k}.pt", folder / f"rollout-{k}.none"
    if not exchange.wait(lambda: path.exists() or none.exists(), ended(folder, REFERENCE),
                         f"the reference's rollout {k}", started=k > 0) or not path.exists():
        return None
    data = torch.load(path, weights_only=True)
    rng = data.pop(RNG, None)
    total = data["prompt_ids"].shape[0]
    if total != rows * world:
        return None
    if world == 1 and rng is not None:
        torch.set_rng_state(rng)
    return {key: (v[rank * rows:(rank + 1) * rows] if v.dim() and v.shape[0] == total else v)
            .to(device) for key, v in data.items()}
