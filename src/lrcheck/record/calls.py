"""What ``lrcheck record`` counts per update, by wrapping torch's own functions (see
``record.process``'s docstring, "The cadence"): each outermost call of backward, zero_grad, the
clipping of ``torch.nn.utils`` (``clip_grad_norm_``, ``clip_grad_value_``, and
``clip_grads_with_norm_``, which follows ``get_total_norm`` where Accelerate and the Trainer
clip: ``get_total_norm`` alone clips nothing), ``GradScaler.update``, the EMA's
``update_parameters``, and every scheduler's ``step``; and those of ``IMPORTED`` once their
modules are imported."""

from __future__ import annotations

import functools
import math
import sys
import threading
from collections.abc import Callable
from typing import Any, Protocol

import torch

from lrcheck.record import optimizers, rollouts
from lrcheck.record.ema import KINDS, EmaWatch
from lrcheck.record.guard import RECORDING
from lrcheck.record.losses import Losses
from lrcheck.record.stages import Standing
from lrcheck.record.taps import Taps

_local = threading.local()
# What a counter is called with after a counted call: its arguments, and its result.
Args = tuple[object, ...]
Kwargs = dict[str, object]
# The calls counted once their modules are imported, looked for in ``sys.modules`` at each
# backward and optimizer step (as the taps look for TRL's): (module, class or None for a function
# of the module, the call). The EMAs of ``record.ema.KINDS`` count as ``ema_update``. DeepSpeed's
# clipping in its engine (``gradient_clipping`` in its config) counts as ``clip_grad_norm``, with
# that ``max_norm``: without ZeRO the engine calls its own ``clip_grad_norm_`` (runtime/utils.py,
# imported into runtime/engine.py); ZeRO 1 and 2 clip each param group's flat gradient partition
# in ``DeepSpeedZeroOptimizer.unscale_and_clip_grads`` just before stepping the optimizer on it;
# the bf16 optimizer calls ``clip_tensors_by_global_norm``. DeepSpeed clears the gradients
# after each update itself, with neither torch's ``zero_grad``: without ZeRO in its engine's own
# ``zero_grad`` (``param.grad = None``), with ZeRO or bf16 in its optimizer's: these count as a
# module's ``zero_grad``, so that ``reached`` counts the backward passes since the last clear,
# not since the process began (a resumed process's first update against the uninterrupted).
# ZeRO 3 clips in ``DeepSpeedZeroOptimizer_Stage3.unscale_and_clip_grads`` once per sub-group,
# all with the one global norm (one clip). Its ``step`` calls its own ``zero_grad`` before
# stepping the optimizer (stage3.py's "The epilogue has copied all gradients into the
# partition buffers. Clear the model gradients once"): those gradients are the update's, not
# erased; that call is no clear (``zero3_stepping``). The engine's clear follows the step
# (``_take_model_step``: ``self.optimizer.zero_grad()``), as does one after an overflow.
ZERO3 = ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3")
IMPORTED = (*((module, cls, call) for (module, cls), (_, call) in KINDS.items()
              if module != "torch.optim.swa_utils"),
            ("deepspeed.runtime.engine", None, "clip_grad_norm_"),
            ("deepspeed.runtime.zero.stage_1_and_2", "DeepSpeedZeroOptimizer",
             "unscale_and_clip_grads"),
            (*ZERO3, "unscale_and_clip_grads"),
            (*ZERO3, "step"),
            ("deepspeed.runtime.bf16_optimizer", None, "clip_tensors_by_global_norm"),
            ("deepspeed.runtime.engine", "DeepSpeedEngine", "zero_grad"),
            ("deepspeed.runtime.zero.stage_1_and_2", "DeepSpeedZeroOptimizer", "zero_grad"),
            ("deepspeed.runtime.zero.stage3", "DeepSpeedZeroOptimizer_Stage3", "zero_grad"),
            ("deepspeed.runtime.bf16_optimizer", "BF16_Optimizer", "zero_grad"))


