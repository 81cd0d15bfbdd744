"""``--framework fsdp``: lrcheck's own loop (``runner.plain``) with the model sharded by FSDP2
(``torch.distributed.fsdp.fully_shard``) on every rank instead of wrapped in DDP.

Everything else is the plain loop's: the data order, ``--loss-norm`` and ``--tail``, the
measured loss weights (the ``data`` check) and ``--policy``. What FSDP adds is what is checked:

- each layer with parameters, then the root, is ``fully_shard``-ed on a one-dimensional device
  mesh of the run's processes (gloo on the CPU, nccl on CUDA) before the optimizer is made, so
  the optimizer steps the shards;
- gradients are reduce-scattered (averaged over the ranks, as DDP's all-reduce) only on an
  update's last micro-batch: ``set_requires_gradient_sync(last)``, FSDP2's ``no_sync``;
- the parameters recorded after every update are gathered whole (``DTensor.full_tensor()``, a
  collective on every rank), so they are compared whole, not shard by shard.

The reference goes through FSDP too, at ``--ref-nproc`` (1 by default: a mesh of one process in
a group of its own). It cannot run in lockstep — lrcheck does not load the reference's whole
state into the shards before each update — so parameters and loss are judged against the
reference's noise-floor twin, as for the other frameworks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from lrcheck.experiments.tasks import Dataset
from lrcheck.runner import plain
from lrcheck.runner.frameworks.common import framework_process, process_group
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, RunTrace

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


class Fsdp:
    """``plain.Shards`` through FSDP2 on ``mesh``."""

    def __init__(self, mesh: DeviceMesh) -> None:
        self.mesh = mesh

    def shard(self, net: torch.nn.Module) -> None:
        from torch.distributed.fsdp import fully_shard

        for layer in net.children():
            if any(True for _ in layer.parameters()):
                fully_shard(layer, mesh=self.mesh)
        fully_shard(net, mesh=self.mesh)

    def sync(self, net: torch.nn.Module, on: bool) -> None:
        net.set_requires_gradient_sync(on)  # type: ignore[operator]

    def whole(self, net: torch.nn.Module) -> list[torch.Tensor]:
        with torch.no_grad():
            return [p.full_tensor() for p in net.parameters()]  # type: ignore[attr-defined]


def train(spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
          on_update: OnUpdate | None = None,
          on_start: Callable[[], None] | None = None) -> RunTrace:
    """``plain.train``'s contract, the model sharded by FSDP2 over the ``spec.world`` processes
    of the default process group (or a group of one)."""
    from torch.distributed.device_mesh import init_device_mesh

    with framework_process(spec), process_group(spec.world, device):
        mesh = init_device_mesh(torch.device(device).type, (spec.world,))
        return plain.train(spec, data, device=device, rank=rank, on_update=on_update,
                           on_start=on_start, shards=Fsdp(mesh))
