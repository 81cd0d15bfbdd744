"""The files between launched workers and the parent."""

from __future__ import annotations

import os

import numpy as np

from lrcheck.environment import Environment
from lrcheck.plan.judging import Step
from lrcheck.plan.steps import plan_steps, schedule_context
from lrcheck.runner.ranks import handoff
from lrcheck.spec import RunSpec
from lrcheck.trace import EpochMetrics, Resumed, RunTrace, SkippedStep, UpdateRecord


def _trace() -> RunTrace:
    spec = RunSpec(bs=8, accum=2, world=2, task="wine")
    updates = [UpdateRecord(k, (0.1 * k, 0.2), 1.5 - k, 32 * (k + 1), k, 0) for k in range(3)]
    trace = RunTrace(spec, updates, [EpochMetrics(0, 2, 0.75, 0.7)],
                     np.arange(12, dtype=np.float64).reshape(3, 4), 3,
                     schedule_context(plan_steps(96, 8, 2, 2, 1, "drop"), "per-update", 0.1),
                     ("Dropout",), None, 1.25)
    trace.warnings = ("UserWarning: something",)
    trace.resumed = Resumed(update=1, micro_batches_done=2, checkpoint_bytes=1024)
    trace.skipped = [SkippedStep(update=2, scheduler_steps=0)]
    trace.wall_seconds = 3.5
    return trace


def test_a_trace_and_its_typed_fields_survive_the_hand_off_files(tmp_path):
    trace = _trace()
    handoff.write_trace(tmp_path, trace, "candidate")
    assert handoff.read_trace(tmp_path, "reference") is None  # each run has its own files
    back = handoff.read_trace(tmp_path, "candidate")
    assert back.to_dict() == trace.to_dict()
    assert back.spec == trace.spec and back.context == trace.context  # a ScheduleContext again
    np.testing.assert_array_equal(back.params, trace.params)
    assert back.params.dtype == np.float64


def test_no_trace_is_none(tmp_path):
    assert handoff.read_trace(tmp_path, "candidate") is None


def test_spec_round_trip(tmp_path):
    spec = RunSpec(bs=4, accum=3, world=3, policy="per-micro-batch")
    handoff.write_spec(tmp_path, spec, "candidate")
    alone = (Step("candidate"),)
    assert handoff.read_spec(tmp_path) == handoff.JobSpec(spec, "candidate", None, alone)
    reference = RunSpec(bs=24, accum=1, world=1)
    order = (Step("reference", keep_states=True), Step("candidate", lockstep=True))
    handoff.write_spec(tmp_path, spec, "candidate", reference, order)
    assert handoff.read_spec(tmp_path) == handoff.JobSpec(spec, "candidate", reference, order)


def test_line_reader_returns_only_complete_new_lines(tmp_path):
    reader = handoff.LineReader(tmp_path)
    assert reader.new() == []
    record = _trace().updates[1]
    handoff.append_line(tmp_path, handoff.started_line("candidate"))
    handoff.append_line(tmp_path, handoff.update_line(record, 9, "reference"))
    with open(tmp_path / handoff.UPDATES, "a") as f:
        f.write('{"event": "upd')  # a line still being written
    lines = reader.new()
    assert [line["event"] for line in lines] == ["started", "update"]
    assert UpdateRecord.from_dict(lines[1]["update"]) == record and lines[1]["total"] == 9
    assert lines[1]["role"] == "reference"
    assert reader.new() == []
    with open(tmp_path / handoff.UPDATES, "a") as f:
        f.write('ate", "n": 1}\n')
    assert reader.new() == [{"event": "update", "n": 1}]


def test_errors_first_written_first_and_on_one_line(tmp_path):
    handoff.write_error(tmp_path, 1, "InjectedFault: boom\n  second line", "candidate")
    handoff.write_error(tmp_path, 0, "--resume-at 99: the run has 20 updates", "reference",
                        bad_input=True)
    first = (tmp_path / "rank1.error").stat().st_mtime_ns
    os.utime(tmp_path / "rank0.error", ns=(first + 10**9, first + 10**9))
    assert handoff.read_errors(tmp_path) == [
        handoff.RankError(1, "InjectedFault: boom second line", "candidate"),
        handoff.RankError(0, "--resume-at 99: the run has 20 updates", "reference",
                          bad_input=True),
    ]


def test_environment_round_trip(tmp_path):
    assert handoff.read_environment(tmp_path) is None
    written = Environment(lrcheck="0.1.0", torch="2.13.0", device="cpu", world_size=2,
                          frameworks={"transformers": "5.24.0"})
    handoff.write_environment(tmp_path, written)
    assert handoff.read_environment(tmp_path) == written
