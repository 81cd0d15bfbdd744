"""What a process records of its DTensors' placement (``record.placements``), on a real 1-rank
gloo mesh of two named dimensions: the layout's meshes and placements, the data-parallel ranks,
and the per-tensor squared gradient norms."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from lrcheck.record.placements import data_world, grad_keys, layout  # noqa: E402
from lrcheck.record.probes import probe  # noqa: E402


@pytest.fixture
def mesh(monkeypatch):
    from torch.distributed.device_mesh import init_device_mesh

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield init_device_mesh("cpu", (1, 1), mesh_dim_names=("dp", "tp"))
    dist.destroy_process_group()


def test_a_dtensor_s_placements_and_this_rank_s_coordinate_are_described(mesh):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    placed = torch.nn.Parameter(distribute_tensor(torch.ones(4, 2, dtype=torch.float64), mesh,
                                                  [Replicate(), Shard(0)]))
    plain = torch.nn.Parameter(torch.full((3,), 2.0, dtype=torch.float64))
    found = layout([placed, plain], world=4)
    assert found == {"meshes": [{"shape": [1, 1], "names": ["dp", "tp"], "coord": [0, 0]}],
                     "tensors": [[0, "R", "S"], None], "data_world": 4, "feeds": True}
    assert data_world(found, 4) == 4 and data_world(None, 4) == 4
    assert layout([plain], world=1) is None
    placed.grad = distribute_tensor(torch.full((4, 2), 3.0, dtype=torch.float64), mesh,
                                    [Replicate(), Shard(0)])
    keys = grad_keys([placed, plain])
    assert keys == {"grad_sq": pytest.approx(72.0, rel=1e-15),  # 8 elements of 3²
                    "grad_sqs": [pytest.approx(72.0, rel=1e-15), 0.0],  # and no gradient
                    # the gradient dotted with its probe's slice (record.probes): here all of it
                    "grad_dots": [pytest.approx(3 * float(probe((4, 2)).sum()), rel=1e-14), 0.0]}


def test_a_mesh_dimension_named_tp_divides_the_data_world(mesh):
    from torch.distributed.tensor import Shard, distribute_tensor

    tp = mesh["tp"]
    p = torch.nn.Parameter(distribute_tensor(torch.ones(2, 2, dtype=torch.float64), tp,
                                             [Shard(0)]))
    found = layout([p], world=1)
    assert found is not None and found["feeds"] is True and found["data_world"] == 1
    assert found["meshes"] == [{"shape": [1], "names": ["tp"], "coord": [0]}]


def test_a_pipeline_stage_holding_the_parameters_is_described_and_feeds_at_stage_0(mesh):
    from torch.distributed.pipelining import PipelineStage

    model = torch.nn.Linear(2, 2)
    other = torch.nn.Parameter(torch.zeros(2))
    assert layout(list(model.parameters()), world=1) is None  # no stage yet
    stage = PipelineStage(model, 0, 1, torch.device("cpu"))
    assert layout(list(model.parameters()), world=1) == {
        "stage": [0, 1], "names": ["weight", "bias"], "feeds": True}
    assert layout([other], world=1) is None  # a stage holds it: not this one
    assert stage.submod is model


def test_a_stage_pipeline_split_off_says_its_names_are_the_whole_model_s_paths():
    """Finding 6: ``pipeline()``'s stages (``_PipelineStage``, with its ``pipe_info``) keep
    each parameter under its path in the model traced; a ``PipelineStage`` of the user's
    module does not say so (above)."""
    from torch.distributed.pipelining.stage import _PipelineStage

    model = torch.nn.Linear(2, 2)
    built = object.__new__(_PipelineStage)  # as build_stage leaves it, without a process group
    for key, value in {"submod": model, "stage_index": 1, "num_stages": 2,
                       "pipe_info": object()}.items():
        object.__setattr__(built, key, value)
    assert layout(list(model.parameters()), world=2) == {
        "stage": [1, 2], "names": ["weight", "bias"], "paths": "model", "feeds": False}
    del built


def test_a_gradient_not_finite_is_written_as_json_holds_it_and_read_back():
    """JSON has no NaN: the line would not be written and the recording would stop at the very
    update that diverged; its string is written, and read back as the number."""
    import json

    from lrcheck.recorder import _record

    p = torch.nn.Parameter(torch.ones(2, dtype=torch.float64))
    p.grad = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    keys = grad_keys([p])
    assert keys == {"grad_sq": "NaN", "grad_sqs": ["NaN"], "grad_dots": ["NaN"]}
    line = json.loads(json.dumps({"step": 0, "samples_seen": 1, "lr": [0.1], "loss": None,
                                  **keys}, allow_nan=False))
    read = _record(line, "rank0.jsonl:1")
    assert read["grad_sq"] != read["grad_sq"] and read["grad_sqs"][0] != read["grad_sqs"][0]
    assert read["grad_dots"][0] != read["grad_dots"][0]


class _Mesh:
    """A device mesh as ``layout`` reads it (no process group): its ranks, names and this
    rank's coordinate."""

    def __init__(self, ranks, coord, names=None):
        self.mesh, self.mesh_dim_names = torch.tensor(ranks), names
        self.shape, self._coord = tuple(self.mesh.shape), list(coord)

    def get_coordinate(self):
        return self._coord


class _Placed:
    def __init__(self, mesh, *placements):
        self.device_mesh, self.placements = mesh, placements