class Counter(Protocol):
    """What the counts go into (``record.process.ProcessRecorder``)."""

    totals: dict[str, int]
    module_zeroed: int
    clip: dict[str, Any]
    taps: Taps
    losses: Losses
    ema: EmaWatch
    imported: Imported | None
    standing: Standing

    def zero_grad(self, optimizer: object) -> None: ...

    def scheduler_stepped(self, optimizer: object) -> None: ...


def counting(owner: Any, name: str, count: Callable[..., None],
              inside: Callable[[], bool] | None = None,
              before: Callable[[Args, Kwargs], None] | None = None) -> Callable[[], None]:
    """Wrap ``owner.name`` so that each outermost call (per thread: a call inside another of the
    same name is part of it, as is one made where ``inside()`` is true) runs
    ``count(args, kwargs, result)`` after it (and ``before(args, kwargs)`` before it); returns
    the undo."""
    original = owner.__dict__[name] if isinstance(owner, type) else getattr(owner, name)
    if getattr(original, "_lrcheck", False):
        return lambda: None
    key = f"depth_{id(owner)}_{name}"
    count = RECORDING(f"the count of {name}", count)  # the call itself is the user's: unguarded
    ahead = None if before is None else RECORDING(f"what precedes {name}", before)

    @functools.wraps(original)
    def counted(*args: Any, **kwargs: Any) -> Any:
        depth = getattr(_local, key, 0)
        outer = depth == 0 and (inside is None or not inside())
        if outer and ahead is not None:
            ahead(args, kwargs)
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


class Imported:
    """The calls of ``IMPORTED``, each wrapped (by ``count(module, class, call)``'s counter) once
    its module is imported."""

    def __init__(self, count: Callable[[str, str | None, str], Callable[..., None]]) -> None:
        self.count = count
        self.pending = list(IMPORTED)
        self.undo: list[Callable[[], None]] = []
        self.modules = 0  # how many modules were imported at the last look

    def look(self) -> None:
        if not self.pending or len(sys.modules) == self.modules:
            return
        self.modules = len(sys.modules)
        for entry in list(self.pending):
            module_name, cls, name = entry
            module = sys.modules.get(module_name)
            owner = module if cls is None or module is None else getattr(module, cls, None)
            found = (owner.__dict__.get(name) if isinstance(owner, type)
                     else getattr(owner, name, None))
            if not callable(found):
                continue
            self.pending.remove(entry)
            self.undo.append(counting(owner, name, self.count(module_name, cls, name)))


