"""Expert parallel merged by parameter name (``record.experts``, through
``record.folder.merge``) on synthetic records: each rank's own experts from it, the
replicated tensors once from rank 0 and the other ranks checked as its replicas, in the order
one process holding every expert lists them; the groups' squared norms kept apart."""

import pytest

from lrcheck.checks.commands import check_replicas
from lrcheck.record.experts import Split, model_order, split_of
from lrcheck.record.folder import merge
from lrcheck.record.groups import group_of

RANK0 = ["embed.weight", "moe.router.weight", "moe.experts.0.w", "moe.experts.1.w", "head.weight"]
RANK1 = ["embed.weight", "moe.router.weight", "moe.experts.2.w", "moe.experts.3.w", "head.weight"]
ONE = ["embed.weight", "moe.router.weight", "moe.experts.0.w", "moe.experts.1.w",
       "moe.experts.2.w", "moe.experts.3.w", "head.weight"]


def _line(prints, squares):
    return {"step": 0, "samples_seen": 8, "lr": [0.1], "fingerprint":
            [v for row in prints for v in row], "grad_sq": sum(squares), "grad_sqs": squares}


def _layouts(*names):
    return [{"feeds": True, "names": list(n)} for n in names]


def test_ranks_holding_different_names_are_split_and_nothing_else_is():
    assert split_of(_layouts(RANK0, RANK1)) == [RANK0, RANK1]
    assert split_of(_layouts(RANK0, RANK0)) is None  # DDP: every name on every rank
    assert split_of([*_layouts(RANK0), None]) is None
    assert split_of(_layouts(RANK0)) is None
    staged = [{"stage": [s, 2], "names": n, "feeds": s == 0} for s, n in ((0, RANK0), (1, RANK1))]
    assert split_of(staged) is None  # pipeline stages: record.staged's
    assert split_of([{**f, "meshes": []} for f in _layouts(RANK0, RANK1)]) is None
    assert split_of(_layouts(["a", "b"], ["c", "d"])) is None  # nothing in common


def test_each_ranks_own_names_follow_the_lower_ranks_where_one_process_lists_them():
    assert model_order([RANK0, RANK1]) == ONE
    assert model_order([["a", "b"], ["c", "a"]]) == ["c", "a", "b"]
    assert model_order([["a", "b"], ["a", "c"], ["d", "a"]]) == ["d", "a", "b", "c"]


def test_groups_are_the_experts_the_router_and_the_rest():
    assert group_of("moe.experts.2.w", 1, 2) == "experts"
    assert group_of("block_sparse_moe.gate.weight", 2, 2) == "router"
    assert group_of("mlp.gate_proj.weight", 2, 2) == "rest"
    assert Split.of([RANK0, RANK1]).groups() == {"experts": [2, 3, 4, 5], "router": [1],
                                                 "rest": [0, 6]}


def test_ep_2_merges_each_name_once_and_checks_the_replicas():
    shared = [(1.0, 1.0), (2.0, 2.0)]
    prints = [[*shared, (10.0, 3.0), (11.0, 3.0), (5.0, 4.0)],
              [*shared, (12.0, 3.0), (13.0, 3.0), (5.0, 4.0)]]
    squares = [[1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 6.0, 7.0, 5.0]]
    per_rank = [[_line(p, q)] for p, q in zip(prints, squares, strict=True)]
    records, gaps = merge(per_rank, False, False, _layouts(RANK0, RANK1))
    record = records[0]
    assert record["fingerprint"] == [1.0, 1.0, 2.0, 2.0, 10.0, 3.0, 11.0, 3.0, 12.0, 3.0,
                                     13.0, 3.0, 5.0, 4.0]
    assert record["grad_sq"] == 1 + 2 + 3 + 4 + 6 + 7 + 5
    assert record["grad_sqs"] == [1.0, 2.0, 3.0, 4.0, 6.0, 7.0, 5.0]  # each name once, no rank's
    assert record["grad_sq_groups"] == {"experts": 20.0, "router": 2.0, "rest": 6.0}
    assert record["group_tensors"]["experts"] == [2, 3, 4, 5] and record["expert_ranks"] == 2
    assert gaps is not None and [g.row for g in gaps] == [(0.0, 0, 1, 0)]
    assert check_replicas("candidate", [g.row for g in gaps], 2, 1e-6).status == "pass"


def test_a_replica_that_parts_is_named_with_its_owner():
    prints = [[(1.0, 1.0), (2.0, 2.0), (10.0, 3.0), (11.0, 3.0), (5.0, 4.0)],
              [(1.0, 1.0), (2.5, 2.0), (12.0, 3.0), (13.0, 3.0), (5.0, 4.0)]]
    per_rank = [[_line(p, [1.0] * 5)] for p in prints]
    _, gaps = merge(per_rank, False, False, _layouts(RANK0, RANK1))
    assert gaps is not None and gaps[0].row == (pytest.approx(0.5 / 4.0), 0, 1, 0)
    check = check_replicas("candidate", [g.row for g in gaps], 2, 1e-6)
    assert check.status == "fail" and "rank 1's parameters part from rank 0's" in check.detail


def test_names_alike_on_every_rank_merge_as_ddp_did():
    prints = [[(1.0, 1.0), (2.0, 2.0)], [(1.0, 1.0), (2.0, 2.0)]]
    per_rank = [[_line(p, [1.0, 2.0])] for p in prints]
    names = ["a", "b"]
    with_names = merge(per_rank, False, False, _layouts(names, names))
    assert with_names == merge(per_rank, False, False, [None, None])
    assert "group_tensors" not in with_names[0][0]


def test_the_routers_terms_are_the_ranks_sum_over_the_ranks_squared_else_dropped():
    # each rank's own tokens' rows; the replicated router's gradient is the ranks' mean
    lines = [{**_line([(1.0, 1.0)], [1.0]), "router_terms": {"routing": 4.0, "auxiliary": 1.0}},
             {**_line([(1.0, 1.0)], [1.0]), "router_terms": {"routing": 8.0, "auxiliary": 3.0}}]
    split = Split.of([["router.w", "experts.0.w"], ["router.w", "experts.1.w"]])
    merged, _ = split.merge(lines)
    assert merged["router_terms"] == {"routing": 3.0, "auxiliary": 1.0}
    lines[1]["router_terms"] = {"routing": 8.0}  # not the same terms: rank 0's not kept
    assert split.merge(lines)[0]["router_terms"] is None
    assert "router_terms" not in split.merge([_line([(1.0, 1.0)], [1.0])] * 2)[0]
