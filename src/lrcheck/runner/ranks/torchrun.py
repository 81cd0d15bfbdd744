"""torchrun, as pure functions: the command line lrcheck launches, and what a process learns
from the environment torchrun gives it. Nothing here imports torch or starts a process.

Two directions (docs/multiprocess.md):

- ``lrcheck compare --nproc N`` launches ``python -m torch.distributed.run`` with the argv of
  ``torchrun_argv``; each rank runs ``lrcheck.runner.rank``.
- ``torchrun ... -m lrcheck compare`` runs lrcheck on every rank; ``torchrun_env`` sees it and
  ``candidate_world`` takes the world size from there, on one node or many.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from lrcheck.errors import SpecError

WORKER_MODULE = "lrcheck.runner.rank"
# The rendezvous store listens on loopback, port 0: the OS hands out a free port, so a busy port
# (another torchrun's 29400, a MASTER_PORT 29500 in use) can never collide with it.
RENDEZVOUS_ENDPOINT = "127.0.0.1:0"
MONITOR_INTERVAL_S = 0.1


def torchrun_argv(python: str, nproc: int, worker_args: Sequence[str], *, run_id: str) -> list[str]:
    """The command that runs ``nproc`` ranks of the worker on this machine: a standalone c10d
    rendezvous on a free loopback port, no restarts (a failed rank is a finding, not something
    to retry), and a short monitor interval so a failure is seen within a fraction of a
    second."""
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise SpecError(f"--nproc must be a whole number >= 1, got {nproc!r}")
    return [
        python, "-m", "torch.distributed.run",
        "--nnodes", "1",
        "--nproc-per-node", str(nproc),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", RENDEZVOUS_ENDPOINT,
        "--rdzv-id", run_id,
        "--max-restarts", "0",
        "--monitor-interval", str(MONITOR_INTERVAL_S),
        "-m", WORKER_MODULE, *worker_args,
    ]


@dataclass(frozen=True)
class TorchrunEnv:
    """Where this process stands in a torchrun job: global ``rank`` of ``world``, ``local_rank``
    of the ``local_world`` processes on its node, and the node's index ``node``."""

    rank: int
    world: int
    local_rank: int
    local_world: int
    node: int

    @property
    def nodes(self) -> int:
        """Nodes in the job when every node runs ``local_world`` processes (torchrun's
        ``--nproc-per-node``)."""
        return self.world // self.local_world

    def device(self, kind: str) -> str:
        """The device this rank trains on: one GPU per local rank, or the CPU."""
        return f"cuda:{self.local_rank}" if kind == "cuda" else "cpu"


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    text = environ.get(name)
    if text is None:
        if default is None:
            raise SpecError(f"torchrun's environment is incomplete: {name} is not set "
                            "(run lrcheck under torchrun, or unset WORLD_SIZE and RANK)")
        return default
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"torchrun's environment has {name}={text!r}, not a whole number") from None


def torchrun_env(environ: Mapping[str, str]) -> TorchrunEnv | None:
    """The torchrun position of a process with environment ``environ``, or None when it was not
    started by torchrun (neither ``TORCHELASTIC_RUN_ID`` nor ``WORLD_SIZE`` is set)."""
    if "TORCHELASTIC_RUN_ID" not in environ and "WORLD_SIZE" not in environ:
        return None
    world = _int(environ, "WORLD_SIZE")
    rank = _int(environ, "RANK")
    local_rank = _int(environ, "LOCAL_RANK", default=rank)
    local_world = _int(environ, "LOCAL_WORLD_SIZE", default=world)
    node = _int(environ, "GROUP_RANK", default=rank // max(local_world, 1))
    if world < 1 or not 0 <= rank < world:
        raise SpecError(f"torchrun's environment has RANK={rank} and WORLD_SIZE={world}; "
                        "RANK must lie in [0, WORLD_SIZE)")
    if local_world < 1 or not 0 <= local_rank < local_world or world % local_world:
        raise SpecError(f"torchrun's environment has LOCAL_RANK={local_rank}, "
                        f"LOCAL_WORLD_SIZE={local_world} and WORLD_SIZE={world}; every node "
                        "must run the same number of processes")
    return TorchrunEnv(rank, world, local_rank, local_world, node)


def candidate_world(nproc: int | None, env: TorchrunEnv | None) -> int:
    """The candidate's world size: ``--nproc`` (default 1), or torchrun's ``WORLD_SIZE`` when
    lrcheck runs inside torchrun, where ``--nproc`` may only repeat it."""
    if env is None:
        return 1 if nproc is None else nproc
    if nproc is not None and nproc != env.world:
        raise SpecError(f"--nproc {nproc} inside torchrun, whose world size is {env.world}: "
                        "drop --nproc (torchrun's --nnodes and --nproc-per-node set the world)")
    return env.world


def check_ref_world(ref_world: int, env: TorchrunEnv | None) -> None:
    """Inside torchrun the reference runs on rank 0 alone (``--ref-nproc 1``) or on every rank."""
    if env is not None and ref_world not in (1, env.world):
        raise SpecError(f"--ref-nproc {ref_world} inside torchrun, whose world size is "
                        f"{env.world}: use --ref-nproc 1 or {env.world}")