class _Counts:
    """The counters ``count_calls`` wraps the calls with, each called ``(args, kwargs, result)``
    after an outermost call."""

    def __init__(self, recorder: Counter) -> None:
        self.recorder, self.totals = recorder, recorder.totals
        self.total_norm: object = None  # the last clip_grads_with_norm_'s total_norm

    def tally(self, key: str) -> Callable[..., None]:
        def count(args: Args, kwargs: Kwargs, result: object) -> None:
            self.totals[key] += 1
        return count

    def backward(self, args: Args, kwargs: Kwargs, result: object) -> None:
        self.totals["backward"] += 1
        self.recorder.losses.backward(args, kwargs)
        if self.recorder.imported is not None:
            self.recorder.imported.look()

    def backward_starts(self, args: Args, kwargs: Kwargs) -> None:
        """Before a backward pass: the taps and a router's terms see the loss's graph
        (``record.uses``, ``record.router``)."""
        tensor = args[0] if args else kwargs.get("tensors")
        if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None:
            self.recorder.taps.backward(tensor.grad_fn)
            self.recorder.losses.terms.backward(tensor.grad_fn)

    def zeroed_module(self, args: Args, kwargs: Kwargs, result: object) -> None:
        self.totals["module_zero_grad"] += 1
        rollouts.look()  # the Trainer's first, before its first generation
        self.recorder.module_zeroed = self.totals["backward"]
        self.recorder.taps.zeroed()
        self.recorder.losses.zeroed()

    def clipped(self, key: str, setting: str) -> Callable[..., None]:
        """A clip, counted where it can clip: a ``max_norm`` of infinity (the gradient norm
        taken for a log) clips nothing."""
        def count(args: Args, kwargs: Kwargs, result: object) -> None:
            value = kwargs.get(setting, args[1] if len(args) > 1 else None)
            if isinstance(value, (int, float)) and math.isinf(value):
                return
            self.totals[key] += 1
            self.recorder.clip[setting] = value
            if key == "clip_grad_norm":
                self.recorder.clip["norm"] = result
        return count

    def clipped_with_norm(self, args: Args, kwargs: Kwargs, result: object) -> None:
        """``clip_grads_with_norm_(parameters, max_norm, total_norm)``, the clipping after
        ``get_total_norm`` (Accelerate's and the Trainer's, per device mesh): one clip, with
        that ``max_norm`` and pre-clip norm; the calls that follow with the same
        ``total_norm`` tensor (the other meshes' parameters) are part of it."""
        total = kwargs.get("total_norm", args[2] if len(args) > 2 else None)
        if total is not None and total is self.total_norm:
            return
        self.total_norm = total
        self.clipped("clip_grad_norm", "max_norm")(args, kwargs, total)

    def ema(self, kind: tuple[str, str]) -> Callable[..., None]:
        def count(args: Args, kwargs: Kwargs, result: object) -> None:
            self.totals["ema_update"] += 1
            if args:
                self.recorder.ema.updated(args[0], kind)
        return count

    def zero_clipped(self, args: Args, kwargs: Kwargs, result: object) -> None:
        """ZeRO's clipping of a flat partition (where ``clip_grad`` > 0: else it unscales
        only), its pre-clip norm the one given, unscaled; the calls that follow with the same
        norm tensor (the other param groups or sub-groups) are part of it."""
        optimizer = args[0]
        max_norm = getattr(optimizer, "clip_grad", 0.0)
        norm = kwargs.get("total_norm", args[2] if len(args) > 2 else None)
        if not (isinstance(max_norm, (int, float)) and max_norm > 0) or (
                norm is not None and norm is self.total_norm):
            return
        self.total_norm = norm
        self.totals["clip_grad_norm"] += 1
        self.recorder.clip["max_norm"] = max_norm
        self.recorder.clip["norm"] = (norm / getattr(optimizer, "loss_scale", 1.0)
                                      if isinstance(norm, torch.Tensor) else None)

    def zero3_zeroed(self, args: Args, kwargs: Kwargs, result: object) -> None:
        """ZeRO 3's ``zero_grad``: a clear, except the one its ``step`` makes before stepping
        without an overflow (the gradients are in its partitions then)."""
        optimizer = args[0] if args else None
        if not (zero3_stepping() and getattr(optimizer, "overflow", True) is False):
            self.zeroed_module(args, kwargs, result)

    def imported(self, module: str, cls: str | None, name: str) -> Callable[..., None]:
        """The counter of one call of ``IMPORTED``."""
        if cls is not None and (module, cls) in KINDS:
            return self.ema(KINDS[module, cls])
        if name == "unscale_and_clip_grads":
            return self.zero_clipped
        if (module, cls) == ZERO3 and name == "step":
            return lambda args, kwargs, result: None  # counted for its depth: ``zero3_stepping``
        if (module, cls) == ZERO3 and name == "zero_grad":
            return self.zero3_zeroed
        if name == "zero_grad":
            return self.zeroed_module
        return self.clipped("clip_grad_norm", "max_norm")


