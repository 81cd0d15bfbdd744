"""Each built-in schedule's LR at update 0, warmup-1, warmup and the last update, against its
closed form written out here independently of the implementation."""

import math

import pytest
import torch

from lrcheck.errors import SpecError
from lrcheck.experiments.schedulers import SCHEDULERS, load_factory, make_scheduler
from lrcheck.plan.steps import ScheduleContext

LR, T, W = 0.1, 40, 8
D = T - W


def ctx(total=T, warmup=W) -> ScheduleContext:
    return ScheduleContext(micro_batches_per_epoch=total, epochs=1, accum_steps=1, world_size=1,
                           micro_batch_size=1, num_samples=total, updates_per_epoch=total,
                           total_updates=total, total_steps=total, warmup_steps=warmup)


def lr_trace(name: str, context: ScheduleContext) -> list[float]:
    param = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    optimizer = torch.optim.SGD([param], lr=LR, momentum=0.9)
    scheduler = make_scheduler(name, optimizer, context)
    out = []
    for _ in range(context.total_steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


def main_factor(name: str, s: int) -> float:
    if name == "constant":
        return 1.0
    if name == "linear":
        return 1 - s / D
    if name == "cosine":
        return 0.5 * (1 + math.cos(math.pi * s / D))
    if name == "cosine-restarts":
        t0 = math.ceil(D / 3)
        return 0.5 * (1 + math.cos(math.pi * (s % t0) / t0))
    if name == "polynomial":
        return (1 - s / D) ** 2
    if name == "inverse-sqrt":
        return 1 / math.sqrt(1 + s)
    if name == "wsd":
        decay = max(1, round(0.2 * D))
        return 1.0 if s < D - decay else (D - s) / decay
    if name == "step":
        return 0.5 ** (s // math.ceil(D / 4))
    if name == "exponential":
        return 0.01 ** (s / D)
    raise AssertionError(name)


def expected(name: str, k: int) -> float:
    if name == "onecycle":
        initial, peak = LR / 25, LR
        final = initial / 1e4
        if k <= W - 1:
            return initial + (peak - initial) * 0.5 * (1 - math.cos(math.pi * k / (W - 1)))
        frac = (k - (W - 1)) / (T - 1 - (W - 1))
        return final + (peak - final) * 0.5 * (1 + math.cos(math.pi * frac))
    if k < W:
        return LR * k / W
    return LR * main_factor(name, k - W)


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_builtin_values_at_the_landmarks(name):
    trace = lr_trace(name, ctx())
    for k in (0, W - 1, W, T - 1):
        assert trace[k] == pytest.approx(expected(name, k), rel=1e-9, abs=1e-15), (
            f"{name} at update {k}: expected {expected(name, k)!r}, got {trace[k]!r}")


@pytest.mark.parametrize("name", [n for n in SCHEDULERS if n != "onecycle"])
def test_without_warmup_update_0_uses_the_base_lr(name):
    assert lr_trace(name, ctx(warmup=0))[0] == pytest.approx(LR)


def test_user_factory_from_a_file_and_from_a_module(schedules_file):
    assert callable(load_factory(f"{schedules_file}:correct"))
    assert callable(load_factory("tests.fixtures.schedules:correct"))


def test_user_factory_errors_name_the_problem(schedules_file):
    with pytest.raises(SpecError, match="cannot import 'no_such_module_xyz'"):
        load_factory("no_such_module_xyz:make")
    with pytest.raises(SpecError, match="no file"):
        load_factory("missing/file.py:make")
    with pytest.raises(SpecError, match="has no callable 'nope'"):
        load_factory(f"{schedules_file}:nope")
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.1)
    with pytest.raises(SpecError, match="returned int, not a torch.optim.lr_scheduler"):
        make_scheduler(f"{schedules_file}:not_a_scheduler", opt, ctx())
    with pytest.raises(SpecError, match="raised RuntimeError: no schedule today"):
        make_scheduler(f"{schedules_file}:raises", opt, ctx())


def onecycle_steps_through(total: int, warmup: int) -> bool:
    """Whether OneCycleLR, as built for (total, warmup), really survives every step of a run."""
    try:
        lr_trace("onecycle", ctx(total, warmup))
    except (ZeroDivisionError, SpecError):  # SpecError: raised while it was being made
        return False
    return True


@pytest.mark.parametrize("total", [2, 3, 4, 5, 12, 44, 100])
def test_onecycle_fits_says_exactly_when_onecycle_can_step_through_the_run(total):
    why_not = SCHEDULERS["onecycle"].why_not
    for warmup in range(total + 1):
        steps_through = onecycle_steps_through(total, warmup)
        assert (why_not(ctx(total, warmup)) is None) == steps_through, warmup


def test_a_warmup_that_leaves_onecycle_no_room_names_the_largest_that_works():
    from lrcheck.experiments.schedulers import check_warmup

    def context(warmup: float) -> ScheduleContext:
        return ctx(44, round(warmup * 44))

    with pytest.raises(SpecError) as info:
        check_warmup("onecycle", 0.99, context)
    message = str(info.value)
    assert message.startswith("--warmup 0.99 ")
    assert "the largest --warmup that works here is 0.988" in message
    assert SCHEDULERS["onecycle"].why_not(context(0.988)) is None
    assert SCHEDULERS["onecycle"].why_not(context(0.989)) is not None
    check_warmup("onecycle", 0.5, context)  # room enough: no error
    check_warmup("cosine", 0.99, context)  # the others clamp their lengths themselves


def test_a_factory_whose_scheduler_drives_another_optimizer_is_refused(tmp_path):
    path = tmp_path / "elsewhere.py"
    path.write_text(
        "import torch\n"
        "from torch.optim.lr_scheduler import LinearLR\n\n"
        "def make(optimizer, ctx):\n"
        "    other = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)\n"
        "    return LinearLR(other, start_factor=1.0, end_factor=0.0,\n"
        "                    total_iters=ctx.total_steps)\n")
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.1)
    with pytest.raises(SpecError) as info:
        make_scheduler(f"{path}:make", opt, ctx())
    message = str(info.value)
    assert message.startswith(f"--scheduler '{path}:make': make(optimizer, ctx) returned a "
                              "LinearLR on SGD at 0x")
    assert f"not the optimizer it was passed (SGD at {id(opt):#x}, 1 param group)" in message
    assert "\n" not in message
    # The same factory on the optimizer it is given is fine.
    path.write_text(path.read_text().replace("LinearLR(other", "LinearLR(optimizer"))
    assert make_scheduler(f"{path}:make", opt, ctx()).optimizer is opt
