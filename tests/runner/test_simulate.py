"""``lrcheck trace`` steps the schedule exactly as a real run does: the simulated LR trace, step
counts, stops and torch warnings equal what training records."""

from __future__ import annotations

import json

import numpy as np
import pytest

import lrcheck
from lrcheck.runner.simulate import simulate, simulate_one
from lrcheck.spec import RunSpec
from lrcheck.trace import MAX_STORED_UPDATES

CASES = [
    dict(policy="per-update", tail="drop", scheduler="cosine"),
    dict(policy="per-micro-batch", tail="flush", scheduler="cosine"),
    dict(policy="per-micro-batch", tail="drop", scheduler="onecycle"),  # stops: OneCycle refuses
    dict(policy="per-micro-batch-scaled", tail="carry", scheduler="wsd"),
    dict(policy="per-update", tail="flush", scheduler="step", optimizer="adamw"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c.values())))
def test_simulated_trace_equals_the_trained_one(case):
    report = lrcheck.compare(task="wine", bs=4, accum=3, epochs=2, **case)
    for trained in (report.reference, report.candidate):
        simulated = simulate_one(trained.spec.replace(samples=trained.context.num_samples),
                                 "candidate")
        got, want = simulated.lrs(), trained.lrs()
        assert got.shape == want.shape, f"updates: trained {want.shape}, simulated {got.shape}"
        assert np.array_equal(got, want), f"first difference at update " \
            f"{int(np.flatnonzero((got != want).any(axis=1))[0])}"
        for field in ("scheduler_steps", "samples_seen", "epoch"):
            assert [getattr(u, field) for u in simulated.updates] == \
                   [getattr(u, field) for u in trained.updates], field
        assert simulated.stopped == trained.stopped
        assert simulated.planned_updates == trained.planned_updates
        assert simulated.context == trained.context
        assert simulated.warnings == trained.warnings
    assert case["scheduler"] != "onecycle" or report.candidate.stopped


def test_a_long_trace_is_stored_thinned_with_a_digest_of_all_of_it():
    report = lrcheck.trace_schedule(task="synthetic", scheduler="linear", bs=4, accum=8,
                                    world=64, samples=20_000_000, epochs=1,
                                    policy="per-micro-batch")
    assert report.kind == "trace" and report.verdict == "fail"
    assert [c.status for c in report.checks] == ["pass", "skip", "skip", "fail", "skip", "skip",
                                                         "skip"]
    assert "≈8× too fast" in report.check("lr").detail
    data = json.loads(json.dumps(report.to_dict()))
    cand = data["runs"]["candidate"]
    assert cand["updates_stored"]["total"] == 9765
    assert cand["updates_stored"]["stored"] <= MAX_STORED_UPDATES + 5
    steps = [u["step"] for u in cand["updates"]]
    assert steps[0] == 0 and steps[-1] == 9764 and {0, 1, 2} <= set(steps)  # around update 0
    assert cand["lr_digest"].startswith("sha256:")
    assert cand["updates"][5]["lr"] == list(report.candidate.lrs()[steps[5]])


@pytest.mark.filterwarnings(r"ignore:Detected call of `lr_scheduler.step\(\)`")
def test_world_size_is_arithmetic_and_each_rank_steps_its_own_micro_batches():
    spec = RunSpec(task="synthetic", bs=4, accum=8, world=64, epochs=1, samples=2048 * 10,
                   policy="per-micro-batch")
    trace = simulate(spec)
    assert len(trace.updates) == 10
    assert trace.schedule is not None
    assert trace.schedule.scheduler_steps == 80  # accum per update on every rank, not accum·world
    assert trace.updates[3].samples_seen == 4 * 2048
