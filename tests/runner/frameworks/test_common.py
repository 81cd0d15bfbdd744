"""The scaffold every framework run shares (``runner/frameworks/common.py``) and the settings
that reach Accelerate, without training anything."""

import os

import pytest

from lrcheck.errors import RunError, SpecError
from lrcheck.experiments.cache import load_data
from lrcheck.plan.order import global_batches
from lrcheck.runner.frameworks.accelerate import _same_batch_counts, batch_counts
from lrcheck.runner.frameworks.common import FrameworkRun, alone
from lrcheck.spec import RunSpec, resolve


def test_a_run_starts_with_its_plan_context_recording_and_order():
    spec = RunSpec(framework="accelerate", bs=16, accum=2, epochs=2)  # tail "drop"
    data = load_data(spec.task, spec.seed, spec.samples)
    run = FrameworkRun.start(spec, data, device="cpu", on_update=None)
    assert run.plan.total_updates == len(run.batches) == 88  # digits: 44 windows of 32 an epoch
    assert run.ctx.total_updates == 88 and run.ctx.accum_steps == 2
    assert run.recording.plan is run.plan
    assert run.order(dealt=False).lengths == [44 * 32, 44 * 32]
    item = run.dataset()[5]
    assert int(item["ids"]) == 5 and item["x"].dtype == run.recording.dtype


def test_the_processes_a_framework_found_are_checked_against_the_plan():
    spec, _ = resolve(RunSpec(framework="lightning", bs=8, accum=2))
    run = FrameworkRun.start(spec, load_data(spec.task, spec.seed, spec.samples), device="cpu",
                             on_update=None)
    run.check_processes("Lightning", 1, 0, 0)
    with pytest.raises(RunError, match="Accelerate sees process 0 of 2, lrcheck planned rank 0 "
                                       "of 1"):
        run.check_processes("Accelerate", 2, 0, 0)


def test_a_run_of_world_1_does_not_see_torchrun(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with alone(1):
        assert "WORLD_SIZE" not in os.environ and "RANK" not in os.environ
    assert os.environ["WORLD_SIZE"] == "2"
    with alone(2):
        assert os.environ["WORLD_SIZE"] == "2"


def test_no_even_batches_applies_to_accelerate():
    assert not RunSpec(framework="accelerate", even_batches=False).even_batches
    with pytest.raises(SpecError, match="--no-even-batches applies to --framework "
                                        "accelerate or transformers, not lightning"):
        RunSpec(framework="lightning", even_batches=False)


def test_uneven_batches_without_even_batches_are_refused_before_training():
    # 1437 = 44·32 + 29, flush, bs 2 on 2 processes: 719 batches, 360 and 359.
    spec = RunSpec(framework="accelerate", world=2, bs=2, accum=8, tail="flush", epochs=1,
                   even_batches=False)
    batches = list(global_batches(1437, spec.effective_batch, 1, spec.seed, "flush"))
    assert batch_counts(spec, batches) == [[360, 359]]
    with pytest.raises(RunError, match="gives the processes 360, 359 batches of 2"):
        _same_batch_counts(spec, batches)
    even = spec.replace(bs=8, accum=2)  # 29 = 8 + 8 + 8 + 5: 180 batches, 90 each
    assert batch_counts(even, batches) == [[90, 90]]
    _same_batch_counts(even, batches)
