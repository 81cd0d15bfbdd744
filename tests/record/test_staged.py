"""Pipeline stages stitched into the whole model (``record.staged``) on synthetic records:
each stage's tensors once, in stage order, a name two stages hold counted once; a stage's
second rank a replica; only stage 0 feeds rows (``record.folder.merge``)."""

import pytest

from lrcheck.checks.stages import check_stages
from lrcheck.record.folder import merge
from lrcheck.record.staged import names_of, stages_of, stitch


def _line(prints, squares, fed=None):
    return {"step": 0, "samples_seen": 1, "lr": [0.1], "fingerprint": prints,
            "grad_sq": sum(squares), "grad_sqs": squares, **({"fed": fed} if fed else {})}


def test_stages_are_read_only_where_every_rank_is_a_stage_of_several():
    assert stages_of([{"stage": [0, 2]}, {"stage": [1, 2]}]) == [0, 1]
    assert stages_of([{"stage": [0, 1]}, {"stage": [0, 1]}]) is None  # replicas of one stage
    assert stages_of([{"stage": [0, 2]}, None]) is None
    assert stages_of([{"stage": [0, 2]}]) is None
    assert names_of([{"stage": [0, 2], "names": ["a"]}, None]) == [["a"], None]


def test_dp_by_pp_stitches_each_stage_once_and_checks_its_replicas():
    lines = [_line([1.0, 2.0, 3.0, 4.0], [2.0, 1.0]), _line([5.0, 6.0], [3.0]),
             _line([1.0, 2.0, 3.5, 4.0], [2.0, 1.0]), _line([5.0, 6.0], [3.0])]
    out, gap = stitch([0, 1, 0, 1], lines)
    assert out["fingerprint"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert out["stage_tensors"] == [2, 1]
    assert out["grad_sq_stages"] == [3.0, 3.0] and out["grad_sq"] == 6.0
    assert gap == (pytest.approx(0.5 / 4.0), 2, 0)  # rank 2 parts from rank 0, its stage's first


def test_a_name_two_stages_hold_is_the_first_stage_s_and_counted_once():
    lines = [_line([1.0, 2.0, 3.0, 4.0], [2.0, 1.0]), _line([3.0, 4.0, 5.0, 6.0], [1.0, 3.0])]
    names = [["embed.weight", "layers.0.w"], ["embed.weight", "head.w"]]  # tied across stages
    out, gap = stitch([0, 1], lines, names)
    assert out["fingerprint"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] and gap is None
    assert out["stage_tensors"] == [2, 1] and out["grad_sq_stages"] == [3.0, 3.0]
    by_position, _ = stitch([0, 1], lines)  # names not described: every stage's all
    assert by_position["stage_tensors"] == [2, 2] and by_position["grad_sq"] == 7.0


def test_merge_feeds_stage_0_only_and_keeps_the_stitched_per_tensor_squares():
    layouts = [{"stage": [0, 2], "feeds": True}, {"stage": [1, 2], "feeds": False}]
    lines = [[_line([1.0, 2.0], [2.0], fed=[["a", "b"]])],
             [_line([5.0, 6.0], [3.0], fed=[["hidden"]])]]
    records, gaps = merge(lines, False, False, layouts)
    assert records[0]["fingerprint"] == [1.0, 2.0, 5.0, 6.0] and gaps is None
    assert [row[0] for row in records[0]["fed"]] == [0]  # rank 1's activations are not data
    assert records[0]["grad_sqs"] == [2.0, 3.0] and records[0]["grad_sq"] == 5.0  # no rank's


def test_a_stage_without_its_fingerprint_leaves_the_whole_model_s_absent():
    """Finding 11: stage 0's fingerprint and norm are a part of the model's, never the whole."""
    layouts = [{"stage": [0, 2], "feeds": True}, {"stage": [1, 2], "feeds": False}]
    lost = {k: v for k, v in _line([5.0, 6.0], [3.0]).items() if k != "fingerprint"}
    records, _ = merge([[_line([1.0, 2.0], [2.0])], [lost]], False, False, layouts)
    assert not {"fingerprint", "grad_sq", "grad_sqs"} & set(records[0])  # not stage 0's
    assert records[0]["unmerged"] == ("the ranks' parameter fingerprints and gradient norms "
                                      "could not be merged: rank 1 recorded no parameter "
                                      "fingerprints")
    no_squares = {k: v for k, v in _line([5.0, 6.0], [3.0]).items() if k != "grad_sqs"}
    records, _ = merge([[_line([1.0, 2.0], [2.0])], [no_squares]], False, False, layouts)
    assert records[0]["fingerprint"] == [1.0, 2.0, 5.0, 6.0] and "grad_sq" not in records[0]
    assert records[0]["unmerged"] == ("the ranks' gradient norms could not be merged: they do "
                                      "not fit together (not as many tensors on every rank)")


def _staged(names, paths=None):
    return [{"stage": [s, len(names)], "feeds": s == 0, "names": list(n),
             **({"paths": paths} if paths else {})} for s, n in enumerate(names)]


def test_stages_built_as_separate_modules_naming_parameters_alike_count_each():
    """Finding 6: stage 1's ``layers.0.weight`` is not stage 0's: a module of its own."""
    layouts = _staged([("layers.0.weight", "layers.0.bias")] * 2)
    per_rank = [[_line([1.0, 2.0, 3.0, 4.0], [2.0, 1.0]), _line([1.5, 2.0, 3.0, 4.0], [2.0, 1.0])],
                [_line([5.0, 6.0, 3.0, 4.0], [3.0, 4.0]), _line([5.5, 6.0, 3.5, 4.0], [3.0, 4.0])]]
    records, _ = merge(per_rank, False, False, layouts)
    assert records[0]["fingerprint"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 3.0, 4.0]
    assert records[0]["stage_tensors"] == [2, 2] and records[0]["grad_sq"] == 10.0
    assert records[1]["stage_tensors"] == [2, 2]  # every update alike: decided once
    told = records[0]["stage_names"]
    assert told.startswith("2 names (layers.0.weight, layers.0.bias) held by several stages "
                           "taken for parameters of each stage's own, counted in each "
                           "(layers.0.weight's fingerprints differ from update 0: the names are "
                           "the stage modules' own): the stages' modules do not say")


def test_a_weight_tied_across_stages_counts_once_and_what_was_taken_is_said():
    layouts = _staged([("embed.weight", "layers.0.w"), ("embed.weight", "head.w")])
    per_rank = [[_line([1.0, 2.0, 3.0, 4.0], [2.0, 1.0]), _line([1.5, 2.0, 3.5, 4.0], [2.0, 1.0])],
                [_line([1.0, 2.0, 5.0, 6.0], [2.0, 3.0]), _line([1.5, 2.0, 5.5, 6.0], [2.0, 3.0])]]
    records, _ = merge(per_rank, False, False, layouts)
    assert records[0]["fingerprint"] == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    assert records[0]["stage_tensors"] == [2, 1] and records[0]["grad_sq"] == 6.0
    assert records[0]["stage_names"].startswith(
        "1 name (embed.weight) held by several stages taken for weights tied across them, "
        "each counted once (the same fingerprint at each of the 2 updates fingerprinted)")
    # pipeline()'s stages keep the whole model's paths: a name two hold is one, nothing to say
    by_path, _ = merge([per_rank[0], [_line([9.0, 2.0, 5.0, 6.0], [2.0, 3.0])]], False, False,
                       _staged([("embed.weight", "layers.0.w"), ("embed.weight", "head.w")],
                               paths="model"))
    assert by_path[0]["stage_tensors"] == [2, 1] and "stage_names" not in by_path[0]


def test_a_tied_weight_beside_names_of_each_stage_s_own_is_decided_name_by_name():
    """Issue 42: separate stage modules name ``embed.weight`` and ``norm.weight`` alike; the
    embedding is tied across the first and the last stage (the same fingerprint at every
    update), each stage has a norm of its own (fingerprints differ): the embedding counted once,
    each norm in its stage, the stitched model the reference's 6 tensors."""
    layouts = _staged([("embed.weight", "layers.0.w", "norm.weight"),
                       ("layers.1.w", "norm.weight"), ("embed.weight", "norm.weight")])
    per_rank = [[_line([1.0, 2.0, 3.0, 4.0, 0.5, 1.0], [2.0, 1.0, 0.5]),
                 _line([1.5, 2.0, 3.5, 4.0, 0.5, 1.0], [2.0, 1.0, 0.5])],
                [_line([5.0, 6.0, 0.6, 1.0], [3.0, 0.25]),
                 _line([5.5, 6.0, 0.6, 1.0], [3.0, 0.25])],
                [_line([1.0, 2.0, 0.7, 1.0], [2.0, 0.125]),
                 _line([1.5, 2.0, 0.7, 1.0], [2.0, 0.125])]]
    records, _ = merge(per_rank, False, False, layouts)
    assert records[0]["fingerprint"] == [1.0, 2.0, 3.0, 4.0, 0.5, 1.0, 5.0, 6.0, 0.6, 1.0, 0.7, 1.0]
    assert records[1]["stage_tensors"] == [3, 2, 1] and records[1]["grad_sq"] == 6.875
    assert records[1]["grad_sq_stages"] == [3.5, 3.25, 0.125]
    told = records[0]["stage_names"]
    assert told.startswith("1 name (norm.weight) held by several stages taken for parameters of "
                           "each stage's own, counted in each (norm.weight's fingerprints differ "
                           "from update 0: the names are the stage modules' own); 1 name "
                           "(embed.weight) held by several stages taken for weights tied across "
                           "them, each counted once (the same fingerprint at each of the 2 "
                           "updates fingerprinted): the stages' modules do not say"), told
    reference = {"grad_sqs": [2.0, 1.0, 0.5, 3.0, 0.25, 0.125]}  # the one process's, in order
    check = check_stages(records, [reference] * 2, 1e-12)
    assert check is not None and check.status == "pass" and check.detail.endswith(told)
    # An update where one stage recorded no fingerprint tells nothing; an update where the
    # embedding's copies part makes it each stage's own from there.
    lost = {k: v for k, v in _line([1.0, 2.0, 0.7, 1.0], [2.0, 0.125]).items()
            if k != "fingerprint"}
    parted = [per_rank[0], per_rank[1], [lost, _line([1.25, 2.0, 0.7, 1.0], [2.0, 0.125])]]
    records, _ = merge(parted, False, False, layouts)
    assert records[1]["stage_tensors"] == [3, 2, 2]
    assert records[1]["stage_names"].startswith(
        "2 names (embed.weight, norm.weight) held by several stages taken for parameters of each "
        "stage's own, counted in each (embed.weight's fingerprints differ from update 1")
