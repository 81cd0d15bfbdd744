"""Shard fingerprints and gradient norms merged by placement (``record.placed``, through
``record.folder.merge``) on synthetic records: FSDP2's 1-D mesh and DDP's replicas as before,
HSDP's replicated dimension and tensor parallel's replicated tensors counted once."""

import numpy as np
import pytest

from lrcheck.checks.commands import check_merged, check_replicas
from lrcheck.record.folder import merge
from lrcheck.record.placed import placed


def _layout(shape, coord, placements, names=("dp", "tp"), feeds=True):
    """One rank's layout: one mesh, one tensor per entry of ``placements`` (None: plain)."""
    mesh = {"shape": list(shape), "names": list(names[:len(shape)]), "coord": list(coord)}
    return {"meshes": [mesh], "tensors": [None if p is None else [0, *p] for p in placements],
            "feeds": feeds}


def _line(step, prints, squares):
    return {"step": step, "samples_seen": 8 * (step + 1), "lr": [0.1], "loss": None,
            "fingerprint": [v for row in prints for v in row], "grad_sq": float(sum(squares)),
            "grad_sqs": list(squares)}


def test_tensor_parallel_counts_a_replicated_tensor_once_and_adds_its_shards():
    # dp 2 x tp 2: tensor 0 colwise (sharded on both), tensor 1 a norm (sharded on dp only,
    # replicated on tp), tensor 2 plain (every rank holds it whole).
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    layouts = [_layout((2, 2), c, [("S", "S"), ("S", "R"), None], feeds=c[1] == 0)
               for c in coords]
    prints = [[(1.0 + r, 2.0 + r), (10.0 + c[0], 5.0), (7.0, 3.0)]
              for r, c in enumerate(coords)]
    squares = [[1.0 + r, 4.0 + c[0], 9.0] for r, c in enumerate(coords)]
    per_rank = [[_line(0, p, s)] for p, s in zip(prints, squares, strict=True)]
    records, gaps = merge(per_rank, True, False, layouts)
    rows = np.asarray(records[0]["fingerprint"]).reshape(-1, 2)
    assert rows.tolist() == [[1 + 2 + 3 + 4, 5.0], [10 + 11, 5.0], [7.0, 3.0]]
    # The true norm squared: every shard once; the replicated part and how many hold it.
    assert records[0]["grad_sq"] == (1 + 2 + 3 + 4) + (4 + 5) + 9
    assert records[0]["grad_sq_replicated"] == (4 + 5) + 9
    assert records[0]["replicated_ranks"] == 4
    # Each rank's own: the norm of its shards, replicas included (its local norm).
    assert records[0]["grad_sq_ranks"] == [sum(q) for q in squares]
    assert gaps is not None and gaps[0].gap == 0.0


def test_a_replica_that_parts_is_the_largest_gap_with_its_rank():
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    layouts = [_layout((2, 2), c, [("S", "R")]) for c in coords]
    prints = [[(10.0 + c[0] + (0.5 if r == 3 else 0.0), 4.0)] for r, c in enumerate(coords)]
    per_rank = [[_line(0, p, [1.0])] for p in prints]
    _, gaps = merge(per_rank, True, False, layouts)
    assert gaps is not None and (gaps[0].gap, gaps[0].rank) == (pytest.approx(0.5 / 4.0), 3)
    assert gaps[0].owner == 2  # rank 3 (dp 1, tp 1) holds the shard rank 2 (dp 1, tp 0) owns
    result = check_replicas("candidate", [g.row for g in gaps], 4, 1e-9)
    assert result is not None and result.status == "fail" and result.first_divergence == 0
    assert "rank 3's parameters part from rank 2's after update 0" in result.detail


def test_hsdp_counts_the_replicated_dimension_once():
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    layouts = [_layout((2, 2), c, [("R", "S")], names=("dp_replicate", "dp_shard"))
               for c in coords]
    prints = [[(1.0 + c[1], 1.0 + c[1])] for c in coords]
    per_rank = [[_line(0, p, [2.0 + c[1]])] for p, c in zip(prints, coords, strict=True)]
    records, gaps = merge(per_rank, True, False, layouts)
    assert records[0]["fingerprint"] == [1.0 + 2.0, 2.0]
    assert records[0]["grad_sq"] == 2.0 + 3.0 and "replicated_ranks" in records[0]
    assert gaps is not None and gaps[0].gap == 0.0


def test_fsdp2_on_a_1d_mesh_merges_as_the_plain_sum_over_the_ranks():
    layouts = [_layout((2,), (r,), [("S",), ("S",)], names=("dp",)) for r in (0, 1)]
    prints = [[(1.0, 2.0), (3.0, 1.0)], [(4.0, 1.5), (5.0, 6.0)]]
    per_rank = [[_line(0, p, [1.0, 2.0])] for p in prints]
    by_layout, gaps = merge(per_rank, True, False, layouts)
    before, none = merge(per_rank, True, False, None)
    assert by_layout[0]["fingerprint"] == before[0]["fingerprint"] == [5.0, 2.0, 8.0, 6.0]
    assert by_layout[0]["grad_sq"] == before[0]["grad_sq"] == 6.0
    assert gaps is None and none is None and "replicated_ranks" not in by_layout[0]


