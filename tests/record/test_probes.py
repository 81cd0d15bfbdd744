"""The gradient per element fingerprinted so that it survives sharding (``record.probes``):
each tensor's gradient dotted with a fixed random tensor of its global shape, each shard with
its slice; merged by placement (``record.folder.merge``) on hand-made shards of an HSDP-like
``(dp, tp)`` mesh, the replicated dimension counted once, and held against one process's by
``gradient (candidate)`` (``checks.probes``): a shard permuted or mis-sliced keeps every norm
and fails."""

import math

import torch

from lrcheck.checks.probes import check_probes
from lrcheck.record.folder import merge
from lrcheck.record.probes import grad_dots, probe

G = torch.arange(24, dtype=torch.float64).reshape(6, 4).sin()  # tensor 0, sharded on tp
B = torch.arange(4, dtype=torch.float64).cos()  # tensor 1, replicated on every rank


def test_a_probe_is_drawn_from_the_shape_alone_at_unit_norm_and_dotted_with_the_gradient():
    assert torch.equal(probe((6, 4)), probe([6, 4])) and not torch.equal(probe((4, 6)).T,
                                                                          probe((6, 4)))
    assert math.isclose(float(torch.linalg.vector_norm(probe((6, 4)))), 1.0, rel_tol=1e-15)
    layer = torch.nn.Linear(4, 6, dtype=torch.float64)
    layer(torch.ones(3, 4, dtype=torch.float64)).pow(2).sum().backward()
    want = [float((p.grad * probe(p.shape)).sum()) for p in layer.parameters()]
    assert grad_dots(list(layer.parameters())) == want
    embedding = torch.nn.Embedding(5, 3, sparse=True)
    embedding(torch.tensor([1, 2])).sum().backward()
    assert grad_dots([embedding.weight]) == [None]  # a sparse gradient: not probed


def _line(shard, at, replica):
    """A rank's record of update 0: ``shard``, held where tensor 0's slice ``at`` belongs
    (its coordinate on tp), and the whole of tensor 1."""
    prints = [(float(x.sum()), float(x.abs().max())) for x in (shard, replica)]
    mine = probe(G.shape).chunk(2)[at]  # Shard(0) over tp, as distribute_tensor slices it
    return {"step": 0, "samples_seen": 8, "lr": [0.1], "loss": None,
            "fingerprint": [v for row in prints for v in row],
            "grad_sq": float(shard.pow(2).sum() + replica.pow(2).sum()),
            "grad_sqs": [float(shard.pow(2).sum()), float(replica.pow(2).sum())],
            "grad_dots": [float((shard * mine).sum()), float((replica * probe(B.shape)).sum())]}


def _merged(shards):
    """The 4 ranks of a (dp 2, tp 2) mesh, tensor 0 ``(R, S)``, tensor 1 plain, merged; each
    rank (d, t) holding ``shards[t]``."""
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    layouts = [{"meshes": [{"shape": [2, 2], "names": ["dp_replicate", "dp_shard"],
                            "coord": list(c)}], "tensors": [[0, "R", "S"], None]}
               for c in coords]
    records, _ = merge([[_line(shards[c[1]], c[1], B)] for c in coords], True, False,
                       layouts)
    return records


REFERENCE = [{"grad_dots": [float((G * probe(G.shape)).sum()), float((B * probe(B.shape)).sum())],
              "grad_sqs": [float(G.pow(2).sum()), float(B.pow(2).sum())]}]


def test_the_shards_dot_products_summed_each_shard_once_are_the_whole_gradients():
    records = _merged(G.chunk(2))
    # the dp_replicate dimension once: twice would double tensor 0's dot product
    for mine, whole in zip(records[0]["grad_dots"], REFERENCE[0]["grad_dots"], strict=True):
        assert math.isclose(mine, whole, rel_tol=1e-14), (mine, whole)
    check = check_probes(records, REFERENCE, 1e-9)
    assert check is not None and check.status == "pass" and check.max_abs_diff <= 1e-15


def test_a_shard_permuted_or_the_shards_swapped_keep_the_norm_and_fail_at_update_0_named():
    first, second = G.chunk(2)
    for shards in ((first, second.flip(0)), (second, first)):  # rows permuted; mis-sliced
        records = _merged(shards)
        assert math.isclose(records[0]["grad_sq"], float(G.pow(2).sum() + B.pow(2).sum()))
        check = check_probes(records, REFERENCE, 1e-9)
        assert check is not None and check.status == "fail" and check.first_divergence == 0
        assert check.detail.startswith("at update 0: tensor 0's gradient"), check.detail
        assert "its norm the reference's: its elements permuted or mis-sliced" in check.detail


def test_a_candidate_not_merged_from_several_ranks_is_not_held():
    one = [{**REFERENCE[0], "grad_dots": [0.0, 0.0]}]  # one rank's: grad-norm holds it
    assert check_probes(one, REFERENCE, 1e-9) is None
