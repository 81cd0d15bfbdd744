"""The process group of a multi-process run: gloo on the CPU, nccl on CUDA with one GPU per
local rank. Used by launched workers and by lrcheck running inside torchrun."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from lrcheck.errors import SpecError
from lrcheck.runner.device import resolve_device
from lrcheck.runner.dist.torchrun import TorchrunEnv


@dataclass(frozen=True)
class Member:
    """This process's place in the group. ``group`` is what training uses: the default group,
    or one whose collectives give up after ``--timeout`` seconds (None means the default)."""

    env: TorchrunEnv
    device: str
    group: Any = None

    @property
    def rank(self) -> int:
        return self.env.rank

    @property
    def world(self) -> int:
        return self.env.world

    def barrier(self) -> None:
        """Wait for every rank, on the default group (no --timeout: rank 0 may be training the
        reference alone meanwhile)."""
        if self.device.startswith("cuda"):
            dist.barrier(device_ids=[self.env.local_rank])
        else:
            dist.barrier()

    def share(self, code: int) -> int:
        """Rank 0's ``code`` on every rank."""
        value = torch.tensor([code], dtype=torch.int64, device=self.device)
        dist.broadcast(value, src=0)
        return int(value.item())


def join(env: TorchrunEnv, device: str, timeout: float | None = None) -> Member:
    """Initialise the default process group from torchrun's environment (``env://``) and, when
    ``timeout`` is given, a training group whose collectives wait at most that long."""
    kind = resolve_device(device)
    if kind == "cuda":
        count = torch.cuda.device_count()
        if env.local_rank >= count:
            raise SpecError(f"--device cuda with {env.local_world} processes per node needs one "
                            f"GPU each, this node has {count}; lower --nproc (torchrun's "
                            "--nproc-per-node when torchrun starts lrcheck) or use --device cpu")
        torch.cuda.set_device(env.local_rank)
    backend = "nccl" if kind == "cuda" else "gloo"
    dist.init_process_group(backend, rank=env.rank, world_size=env.world)
    group = None
    if timeout is not None:
        group = dist.new_group(backend=backend, timeout=timedelta(seconds=timeout))
    return Member(env, env.device(kind), group)


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def finish(member: Member) -> None:
    """Wait for every rank, then leave the group: the last collective of a run."""
    member.barrier()
    leave()
