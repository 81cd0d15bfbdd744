"""What ``lrcheck record`` counts per update, by wrapping torch's own functions (see
``record.process``'s docstring, "The cadence"): each outermost call of backward, zero_grad, the
clipping of ``torch.nn.utils``, ``GradScaler.update``, the EMA's ``update_parameters``, and
every scheduler's ``step``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Protocol

import torch

from lrcheck.record.taps import Taps

_local = threading.local()


class Counter(Protocol):
    """What the counts go into (``record.process.ProcessRecorder``)."""

    totals: dict[str, int]
    module_zeroed: int
    clip: dict[str, Any]
    taps: Taps

    def zero_grad(self, optimizer: Any) -> None: ...

    def scheduler_stepped(self, optimizer: Any) -> None: ...


def counting(owner: Any, name: str, count: Callable[..., None],
              inside: Callable[[], bool] | None = None) -> Callable[[], None]:
    """Wrap ``owner.name`` so that each outermost call (per thread: a call inside another of the
    same name is part of it, as is one made where ``inside()`` is true) runs
    ``count(args, kwargs, result)`` after it; returns the undo."""
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    if getattr(original, "_lrcheck", False):
        return lambda: None
    key = f"depth_{id(owner)}_{name}"

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_local, key, 0)
        outer = depth == 0 and (inside is None or not inside())
        setattr(_local, key, depth + 1)
        try:
            result = original(*args, **kwargs)
        finally:
            setattr(_local, key, depth)
        if outer:
            count(args, kwargs, result)
        return result

    counted._lrcheck = True  # type: ignore[attr-defined]
    setattr(owner, name, counted)
    return lambda: setattr(owner, name, original)


def count_calls(recorder: Counter) -> Callable[[], None]:
    """Count, for ``recorder.cadence``, the calls of the cadence (see the module's docstring);
    returns the undo (the tests and the benchmark count in-process)."""
    import torch.nn.utils.clip_grad as clip_module
    from torch.optim.swa_utils import AveragedModel

    totals = recorder.totals

    def tally(key: str) -> Callable[..., None]:
        def count(args: Any, kwargs: Any, result: Any) -> None:
            totals[key] += 1
        return count

    def zeroed_module(args: Any, kwargs: Any, result: Any) -> None:
        totals["module_zero_grad"] += 1
        recorder.module_zeroed = totals["backward"]
        recorder.taps.zeroed()

    def clipped(key: str, setting: str) -> Callable[..., None]:
        def count(args: Any, kwargs: Any, result: Any) -> None:
            totals[key] += 1
            recorder.clip[setting] = kwargs.get(setting, args[1] if len(args) > 1 else None)
            if key == "clip_grad_norm":
                recorder.clip["norm"] = result
        return count

    undo = [
        # A backward inside a backward (a reentrant checkpoint's, on the engine's thread) is
        # part of it.
        counting(torch.autograd, "backward", tally("backward"),
                  lambda: torch._C._current_autograd_node() is not None),
        counting(torch.optim.Optimizer, "zero_grad",
                  lambda args, kwargs, result: recorder.zero_grad(args[0])),
        counting(torch.nn.Module, "zero_grad", zeroed_module),
        counting(torch.amp.GradScaler, "update", tally("scaler_update")),
        counting(AveragedModel, "update_parameters", tally("ema_update")),
    ]
    for name, key, setting in (("clip_grad_norm_", "clip_grad_norm", "max_norm"),
                               ("clip_grad_value_", "clip_grad_value", "clip_value")):
        original = getattr(clip_module, name)
        undo.append(counting(clip_module, name, clipped(key, setting)))
        if getattr(torch.nn.utils, name, None) is original:  # what users call
            setattr(torch.nn.utils, name, getattr(clip_module, name))
            undo.append(functools.partial(setattr, torch.nn.utils, name, original))

    def restore() -> None:
        for step in reversed(undo):
            step()

    return restore


def count_scheduler_steps(cls: type, recorder: Counter) -> None:
    """Wrap ``cls.step`` (where ``cls`` defines it) so that each outermost ``scheduler.step()``
    counts for the scheduler's optimizer: SequentialLR's and ChainedScheduler's inner steps are
    part of their one step."""
    original = cls.__dict__.get("step")
    if original is None or getattr(original, "_lrcheck", False):
        return

    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_local, "depth", 0)
        if depth == 0:
            recorder.scheduler_stepped(getattr(self, "optimizer", None))
        _local.depth = depth + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _local.depth = depth

    step._lrcheck = True  # type: ignore[attr-defined]
    cls.step = step  # type: ignore[attr-defined]


def subclasses(cls: type) -> list[type]:
    found = [cls]
    sub: type
    for sub in cls.__subclasses__():
        found.extend(subclasses(sub))
    return found
