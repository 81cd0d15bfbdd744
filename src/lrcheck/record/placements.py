"""Where an optimizer's tensors live on a device mesh, as ``lrcheck record`` describes it once
per process (``rank{R}.json``, the optimizer's ``layout``), so that ``record.placed`` can merge
the ranks' shard fingerprints by placement: per mesh its shape, its dimensions' names and this
rank's coordinate; per tensor its mesh and its placement on each of the mesh's dimensions
(``S``: sharded, ``_StridedShard`` too; ``R``: replicated; ``P``: partial), or None for a plain
tensor (replicated over every rank). And which of the process's ranks feed data of their own:
the ranks of a tensor-parallel dimension (``TENSOR_DIMS``, by the mesh's names) all feed the
same rows, so the one at coordinate 0 is taken as theirs and the loss weights are divided by
the data-parallel ranks only (``data_world``). That dimension is read off the parameters'
meshes, or off the model's own (``shared_rows``: transformers' ``_device_mesh``, which its
``DistributedConfig`` builds even where no parameter is placed on ``tp``: expert parallel on
the ranks of a tensor-parallel group, ``tp_plan={}``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lrcheck.record.optimizers import local_tensor, stored
from lrcheck.record.pipeline import stage_of
from lrcheck.record.probes import grad_dots
from lrcheck.recorder import json_number

# Mesh dimensions, by name, whose ranks feed the same data (torchtitan's, Accelerate's names).
TENSOR_DIMS = ("tp",)
Layout = dict[str, object]


def _placement(placement: object) -> str:
    if getattr(placement, "is_replicate", lambda: False)():
        return "R"
    return "P" if getattr(placement, "is_partial", lambda: False)() else "S"


def layout(params: Sequence[torch.Tensor], world: int) -> Layout | None:
    """The layout of ``params`` on their device meshes (see the module's docstring); where a
    pipeline stage holds them (``record.pipeline``), its ``stage`` (``[index, stages]``: only
    stage 0 feeds rows of its own) and their ``names`` in its module; None where neither."""
    meshes: list[dict[str, object]] = []
    tensors: list[list[object] | None] = []
    for p in params:
        mesh, placements = getattr(p, "device_mesh", None), getattr(p, "placements", None)
        if mesh is None or placements is None:
            tensors.append(None)
            continue
        coord = mesh.get_coordinate()
        entry: dict[str, object] = {"shape": list(mesh.shape),
                                    "names": list(mesh.mesh_dim_names or ()),
                                    "coord": None if coord is None else list(coord)}
        if entry not in meshes:
            meshes.append(entry)
        tensors.append([meshes.index(entry), *(_placement(x) for x in placements)])
    found = stage_of(params)
    stage = {} if found is None else {"stage": [found[0], found[1]], "names": found[2]}
    if not meshes:
        return None if found is None else {**stage, "feeds": found[0] == 0}
    return {"meshes": meshes, "tensors": tensors, **_rows(meshes, world), **stage}


def _rows(meshes: Sequence[dict[str, object]], world: int) -> dict[str, object]:
    """``data_world`` and ``feeds`` (see the module's docstring) from the first of ``meshes``
    with a tensor-parallel dimension (every rank feeding its own rows where none has)."""
    feeds, ways = True, 1
    for mesh in meshes:
        names, coord, shape = mesh["names"], mesh["coord"], mesh["shape"]
        assert isinstance(names, list) and isinstance(shape, list)
        found = next((d for d, name in enumerate(names) if name in TENSOR_DIMS), None)
        if found is not None and isinstance(coord, list):
            ways, feeds = shape[found], coord[found] == 0
            break
    return {"data_world": max(1, world // ways), "feeds": feeds}


def shared_rows(found: Layout | None, model: object, world: int) -> Layout:
    """``found`` (a layout; ``{"feeds": True}`` for None) with ``data_world`` and ``feeds``
    read off ``model``'s own device mesh (transformers' ``_device_mesh``) where it has a
    tensor-parallel dimension of several ranks and no parameter's mesh has one."""
    out = dict(found or {"feeds": True})
    mesh = getattr(model, "_device_mesh", None)
    names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
    if mesh is None or out.get("data_world", world) != world or not any(
            n in TENSOR_DIMS and mesh.size(d) > 1 for d, n in enumerate(names)):
        return out
    coord = mesh.get_coordinate()
    entry: dict[str, object] = {"names": list(names), "shape": list(mesh.shape),
                                "coord": None if coord is None else list(coord)}
    return out | _rows([entry], world)


def data_world(found: Layout | None, world: int) -> int:
    """The ranks whose gradients a data-parallel reduction averages: ``world`` less the
    tensor-parallel dimension's ranks, which feed the same rows."""
    ways = None if found is None else found.get("data_world")
    return ways if isinstance(ways, int) else world


def grad_squares(params: Sequence[torch.Tensor]) -> list[float]:
    """Per tensor, the squared norm of this rank's shard of its gradient (0: none), in float64;
    one transfer."""
    if not params:
        return []
    with torch.no_grad():
        device = local_tensor(params[0]).device
        norms = [torch.zeros((), dtype=torch.float64, device=device) if p.grad is None else
                 torch.linalg.vector_norm(stored(local_tensor(p.grad).detach()),
                                          dtype=torch.float64).to(device) for p in params]
        return (torch.stack(norms) ** 2).tolist()


def grad_keys(params: Sequence[torch.Tensor]) -> dict[str, object]:
    """What a fingerprinted update records of the gradient the optimizer steps on: ``grad_sq``,
    the squared norm of this rank's gradients (of its shards); ``grad_sqs``, per tensor,
    for ``record.placed`` and ``record.staged`` to merge and ``checks.stages`` to compare;
    and ``grad_dots``, per tensor, its gradient shard dotted with a fixed random tensor's same
    slice (``record.probes``), merged alike and compared by ``checks.probes``."""
    squares = grad_squares(params)  # one pass, one transfer
    # Not finite: written as its string ("NaN"), JSON having no such number.
    dots = [None if d is None else json_number(d) for d in grad_dots(params)]
    return {"grad_sq": json_number(sum(squares)), "grad_sqs": [json_number(s) for s in squares],
            "grad_dots": dots}
