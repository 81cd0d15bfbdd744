"""Where an optimizer's tensors live on a device mesh, as ``lrcheck record`` describes it once
per process (``rank{R}.json``, the optimizer's ``layout``), so that ``record.placed`` can merge
the ranks' shard fingerprints by placement: per mesh its shape, its dimensions' names and this
rank's coordinate; per tensor its mesh and its placement on each of the mesh's dimensions
(``S``: sharded, ``_StridedShard`` too; ``R``: replicated; ``P``: partial), or None for a plain
tensor (replicated over every rank). And which of the process's ranks feed data of their own:
the ranks of a tensor-parallel dimension (``tensor_parallel``: by its tensors' placements on it,
whatever its name) all feed the same rows, so the one at coordinate 0 is taken as theirs and the
loss weights are divided by the data-parallel ranks only (``data_world``). Where no parameter
is placed on it, that dimension is read off the model's own mesh by its name (``shared_rows``:
transformers' ``_device_mesh``, which its ``DistributedConfig`` builds even where no parameter
is placed on ``tp``: expert parallel on the ranks of a tensor-parallel group, ``tp_plan={}``)."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from lrcheck.record.optimizers import local_tensor, stored
from lrcheck.record.pipeline import stage_of
from lrcheck.record.probes import grad_dots
from lrcheck.recorder import json_number

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

# Mesh dimensions, by name, whose ranks feed the same data (torchtitan's, Accelerate's names),
# and names no tensor-parallel dimension has (data parallel's ``dp*``, FSDP's, the experts',
# the pipeline's): the others are told by their tensors' placements (``tensor_parallel``).
TENSOR_DIMS = ("tp",)
NOT_TENSOR_DIMS = ("fsdp", "hsdp", "ddp", "data", "replicate", "shard", "ep", "pp")
Layout = dict[str, object]
DimKey = tuple[str | None, tuple[int, ...]]  # a mesh dimension's name, the ranks along it


@dataclass
class Dim:
    """A mesh dimension through this rank: its name (None: not named), this rank's place along
    it, and the placements on it of the tensors on it (``R``, ``P``, ``S{d}``: sharded along
    the tensor's dimension ``d``)."""

    name: str | None
    at: int
    kinds: set[str] = field(default_factory=set)


def tensor_parallel(dim: Dim) -> bool:
    """Whether ``dim`` is tensor parallel's (its ranks feed the same rows): named ``tp``; else,
    not named as ``NOT_TENSOR_DIMS`` are, by its tensors' placements — one sharded along another
    dimension than its first (rowwise), a partial one, or replicated tensors beside sharded
    ones: FSDP2 shards every tensor along its first dimension, HSDP's replicating dimension
    replicates every one, DDP's tensors are none."""
    if dim.name in TENSOR_DIMS:
        return True
    if dim.name is not None and (dim.name in NOT_TENSOR_DIMS or dim.name.startswith("dp")):
        return False
    return any(kind not in ("R", "S0") for kind in dim.kinds) or {"R", "S0"} <= dim.kinds


def _kind(placement: object) -> str:
    short = _placement(placement)
    return f"S{getattr(placement, 'dim', 0)}" if short == "S" else short


def _dims(dims: dict[DimKey, Dim], mesh: DeviceMesh, placements: Sequence[object]) -> None:
    """Add a tensor's placements on ``mesh`` to ``dims``, keyed by each dimension's name and
    the global ranks along it through this rank (a sub-mesh's dimension is its mesh's)."""
    coord = mesh.get_coordinate()
    if coord is None:
        return
    for d, placement in enumerate(placements):
        key = _dim_key(mesh, coord, d)
        dims.setdefault(key, Dim(key[0], int(coord[d]))).kinds.add(_kind(placement))


def _dim_key(mesh: DeviceMesh, coord: Sequence[int], d: int) -> DimKey:
    """Dimension ``d`` of ``mesh`` through the rank at ``coord``: its name and its ranks."""
    names = list(mesh.mesh_dim_names or ())
    at: tuple[int | slice, ...] = (*coord[:d], slice(None), *coord[d + 1:])
    return (names[d] if d < len(names) else None,
            tuple(int(r) for r in mesh.mesh[at].reshape(-1).tolist()))


def fsdp_dims(model: object) -> frozenset[DimKey]:
    """The mesh dimensions through this rank that FSDP2 shards or replicates ``model``'s
    parameters over (``fully_shard``, and ``replicate``, built on it): data parallel's, whatever
    the placements on them — a ``shard_placement_fn`` sharding along another dimension than the
    first, or replicated modules beside sharded ones, look like tensor parallel's otherwise."""
    try:
        from torch.distributed._composable_state import _get_module_state
    except ImportError:  # another torch: told by placements alone
        return frozenset()
    found: set[DimKey] = set()
    for module in getattr(model, "modules", lambda: ())():
        group = getattr(_get_module_state(module), "_fsdp_param_group", None)
        for param in getattr(group, "fsdp_params", None) or ():
            info = getattr(param, "mesh_info", None)
            mesh = getattr(info, "mesh", None)
            coord = None if mesh is None else mesh.get_coordinate()
            for d in (getattr(info, "shard_mesh_dim", None),
                      getattr(info, "replicate_mesh_dim", None)):
                if mesh is not None and coord is not None and isinstance(d, int):
                    found.add(_dim_key(mesh, coord, d))
    return frozenset(found)


def _placement(placement: object) -> str:
    if getattr(placement, "is_replicate", lambda: False)():
        return "R"
    return "P" if getattr(placement, "is_partial", lambda: False)() else "S"


def layout(params: Sequence[torch.Tensor], world: int,
           data_dims: Collection[DimKey] = ()) -> Layout | None:
    """The layout of ``params`` on their device meshes (see the module's docstring; none of
    ``data_dims``, ``fsdp_dims``'s, is tensor parallel's); where a pipeline stage holds them
    (``record.pipeline``), its ``stage`` (``[index, stages]``: only stage 0 feeds rows of its
    own), their ``names`` in its module and, where those are the whole model's paths
    (``pipeline()``'s stages), ``paths``; None where neither."""
    meshes: list[dict[str, object]] = []
    tensors: list[list[object] | None] = []
    dims: dict[DimKey, Dim] = {}
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
        _dims(dims, mesh, placements)
    found = stage_of(params)
    stage = {} if found is None else {"stage": [found[0], found[1]], "names": found[2],
                                      **({"paths": "model"} if found[3] else {})}
    if not meshes:
        return None if found is None else {**stage, "feeds": found[0] == 0}
    tensor = [(len(key[1]), dim.at) for key, dim in dims.items()
              if key not in data_dims and tensor_parallel(dim)]
    ways, feeds = math.prod(size for size, _ in tensor), all(at == 0 for _, at in tensor)
    return {"meshes": meshes, "tensors": tensors, "data_world": max(1, world // ways),
            "feeds": feeds, **stage}


def shared_rows(found: Layout | None, params: Sequence[torch.Tensor], model: object,
                world: int) -> Layout:
    """``found`` (``params``' layout; ``{"feeds": True}`` for None) laid out again where
    ``model`` is FSDP2's (``fsdp_dims``), with ``data_world`` and ``feeds`` read off
    ``model``'s own device mesh (transformers' ``_device_mesh``) where it has a dimension named
    as ``TENSOR_DIMS`` of several ranks and no parameter's mesh has a tensor-parallel one: with
    no tensor on it, only its name can tell."""
    if data_dims := fsdp_dims(model):
        found = layout(params, world, data_dims)
    out = dict(found or {"feeds": True})
    mesh = getattr(model, "_device_mesh", None)
    names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
    if mesh is None or out.get("data_world", world) != world:
        return out
    dims = [d for d, n in enumerate(names) if n in TENSOR_DIMS and mesh.size(d) > 1]
    coord = mesh.get_coordinate()
    if not dims or coord is None:
        return out
    ways = math.prod(mesh.size(d) for d in dims)
    return out | {"data_world": max(1, world // ways),
                  "feeds": all(coord[d] == 0 for d in dims)}


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
