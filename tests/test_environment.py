"""result.json's ``environment`` as a typed record: the keys in their order, what a report does
not know left out, and a record read back as written."""

from __future__ import annotations

import json

import pytest

from lrcheck.environment import Environment

FULL = Environment(lrcheck="0.1.0", torch="2.13.0+cpu", device="cpu", world_size=2,
                   python="3.11.7", platform="Linux", threads=1,
                   frameworks={"transformers": "5.24.0"}, noise_floor="a twin ...",
                   launch={"reference": "in-process", "candidate": "in-process"},
                   deterministic={"CUBLAS_WORKSPACE_CONFIG": "not applicable: no CUDA",
                                  "torch.use_deterministic_algorithms": True})


def test_the_keys_keep_result_json_s_order():
    assert list(FULL.to_dict()) == ["lrcheck", "torch", "device", "world_size", "python",
                                    "platform", "threads", "transformers", "noise_floor",
                                    "launch", "deterministic"]


def test_what_a_diff_does_not_know_is_left_out():
    assert Environment(lrcheck="0.1.0", device="none").to_dict() == {"lrcheck": "0.1.0",
                                                                      "device": "none"}


def test_a_record_reads_back_as_written():
    assert Environment.from_dict(json.loads(json.dumps(FULL.to_dict()))) == FULL


@pytest.mark.parametrize(("data", "match"), [
    ({"device": "cpu"}, "lrcheck is None, not a string"),
    ({"lrcheck": "0.1.0", "device": "cpu", "threads": "2"}, "threads is '2', not a whole"),
    ({"lrcheck": "0.1.0", "device": "cpu", "launch": "x"}, "launch is 'x', not an object"),
    ({"lrcheck": "0.1.0", "device": "cpu", "deterministic": True},
     "deterministic is True, not an object"),
])
def test_a_malformed_record_is_refused(data, match):
    with pytest.raises(ValueError, match=match):
        Environment.from_dict(data)
