"""Learning-rate schedules: built-ins on ``torch.optim.lr_scheduler``, and users' own factories.

Every schedule is made as ``make(optimizer, ctx)`` with ``ctx`` a ``ScheduleContext``; built-ins
read only ``ctx.total_steps`` and ``ctx.warmup_steps``, the policy's own unit. With ``W`` warmup
steps the factor at step ``k < W`` is ``k / W`` (Transformers' convention: the first update runs
at LR 0), then the main schedule runs over the remaining ``D = total - W`` steps
(``SequentialLR``). A warmup that is a function of ``k / W`` alone keeps a schedule stepped ``n``
times as often over an ``n`` times longer length equal at every update, which is what
Accelerate's multi-process convention relies on.

The registry is data, importable without torch.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from lrcheck.errors import SpecError

if TYPE_CHECKING:
    from torch.optim import Optimizer
    from torch.optim.lr_scheduler import LRScheduler

    from lrcheck.plan.steps import ScheduleContext

# A factory is the user's code: what it returns is checked (``make_scheduler``).
Factory = Callable[["Optimizer", "ScheduleContext"], object]

RESTART_CYCLES = 3
STEP_DECAYS = 3
STEP_GAMMA = 0.5
EXPONENTIAL_FINAL = 0.01
POLYNOMIAL_POWER = 2.0
WSD_DECAY_FRACTION = 0.2


@dataclass(frozen=True)
class Scheduler:
    """A built-in schedule. ``why_not(ctx)``, where given, says why the schedule cannot run a
    whole run of ``ctx`` (None when it can), so that ``check_warmup`` refuses it before
    anything trains."""

    name: str
    description: str
    # (optimizer, steps of the main schedule); with ``own_warmup``, (optimizer, ctx).
    main: Callable[..., LRScheduler]
    own_warmup: bool = False
    why_not: Callable[[ScheduleContext], str | None] | None = None

    def make(self, optimizer: Optimizer, ctx: ScheduleContext) -> LRScheduler:
        """The schedule for ``ctx``: warmup (if any) then the main schedule."""
        from torch.optim import lr_scheduler as lrs

        if self.own_warmup:
            return self.main(optimizer, ctx)
        warmup, decay = ctx.warmup_steps, max(1, ctx.total_steps - ctx.warmup_steps)
        if warmup <= 0:
            return self.main(optimizer, decay)
        ramp = lrs.LambdaLR(optimizer, lambda step: step / warmup)
        return lrs.SequentialLR(optimizer, [ramp, self.main(optimizer, decay)], [warmup])


def _constant(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(opt, lambda _: 1.0)


def _linear(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import LinearLR

    return LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=steps)


def _cosine(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import CosineAnnealingLR

    return CosineAnnealingLR(opt, T_max=steps)


def _cosine_restarts(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import CosineAnnealingWarmRestarts

    return CosineAnnealingWarmRestarts(opt, T_0=max(1, math.ceil(steps / RESTART_CYCLES)))


def _polynomial(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import PolynomialLR

    return PolynomialLR(opt, total_iters=steps, power=POLYNOMIAL_POWER)


def _inverse_sqrt(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import LambdaLR

    return LambdaLR(opt, lambda s: 1.0 / math.sqrt(1.0 + s))


def _wsd(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import LambdaLR

    decay = max(1, round(WSD_DECAY_FRACTION * steps))
    stable = steps - decay
    return LambdaLR(opt, lambda s: 1.0 if s < stable else max(0.0, (steps - s) / decay))


def _step(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import StepLR

    return StepLR(opt, step_size=max(1, math.ceil(steps / (STEP_DECAYS + 1))),
                         gamma=STEP_GAMMA)


def _exponential(opt: Optimizer, steps: int) -> LRScheduler:
    from torch.optim.lr_scheduler import ExponentialLR

    return ExponentialLR(opt, gamma=EXPONENTIAL_FINAL ** (1.0 / steps))


ONECYCLE_DEFAULT_RISE = 0.25  # OneCycleLR's rising phase when --warmup is 0


def _onecycle_shape(ctx: ScheduleContext) -> tuple[int, float]:
    """OneCycleLR's ``total_steps`` and ``pct_start`` for ``ctx``."""
    total = max(2, ctx.total_steps)
    return total, ctx.warmup_steps / total if ctx.warmup_steps else ONECYCLE_DEFAULT_RISE


def _onecycle(opt: Optimizer, ctx: ScheduleContext) -> LRScheduler:
    from torch.optim.lr_scheduler import OneCycleLR

    total, pct = _onecycle_shape(ctx)
    max_lr = [g["lr"] for g in opt.param_groups]
    return OneCycleLR(opt, max_lr=max_lr, total_steps=total, pct_start=pct)


def _onecycle_why_not(ctx: ScheduleContext) -> str | None:
    """OneCycleLR interpolates each phase over its length, and divides by zero where a phase
    has none: a rise that ends at step 0 (made at once), or one that ends where the run does (at
    the step after the last update). Its own arithmetic, so that this agrees with it exactly."""
    total, pct = _onecycle_shape(ctx)
    rise_end = float(pct * total) - 1
    if rise_end == 0:
        return "a rise of 1 step, which OneCycleLR cannot interpolate (it divides by zero)"
    if total - 1 - rise_end == 0:
        return (f"a rise of all {total} of its steps, leaving none to anneal over (OneCycleLR "
                "divides by zero at the run's last scheduler.step())")
    return None


