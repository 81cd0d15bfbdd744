"""The process group of a multi-process run: gloo on the CPU, nccl on CUDA with one GPU per
local rank. Used by launched workers and by lrcheck running inside torchrun."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from lrcheck.errors import SpecError
from lrcheck.runner.device import resolve_device
from lrcheck.runner.ranks.notes import Notes
from lrcheck.runner.ranks.torchrun import TorchrunEnv


@dataclass(frozen=True)
class Member:
    """This process's place in the group. ``group`` is what training uses: the default group,
    or one whose collectives give up after ``--timeout`` seconds (None means the default)."""

    env: TorchrunEnv
    device: str
    group: dist.ProcessGroup | None = None
    owned: bool = True  # lrcheck initialised the default group (not the user's script)
    notes: Notes | None = None  # where each rank runs, and its error (``ranks.notes``)

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


# The default group's collectives wait this long: the ranks wait on it while rank 0 alone trains
# the reference and writes the report, which can take longer than torch's default (30 min for
# gloo, 10 for nccl). A rank that dies still ends the wait: torchrun stops the others.
DEFAULT_GROUP_TIMEOUT = timedelta(days=1)


def join(env: TorchrunEnv, device: str, timeout: float | None = None) -> Member:
    """Initialise the default process group from torchrun's environment (``env://``) — or use
    the one a user's script initialised already — and, when ``timeout`` is given, a training
    group whose collectives wait at most that long."""
    kind = resolve_device(device)
    if kind == "cuda":
        count = torch.cuda.device_count()
        if env.local_rank >= count:
            raise SpecError(f"--device cuda with {env.local_world} processes per node needs one "
                            f"GPU each, this node has {count}; lower --nproc (torchrun's "
                            "--nproc-per-node when torchrun starts lrcheck) or use --device cpu")
        torch.cuda.set_device(env.local_rank)
    backend = "nccl" if kind == "cuda" else "gloo"
    owned = not dist.is_initialized()
    if owned:
        dist.init_process_group(backend, rank=env.rank, world_size=env.world,
                                timeout=DEFAULT_GROUP_TIMEOUT)
    group = None
    if timeout is not None:
        group = dist.new_group(backend=backend, timeout=timedelta(seconds=timeout))
    notes = Notes(env.rank, env.world, env.node, env.nodes)
    return Member(env, env.device(kind), group, owned, notes)


def leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def release(member: Member) -> None:
    """Leave the default group if lrcheck initialised it (a user's own group stays theirs)."""
    if member.owned:
        leave()


def finish(member: Member) -> None:
    """Wait for every rank, then leave the group: the last collective of a run."""
    member.barrier()
    release(member)