def test_only_the_first_tensor_parallel_rank_feeds_the_data():
    coords = [(0, 0), (0, 1), (1, 0), (1, 1)]
    layouts = [_layout((2, 2), c, [("S", "S")], feeds=c[1] == 0) for c in coords]
    per_rank = [[{**_line(0, [(1.0, 1.0)], [1.0]), "fed": [[10 + c[0]]], "fed_weights": [None]}]
                for c in coords]
    records, _ = merge(per_rank, True, False, layouts)
    assert [rank_ids[:2] for rank_ids in records[0]["fed"]] == [[0, [10]], [1, [11]]]


def test_no_layout_on_any_rank_is_not_placed():
    assert placed([None, None], [[1.0, 2.0]]) is None


def test_ranks_without_per_tensor_squares_add_their_shards_norms_as_before():
    layouts = [_layout((2,), (r,), [("S",)], names=("dp",)) for r in (0, 1)]
    per_rank = [[{**_line(0, [(1.0, 1.0)], [s]), "grad_sqs": []}] for s in (2.0, 3.0)]
    records, _ = merge(per_rank, True, False, layouts)
    assert records[0]["grad_sq"] == 5.0 and "grad_sqs" not in records[0]


def _lost(line, *keys):
    return {k: v for k, v in line.items() if k not in keys}


@pytest.mark.parametrize("layouts", [None, [_layout((2,), (r,), [("S",)], names=("dp",))
                                             for r in (0, 1)]], ids=["sharded", "placed"])
def test_a_rank_without_its_shards_leaves_the_merged_values_absent_not_rank_0_s(layouts):
    """Finding 11: rank 0's fingerprint and norm are a part of the model's, never the whole."""
    per_rank = [[_line(0, [(1.0, 2.0)], [1.0]), _line(1, [(1.5, 2.0)], [1.0])],
                [_line(0, [(4.0, 3.0)], [2.0]),
                 _lost(_line(1, [(4.5, 3.0)], [2.0]), "fingerprint", "grad_sq", "grad_sqs")]]
    records, _ = merge(per_rank, True, False, layouts)
    assert records[0]["fingerprint"] == [5.0, 3.0] and records[0]["grad_sq"] == 3.0
    assert "unmerged" not in records[0]
    assert not {"fingerprint", "grad_sq", "grad_sqs"} & set(records[1])
    assert records[1]["unmerged"] == ("the ranks' parameter fingerprints and gradient norms "
                                      "could not be merged: rank 1 recorded no parameter "
                                      "fingerprints and no gradient norms")
    found = check_merged("candidate", records)
    assert found is not None and found.status == "skip" and found.name == "shards (candidate)"
    assert found.detail.startswith("not judged at 1 update of the candidate, from update 1: "
                                   "the ranks' parameter fingerprints and gradient norms")
    assert check_merged("candidate", records[:1]) is None


def test_a_replica_without_its_fingerprint_keeps_rank_0_s_whole_model():
    """DDP: rank 0's fingerprint is the whole model's; nothing is summed, nothing lost."""
    per_rank = [[_line(0, [(1.0, 2.0)], [1.0])], [_lost(_line(0, [(1.0, 2.0)], [1.0]),
                                                        "fingerprint")]]
    records, gaps = merge(per_rank, False, False, None)
    assert records[0]["fingerprint"] == [1.0, 2.0] and "unmerged" not in records[0]
    assert gaps is None


def test_experts_sharded_over_ep_are_grouped_apart_and_the_feeding_ranks_terms_kept():
    # transformers' EP on a TP group: the router and the head plain on both ranks (rank 1
    # feeds no rows of its own), the experts sharded over ``ep``
    names = ["model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.down_proj", "lm_head"]
    layouts = [{**_layout((2,), (r,), [None, ("S",), None], names=("ep",), feeds=r == 0),
                "names": names, "data_world": 1} for r in (0, 1)]
    lines = [[{**_line(0, [(1.0, 1.0), (2.0 + r, 3.0), (4.0, 4.0)], [1.0, 2.0 + r, 3.0]),
               "router_terms": {"routing": 5.0 + r}}] for r in (0, 1)]
    record = merge(lines, True, False, layouts)[0][0]
    assert record["group_tensors"] == {"experts": [1], "router": [0], "rest": [2]}
    assert record["grad_sq_groups"] == {"experts": 2.0 + 3.0, "router": 1.0, "rest": 3.0}
    assert record["expert_ranks"] == 2 and record["router_terms"] == {"routing": 5.0}
    plain = [{k: v for k, v in found.items() if k != "names"} for found in layouts]
    assert "group_tensors" not in merge(lines, True, False, plain)[0][0]  # names unknown