def check_warmup(name: str, warmup: float, context: Callable[[float], ScheduleContext]) -> None:
    """A ``SpecError`` when the built-in schedule ``name`` cannot run with ``warmup``
    (``context(w)``: the run's ``ScheduleContext`` at warmup ``w``), naming the nearest warmups
    that work, in steps of 0.001."""
    scheduler = SCHEDULERS.get(name)
    why_not = scheduler.why_not if scheduler is not None else None
    trouble = why_not(context(warmup)) if why_not is not None else None
    if why_not is None or trouble is None:
        return
    works = [k / 1000 for k in range(1000) if why_not(context(k / 1000)) is None]
    below = [w for w in works if w < warmup]
    above = [w for w in works if w > warmup]
    if below and not above:
        advice = f"the largest --warmup that works here is {below[-1]:g}"
    elif below and above:
        advice = f"the nearest that work here are --warmup {below[-1]:g} and {above[0]:g}"
    elif above:
        advice = f"the smallest --warmup that works here is {above[0]:g}"
    else:
        advice = "no --warmup works for a run this short; make it longer or use another scheduler"
    raise SpecError(f"--warmup {warmup:g} gives {name} {trouble}; {advice}")


_SCHEDULERS = [
    Scheduler("constant", "warmup, then the base LR", _constant),
    Scheduler("linear", "warmup, then linear decay to 0 (LinearLR)", _linear),
    Scheduler("cosine", "warmup, then cosine decay to 0 (CosineAnnealingLR)", _cosine),
    Scheduler("cosine-restarts",
              f"warmup, then {RESTART_CYCLES} cosine cycles (CosineAnnealingWarmRestarts)",
              _cosine_restarts),
    Scheduler("polynomial", f"warmup, then (1 - s/D)^{POLYNOMIAL_POWER:g} (PolynomialLR)",
              _polynomial),
    Scheduler("inverse-sqrt", "warmup, then 1/sqrt(1 + s) (LambdaLR)", _inverse_sqrt),
    Scheduler("wsd", f"warmup, stable, then linear decay over the last "
              f"{WSD_DECAY_FRACTION:.0%} (LambdaLR)", _wsd),
    Scheduler("step", f"warmup, then x{STEP_GAMMA} at {STEP_DECAYS} evenly spaced steps (StepLR)",
              _step),
    Scheduler("exponential", f"warmup, then exponential decay to {EXPONENTIAL_FINAL}x "
              "(ExponentialLR)", _exponential),
    Scheduler("onecycle", "OneCycleLR; its warm-up phase is the warmup fraction (0.25 if 0)",
              _onecycle, own_warmup=True, why_not=_onecycle_why_not),
]

SCHEDULERS: dict[str, Scheduler] = {s.name: s for s in _SCHEDULERS}


def is_factory_ref(text: str) -> bool:
    """Whether ``text`` names a user factory (``pkg.module:make`` or ``file.py:make``)."""
    module, sep, func = text.rpartition(":")
    return bool(sep and module and func.isidentifier())


def load_factory(ref: str) -> Factory:
    """Import the factory ``ref`` names; a ``SpecError`` says why it cannot be had."""
    if not is_factory_ref(ref):
        raise SpecError(f"--scheduler {ref!r}: a factory is written 'pkg.module:make' or "
                        "'path/to/file.py:make'")
    where, _, func = ref.rpartition(":")
    try:
        if where.endswith(".py") or "/" in where:
            path = Path(where)
            if not path.is_file():
                raise SpecError(f"--scheduler {ref!r}: no file {str(path)!r}")
            name = f"lrcheck_user_schedule_{abs(hash(str(path.resolve())))}"
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except SpecError:
        raise
    except Exception as exc:  # the user's module failed to import: bad input, one line
        raise SpecError(f"--scheduler {ref!r}: cannot import {where!r}: "
                        f"{type(exc).__name__}: {exc}") from None
    factory = getattr(module, func, None)
    if not callable(factory):
        raise SpecError(f"--scheduler {ref!r}: {where!r} has no callable {func!r}")
    return cast(Factory, factory)


def make_scheduler(name: str, optimizer: Optimizer, ctx: ScheduleContext) -> LRScheduler:
    """The schedule ``name`` (built-in or factory) for ``optimizer``, checked to be a torch LR
    scheduler that can step without arguments and that drives ``optimizer`` itself."""
    from torch.optim.lr_scheduler import LRScheduler

    factory = SCHEDULERS[name].make if name in SCHEDULERS else load_factory(name)
    try:
        scheduler = factory(optimizer, ctx)
    except SpecError:
        raise
    except Exception as exc:
        raise SpecError(f"--scheduler {name!r}: make(optimizer, ctx) raised "
                        f"{type(exc).__name__}: {exc}") from None
    if not isinstance(scheduler, LRScheduler):
        raise SpecError(f"--scheduler {name!r}: make(optimizer, ctx) returned "
                        f"{type(scheduler).__name__}, not a torch.optim.lr_scheduler.LRScheduler")
    driven = getattr(scheduler, "optimizer", None)
    if driven is not optimizer:
        # Its steps would set another optimizer's LR: the training's would never move.
        raise SpecError(f"--scheduler {name!r}: make(optimizer, ctx) returned a "
                        f"{type(scheduler).__name__} on {_optimizer_words(driven)}, not the "
                        f"optimizer it was passed ({_optimizer_words(optimizer)}); build the "
                        "scheduler on make's optimizer argument")
    return scheduler


def _optimizer_words(optimizer: object) -> str:
    """``SGD at 0x7f…, 1 param group``: which optimizer, told apart from another of its kind."""
    groups = getattr(optimizer, "param_groups", None)
    count = f", {len(groups)} param group{'s' if len(groups) != 1 else ''}" if isinstance(
        groups, list) else ""
    return f"{type(optimizer).__name__} at {id(optimizer):#x}{count}"