def test_tensor_parallel_is_told_by_its_placements_whatever_the_dimension_s_name():
    from lrcheck.record.placements import Dim, tensor_parallel

    assert tensor_parallel(Dim(None, 0, {"S0", "S1"}))  # colwise and rowwise
    assert tensor_parallel(Dim("model", 0, {"S0", "R"}))  # a sharded weight, a replicated bias
    assert tensor_parallel(Dim(None, 0, {"P"})) and tensor_parallel(Dim("tp", 0, {"S0"}))
    assert not tensor_parallel(Dim(None, 0, {"S0"}))  # FSDP2: every tensor along its first
    assert not tensor_parallel(Dim(None, 0, {"R"}))  # HSDP's replicating dimension
    assert not tensor_parallel(Dim("dp_shard", 0, {"S1"}))  # named data parallel's
    assert not tensor_parallel(Dim("ep", 0, {"S0", "R"}))


@pytest.mark.parametrize("names", [None, ("data", "model"), ("dp", "mp"), ("dp", "tensor")])
def test_a_tensor_parallel_dimension_not_named_tp_divides_the_data_world(names):
    """Finding 7: DP x TP on a (2, 2) mesh, this rank (1) at (0, 1): FSDP2 on the first
    dimension, colwise and rowwise on the second; a norm on the first dimension's sub-mesh."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    mesh = _Mesh([[0, 1], [2, 3]], (0, 1), names)
    dp = _Mesh([1, 3], (0,), None if names is None else names[:1])
    params = [_Placed(mesh, _StridedShard(0, split_factor=2), Shard(0)),
              _Placed(mesh, Shard(0), Shard(1)), _Placed(dp, Shard(0))]
    found = layout(params, world=4)
    assert found is not None and (found["data_world"], found["feeds"]) == (2, False)
    assert found["tensors"] == [[0, "S", "S"], [0, "S", "S"], [1, "S"]]
    first = layout([_Placed(_Mesh([[0, 1], [2, 3]], (1, 0), names), Shard(0), Shard(1))], 4)
    assert first is not None and (first["data_world"], first["feeds"]) == (2, True)
    hsdp = layout([_Placed(mesh, Replicate(), Shard(0)), _Placed(mesh, Replicate(), Shard(0))],
                  world=4)
    assert hsdp is not None and (hsdp["data_world"], hsdp["feeds"]) == (4, True)


class _ModelMesh:
    """A device mesh as ``shared_rows`` reads one (a real one of 2 ranks needs 2 processes)."""

    def __init__(self, shape, names, coord):
        self.shape, self.mesh_dim_names, self.coord = tuple(shape), tuple(names), list(coord)

    def size(self, d):
        return self.shape[d]

    def get_coordinate(self):
        return self.coord


def test_the_model_s_own_tp_dimension_makes_its_ranks_share_the_rows():
    from types import SimpleNamespace

    from lrcheck.record.placements import shared_rows

    # transformers' EP on a TP group (tp_plan={}): the experts on ``ep``, nothing on ``tp``
    experts = {"meshes": [{"shape": [2], "names": ["ep"], "coord": [1]}],
               "tensors": [None, [0, "S"]], "data_world": 2, "feeds": True}
    model = SimpleNamespace(_device_mesh=_ModelMesh((1, 1, 2), ("pp", "fsdp", "tp"), (0, 0, 1)))
    assert shared_rows(experts, [], model, 2) == {**experts, "data_world": 1, "feeds": False}
    first = SimpleNamespace(_device_mesh=_ModelMesh((1, 1, 2), ("pp", "fsdp", "tp"), (0, 0, 0)))
    assert shared_rows(None, [], first, 2) == {"data_world": 1, "feeds": True}
    # FSDP beside the experts (tp 1), no mesh of the model's, a parameter's tp already read
    fsdp = SimpleNamespace(_device_mesh=_ModelMesh((1, 2, 1), ("pp", "fsdp", "tp"), (0, 1, 0)))
    assert shared_rows(experts, [], fsdp, 2) == experts
    assert shared_rows(None, [], object(), 2) == {"feeds": True}
    tp = {**experts, "data_world": 1}
    assert shared_rows(tp, [], model, 2) == tp


class _Group:
    """FSDP2's parameter group as ``fsdp_dims`` reads it: each parameter's mesh information."""

    def __init__(self, mesh, shard, replicate=None):
        info = SimpleNamespace(mesh=mesh, shard_mesh_dim=shard, replicate_mesh_dim=replicate)
        self.fsdp_params = [SimpleNamespace(mesh_info=info)]


@pytest.mark.parametrize("kinds", [("S1", "S1"), ("S0", "R")], ids=["shard-dim-1", "replicate"])
def test_fsdp2_s_own_dimension_is_data_parallel_whatever_its_placements(monkeypatch, kinds):
    """Found by a second reader: FSDP2 on an unnamed mesh sharding along dimension 1
    (``shard_placement_fn``), or ``fully_shard`` beside ``replicate``, looked tensor parallel,
    and rank 1 was taken for a rank feeding rank 0's rows."""
    import torch.distributed._composable_state as composable
    from torch.distributed.tensor import Replicate, Shard

    from lrcheck.record.placements import fsdp_dims, shared_rows

    mesh = _Mesh([0, 1], (1,))
    placed = {"S1": Shard(1), "S0": Shard(0), "R": Replicate()}
    params = [_Placed(mesh, placed[k]) for k in kinds]
    alone = layout(params, world=2)
    assert alone is not None and (alone["data_world"], alone["feeds"]) == (1, False)
    model = torch.nn.Linear(2, 2)
    monkeypatch.setattr(composable, "_get_module_state",
                        lambda m: SimpleNamespace(_fsdp_param_group=_Group(mesh, 0))
                        if m is model else None)
    assert fsdp_dims(model) == {(None, (0, 1))}
    found = shared_rows(alone, params, model, 2)
    assert (found["data_world"], found["feeds"]) == (2, True)
    assert fsdp_dims(torch.nn.Linear(2, 2)) == set()
