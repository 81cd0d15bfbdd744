"""The one Recording every loop uses, driven by hand as an adapter would drive it."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from lrcheck.experiments.cache import load_data  # noqa: E402
from lrcheck.plan.steps import plan_steps, schedule_context  # noqa: E402
from lrcheck.runner.build import build  # noqa: E402
from lrcheck.runner.recording import Recording  # noqa: E402
from lrcheck.spec import RunSpec  # noqa: E402

SPEC = RunSpec(task="wine", bs=16, accum=2, epochs=1, device="cpu")  # 142 samples: 4 updates


def _recording(on_update=None):
    data = load_data(SPEC.task, SPEC.seed, SPEC.samples)
    plan = plan_steps(len(data.y_train), SPEC.bs, SPEC.accum, SPEC.world, SPEC.epochs, SPEC.tail)
    ctx = schedule_context(plan, SPEC.policy, SPEC.warmup)
    parts = build(SPEC, data, ctx, "cpu")
    recording = Recording(SPEC, plan, ctx, data, device="cpu", on_update=on_update)
    recording.attach(parts.net)
    return recording, parts


def _flat(net):
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy().copy()


def test_an_update_records_the_lr_read_before_the_step_and_the_parameters_after_it():
    seen = []
    recording, parts = _recording(lambda record, total: seen.append((record.step, total)))
    assert recording.plan.total_updates == 4
    after = []
    for step in range(2):
        parts.optimizer.param_groups[0]["lr"] = 0.1 * (step + 1)
        recording.before_step(parts.optimizer, scheduler_steps=step)
        parts.optimizer.param_groups[0]["lr"] = 99.0  # changed after the read: not recorded
        for p in parts.net.parameters():
            p.data.add_(1.0)
        after.append(_flat(parts.net))
        recording.update(step, torch.tensor(0.5, dtype=torch.float64), 32 * (step + 1), 0)
    trace = recording.finish()
    assert [u.lr[0] for u in trace.updates] == [0.1, 0.2]
    assert [(u.scheduler_steps, u.samples_seen, u.loss) for u in trace.updates] == [
        (0, 32, 0.5), (1, 64, 0.5)]
    assert np.array_equal(trace.params, np.stack(after))
    assert seen == [(0, 4), (1, 4)]
    assert trace.planned_updates == 4 and trace.stopped is None


def test_updates_past_the_plan_are_kept_too():
    recording, parts = _recording()
    for step in range(6):  # a framework that ran past lrcheck's 4 planned updates
        recording.before_step(parts.optimizer, step)
        for p in parts.net.parameters():
            p.data.fill_(float(step))
        recording.update(step, 0.0, 0, 0)
    trace = recording.finish()
    assert trace.params.shape[0] == 6
    assert [row[0] for row in trace.params] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_scheduler_that_raises_stops_the_run_with_the_reason():
    recording, _ = _recording()

    class Refuses:
        def step(self):
            raise ValueError("Tried to step 5 times")

    assert recording.step_scheduler(Refuses(), update=3) is False
    assert recording.finish().stopped == ("scheduler.step() raised ValueError at update 3: "
                                          "Tried to step 5 times")
