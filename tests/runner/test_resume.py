"""A checkpoint holds the loop's explicit LoopPosition and gives it back into freshly built
parts."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from lrcheck.experiments.cache import load_data  # noqa: E402
from lrcheck.plan.steps import plan_steps, schedule_context  # noqa: E402
from lrcheck.runner import resume  # noqa: E402
from lrcheck.runner.build import build  # noqa: E402
from lrcheck.runner.resume import LoopPosition, OpenWindow, Pause, resume_point  # noqa: E402
from lrcheck.spec import RunSpec  # noqa: E402

SPEC = RunSpec(task="wine", bs=8, accum=2, epochs=2, device="cpu")


def _parts():
    data = load_data(SPEC.task, SPEC.seed, SPEC.samples)
    plan = plan_steps(len(data.y_train), SPEC.bs, SPEC.accum, SPEC.world, SPEC.epochs, SPEC.tail)
    return build(SPEC, data, schedule_context(plan, SPEC.policy, SPEC.warmup), "cpu"), plan


@pytest.mark.parametrize("inside", [False, True])
def test_save_then_load_gives_back_the_progress_and_the_window(tmp_path, inside):
    parts, _ = _parts()
    window = None
    if inside:
        for p in parts.net.parameters():
            p.grad = torch.full_like(p, 0.25)
        window = OpenWindow(1, torch.tensor(0.75, dtype=torch.float64), steps_before=6)
    progress = LoopPosition(update=7, samples_seen=112, scheduler_steps=7 + inside, window=window)
    path = resume.save(tmp_path, parts, progress, rank=0)

    fresh, _ = _parts()
    loaded = resume.load(path, fresh, "cpu")
    assert (loaded.update, loaded.samples_seen, loaded.scheduler_steps, loaded.micro_done) == (
        7, 112, 7 + inside, 1 if inside else 0)
    if inside:
        assert loaded.window is not None and float(loaded.window.loss_sum) == 0.75
        assert loaded.window.steps_before == 6
        assert all(torch.equal(p.grad, torch.full_like(p, 0.25))
                   for p in fresh.net.parameters())
    else:
        assert loaded.window is None


def test_resume_points_name_the_update_and_the_micro_batch():
    _, plan = _parts()  # 142 samples, E 16: 8 updates an epoch, 2 micro-batches each
    assert resume_point(SPEC, plan) is None
    assert resume_point(RunSpec(**{**SPEC.to_dict(), "resume_at": 3}), plan) == Pause(3)
    assert resume_point(RunSpec(**{**SPEC.to_dict(), "resume_at_micro": 6}), plan) == Pause(3, 0)
    assert resume_point(RunSpec(**{**SPEC.to_dict(), "resume_at_micro": 7}), plan) == Pause(3)
