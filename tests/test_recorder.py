import json
import math
import subprocess
import sys

import pytest

from lrcheck.errors import SpecError
from lrcheck.recorder import Recorder, read_records
from tests.helpers import HANG_S


class FakeOptimizer:
    def __init__(self, *lrs):
        self.param_groups = [{"lr": lr} for lr in lrs]


def test_one_line_per_update_with_cumulative_samples(tmp_path):
    path = tmp_path / "run.jsonl"
    with Recorder(path) as rec:
        rec.record(FakeOptimizer(0.1, 0.1), samples=32, loss=2.5)
        rec.record(FakeOptimizer(0.05, 0.05), samples=32, loss=1.5)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines == [{"step": 0, "samples_seen": 32, "lr": [0.1, 0.1], "loss": 2.5},
                     {"step": 1, "samples_seen": 64, "lr": [0.05, 0.05], "loss": 1.5}]


def test_append_continues_the_counters_and_disabled_writes_nothing(tmp_path):
    path = tmp_path / "run.jsonl"
    with Recorder(path) as rec:
        rec.record(FakeOptimizer(0.1), samples=16)
    with Recorder(path, append=True) as rec:
        rec.record(FakeOptimizer(0.2), samples=16)
    assert [(r["step"], r["samples_seen"]) for r in read_records(path)] == [(0, 16), (1, 32)]
    Recorder(tmp_path / "other.jsonl", enabled=False).record(FakeOptimizer(0.1), samples=1)
    assert not (tmp_path / "other.jsonl").exists()


def test_importable_without_torch():
    code = "import sys, lrcheck; lrcheck.Recorder; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=HANG_S)
    assert done.stdout.strip() == "False", done.stderr


def test_the_cadence_is_read_back_a_max_norm_of_infinity_included(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"step": 0, "samples_seen": 8, "lr": [0.1], "backward": 4,
                                "reached": 4, "zero_grad": 1, "clip_grad_norm": 1,
                                "max_norm": "Infinity", "clip_norm": 2.5, "opt_step": 1.0,
                                "ema_update": 1, "unknown": 3}) + "\n")
    (record,) = read_records(path)
    assert record["backward"] == 4 and record["max_norm"] == math.inf
    assert record["clip_norm"] == 2.5 and record["opt_step"] == 1.0 and "unknown" not in record


@pytest.mark.parametrize("line,needle", [
    ("not json", "not JSON"),
    ('{"step": 0, "lr": [0.1]}', "needs the keys step, samples_seen, lr"),
    ('{"step": 0, "samples_seen": 8, "lr": "high"}', "'lr' must be a number or a list"),
    ('{"step": -1, "samples_seen": 8, "lr": [0.1]}', "'step' must be a whole number"),
    ('{"step": 0, "samples_seen": 8, "lr": [0.1], "loss": "x"}', "'loss' must be a number"),
    ('{"step": 1, "samples_seen": 16, "lr": [0.1], "backward": 1.5}',
     "'backward' must be a whole number >= 0"),
    ('{"step": 1, "samples_seen": 16, "lr": [0.1], "zero_grad": -1}',
     "'zero_grad' must be a whole number >= 0"),
    ('{"step": 1, "samples_seen": 16, "lr": [0.1], "max_norm": "big"}',
     "'max_norm' must be a number"),
    ('{"step": 1, "samples_seen": 16, "lr": [0.1], "opt_step": -2}',
     "'opt_step' must be a number >= 0"),
])
def test_malformed_lines_name_the_file_and_line(tmp_path, line, needle):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"step": 0, "samples_seen": 8, "lr": [0.1], "loss": 1.0}\n' + line + "\n")
    with pytest.raises(SpecError) as info:
        read_records(path)
    assert f"{path}:2" in str(info.value) and needle in str(info.value)


@pytest.mark.parametrize("samples", [0, -1, 2.5, "32", True])
def test_a_bad_samples_count_is_refused_at_once_and_writes_nothing(tmp_path, samples):
    path = tmp_path / "run.jsonl"
    with Recorder(path) as rec:
        rec.record(FakeOptimizer(0.1), samples=32)
        with pytest.raises(SpecError, match=r"samples must be a whole number >= 1, got"):
            rec.record(FakeOptimizer(0.1), samples=samples)
    assert [r["samples_seen"] for r in read_records(path)] == [32]


def test_samples_may_be_any_integer_type(tmp_path):
    import numpy as np

    path = tmp_path / "run.jsonl"
    with Recorder(path) as rec:
        rec.record(FakeOptimizer(0.1), samples=np.int64(16))
    assert read_records(path)[0]["samples_seen"] == 16