def count_calls(recorder: Counter) -> Callable[[], None]:
    """Count, for ``recorder.cadence``, the calls of the cadence (see the module's docstring);
    returns the undo (the tests and the benchmark count in-process)."""
    import torch.nn.utils.clip_grad as clip_module
    from torch.optim.swa_utils import AveragedModel

    counts = _Counts(recorder)
    undo = [
        # A backward inside a backward (a reentrant checkpoint's, on the engine's thread) is
        # part of it.
        counting(torch.autograd, "backward", counts.backward,
                  lambda: torch._C._current_autograd_node() is not None, counts.backward_starts),
        counting(torch.optim.Optimizer, "zero_grad",
                  lambda args, kwargs, result: recorder.zero_grad(args[0])),
        counting(torch.nn.Module, "zero_grad", counts.zeroed_module),
        counting(torch.amp.GradScaler, "update", counts.tally("scaler_update")),
        counting(AveragedModel, "update_parameters",
                  counts.ema(KINDS["torch.optim.swa_utils", "AveragedModel"])),
    ]
    for name, key, setting in (("clip_grad_norm_", "clip_grad_norm", "max_norm"),
                               ("clip_grad_value_", "clip_grad_value", "clip_value")):
        original = getattr(clip_module, name)
        undo.append(counting(clip_module, name, counts.clipped(key, setting)))
        if getattr(torch.nn.utils, name, None) is original:  # what users call
            setattr(torch.nn.utils, name, getattr(clip_module, name))
            undo.append(functools.partial(setattr, torch.nn.utils, name, original))
    if callable(getattr(torch.nn.utils, "clip_grads_with_norm_", None)):
        # torch's public alias only: clip_grad_norm_ calls the module's own, and a call made
        # inside clip_grad_norm_ is part of it however it is reached.
        norm_depth = f"depth_{id(clip_module)}_clip_grad_norm_"
        undo.append(counting(torch.nn.utils, "clip_grads_with_norm_", counts.clipped_with_norm,
                             lambda: getattr(_local, norm_depth, 0) > 0))
    recorder.imported = Imported(counts.imported)
    recorder.imported.look()

    def restore() -> None:
        if recorder.imported is not None:
            undo.extend(recorder.imported.undo)
            recorder.imported = None
        for step in reversed(undo):
            step()

    return restore


def zero3_stepping() -> bool:
    """Whether this thread is inside ZeRO 3's optimizer's ``step`` (``counting``'s depth of
    the class ``Imported`` wrapped it on)."""
    owner = getattr(sys.modules.get(ZERO3[0]), ZERO3[1], None)
    return owner is not None and getattr(_local, f"depth_{id(owner)}_step", 0) > 0


def pre_clip_norm(norm: object) -> float | None:
    """The pre-clip norm a clip returned or was given, as a number; None where it is not one
    tensor's single value, or a DTensor not replicated (FSDP2's partial norm: reading it would
    be a collective inside the user's step)."""
    if not isinstance(norm, torch.Tensor) or norm.numel() != 1:
        return None
    placements = getattr(norm, "placements", None)
    if placements is not None and not all(p.is_replicate() for p in placements):
        return None
    return float(optimizers.local_tensor(norm))


def count_scheduler_steps(cls: type, recorder: Counter) -> None:
    """Wrap ``cls.step`` (where ``cls`` defines it) so that each outermost ``scheduler.step()``
    counts for the scheduler's optimizer: SequentialLR's and ChainedScheduler's inner steps are
    part of their one step."""
    original = cls.__dict__.get("step")
    if original is None or getattr(original, "_lrcheck", False):
        return

    def counted(scheduler: Any) -> None:
        optimizer = getattr(scheduler, "optimizer", None)
        recorder.scheduler_stepped(optimizer)
        recorder.standing.stepped(optimizer, scheduler)

    stepped = RECORDING(f"the count of {cls.__name__}.step", counted)

    @functools.wraps(original)
    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = getattr(_local, "depth", 0)
        if depth == 0:
            stepped(self)
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
