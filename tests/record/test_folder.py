"""``record.folder``: a record folder's ranks merged into one run."""

import json

import numpy as np
import pytest

from lrcheck.errors import SpecError
from lrcheck.record.folder import merge, read_folder


def _line(k, fp):
    return {"step": k, "samples_seen": k + 1, "lr": [0.1], "loss": None, "fingerprint": fp,
            "grad_sq": 1.0}


def test_shards_merge_by_summing_sums_and_maxing_peaks():
    ranks = [[_line(0, [1.0, 2.0, 3.0, 0.5])], [_line(0, [4.0, 1.0, -1.0, 0.7])]]
    merged, gap = merge(ranks, sharded=True)
    assert merged[0]["fingerprint"] == [5.0, 2.0, 2.0, 0.7]
    assert merged[0]["grad_sq"] == 2.0 and gap is None


def test_shards_of_unequal_shapes_merge_to_totals():
    ranks = [[_line(0, [1.0, 2.0])], [_line(0, [4.0, 1.0, -1.0, 3.0])]]
    merged, _ = merge(ranks, sharded=True)
    assert merged[0]["fingerprint"] == [4.0, 3.0]


def test_zero_partitions_merge_to_the_whole_model_even_on_one_rank():
    two = [[_line(0, [1.0, 2.0])], [_line(0, [4.0, 3.0])]]
    assert merge(two, sharded=True, partitioned=True)[0][0]["fingerprint"] == [5.0, 3.0]
    one = [[_line(0, [1.0, 2.0, -3.0, 0.5])]]
    assert merge(one, sharded=True, partitioned=True)[0][0]["fingerprint"] == [-2.0, 2.0]


def test_a_partitioned_run_is_compared_with_the_other_runs_whole_model(tmp_path):
    from lrcheck.record.sides import read_sides

    for name, fp, partitioned in (("ref", [1.0, 2.0, 3.0, 0.5], False),
                                  ("zero", [4.0, 2.0], True)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "rank0.jsonl").write_text(json.dumps(_line(0, fp)) + "\n")
        (tmp_path / name / "run.json").write_text(json.dumps({
            "kind": "lrcheck-record", "samples_per_update": None,
            "processes": [{"optimizers": [{"index": 0, "sharded": partitioned,
                                           "partitioned": partitioned}]}]}))
    ref, cand, _ = read_sides(tmp_path / "ref", tmp_path / "zero", 1e-4)
    assert ref.fingerprints[0].tolist() == cand.fingerprints[0].tolist() == [[4.0, 2.0]]


def test_replicas_are_checked_against_rank_0():
    ranks = [[_line(0, [1.0, 2.0])], [_line(0, [1.5, 2.0])]]
    merged, gap = merge(ranks, sharded=False)
    assert merged[0]["fingerprint"] == [1.0, 2.0]
    assert gap is not None and (gap.gap, gap.update, gap.rank) == (0.25, 0, 1)
    assert np.isclose(merge([ranks[0], ranks[0]], sharded=False)[1].gap, 0.0)


def test_a_folder_without_run_json_or_updates_is_bad_input(tmp_path):
    with pytest.raises(SpecError, match="not a record folder"):
        read_folder(tmp_path)
    (tmp_path / "run.json").write_text(json.dumps({"kind": "lrcheck-record",
                                                   "ended": "exit code 0"}))
    with pytest.raises(SpecError, match=r"the command \(exit code 0\) made no optimizer update"):
        read_folder(tmp_path)