def test_a_file_that_is_not_utf8_is_a_spec_error_naming_it(tmp_path):
    path = tmp_path / "binary.jsonl"
    path.write_bytes(b'{"step": 0}\n\xff\xfe\x00garbage\n')
    with pytest.raises(SpecError, match="not UTF-8 text") as info:
        read_records(path)
    assert str(path) in str(info.value) and ":2" in str(info.value)


def strict_json(line: str):
    """``json.loads`` refusing what is not JSON (Python's NaN, Infinity)."""
    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")
    return json.loads(line, parse_constant=refuse)


def test_a_loss_that_is_not_finite_is_written_as_json_and_read_back(tmp_path):
    path = tmp_path / "run.jsonl"
    with Recorder(path) as rec:
        for loss in (1.5, float("nan"), float("inf"), -float("inf"), None):
            rec.record(FakeOptimizer(0.1), samples=8, loss=loss)
    lines = [strict_json(line) for line in path.read_text().splitlines()]
    assert [line["loss"] for line in lines] == [1.5, "NaN", "Infinity", "-Infinity", None]
    losses = [r["loss"] for r in read_records(path)]
    assert losses[0] == 1.5 and math.isnan(losses[1]) and losses[4] is None
    assert losses[2:4] == [math.inf, -math.inf]


def test_two_runs_in_one_file_are_bad_input_naming_the_file_and_line(tmp_path):
    path = tmp_path / "both.jsonl"
    with Recorder(path) as rec:
        for _ in range(3):
            rec.record(FakeOptimizer(0.1), samples=8)
    first = path.read_text()
    path.write_text(first + first)  # a second run's lines after the first's
    with pytest.raises(SpecError) as info:
        read_records(path)
    message = str(info.value)
    assert message.startswith(f"{path}:4: 'samples_seen' goes back: 8 after 24 on line 3")
    assert "one run" in message
    path.write_text(first + first.splitlines()[-1] + "\n")
    with pytest.raises(SpecError, match=f"{path}:4: 'samples_seen' does not grow: 24 after 24"):
        read_records(path)


def test_record_with_a_model_writes_the_fingerprint_of_the_parameters_after_the_step(tmp_path):
    import torch

    from lrcheck.recorder import fingerprint

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    with Recorder(tmp_path / "r.jsonl") as rec:
        for _ in range(2):
            model(torch.ones(1, 3)).sum().backward()
            rec.record(optimizer, samples=4, model=model)
            optimizer.step()
            after = fingerprint(model.parameters())
            optimizer.zero_grad()
        rec.record(optimizer, samples=4, model=model)  # a step that never came: written at close
    records = read_records(tmp_path / "r.jsonl")
    assert len(records) == 3 and records[1]["fingerprint"] == after
    assert records[0]["fingerprint"] != records[1]["fingerprint"]


def test_a_lines_samples_are_packed_and_read_back_exactly(tmp_path):
    from lrcheck.recorder import pack_fed

    ids = [[2 ** 61 + 5, 0, 17], [3]]
    weights = [[0.25, 0.25, 0.25], [1 / 3]]
    packed = pack_fed(ids, weights)
    assert packed["fed_weights"] == [0.25, 1 / 3]  # one number where all are equal
    uneven = pack_fed([[1, 2]], [[0.1, 0.2]])
    assert isinstance(uneven["fed"][0], str) and isinstance(uneven["fed_weights"][0], str)
    path = tmp_path / "r.jsonl"
    lines = [{"step": 0, "samples_seen": 4, "lr": [0.1], "loss": None, **packed,
              "fed_why": "why", "fed_dtype": "float32"},
             {"step": 1, "samples_seen": 6, "lr": [0.1], "loss": None, **uneven,
              "fed_weights": [None]}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    first, second = read_records(path)
    assert first["fed"] == ids and first["fed_weights"] == weights
    assert first["fed_why"] == "why" and first["fed_dtype"] == "float32"
    assert second["fed"] == [[1, 2]] and second["fed_weights"] == [None]
    bad = {**lines[0], "fed_weights": [pack_fed([[1, 2]], [[0.1, 0.2]])["fed_weights"][0], None]}
    path.write_text(json.dumps(bad) + "\n")
    with pytest.raises(SpecError, match="one number per sample"):
        read_records(path)
    path.write_text(json.dumps({**lines[0], "fed": ["not base64!"]}) + "\n")
    with pytest.raises(SpecError, match="'fed' must hold"):
        read_records(path)
