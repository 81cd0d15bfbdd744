"""The precision a recorded process computes its updates in, observed rather than taken from the
parameters' type: autocast as the model's forward sees it (per device), the types the first
training forward's floating-point operations computed in (a census under a
``TorchDispatchMode``, each type with the module classes that computed in it: transformers'
``LlamaRMSNorm`` computes in float32 inside a float64 model), and TF32 where CUDA multiplies
float32 matrices. Lockstep's bounds (``checks.lockstep``) are keyed by the coarsest of them.

What is observed is the forward before the first update; nothing is kept after it. The census
runs only where it is safe: the outermost module call of the main thread, with no other
dispatch mode active, no tensor subclass among the parameters (FSDP2's DTensor) and nothing
compiled; any error in it switches it off, and the user's forward runs whatever happens."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from lrcheck.record.guard import MODULE_CALLS, Guard

# From the finest type to the coarsest, with its unit roundoff (TF32: float32's range, 10 bits
# of mantissa, as float16's).
EPS = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "tfloat32": 2.0 ** -11,
       "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
SHORT = {"bfloat16": "bf16", "float16": "fp16"}
# Module classes named per type in the census.
NAMED = 4


def coarsest(kinds: list[str]) -> str:
    """The coarsest of ``kinds`` known to ``EPS`` (``float32`` where none is)."""
    known = [k for k in kinds if k in EPS]
    return max(known, key=lambda k: (EPS[k], list(EPS).index(k))) if known else "float32"


class _Census(TorchDispatchMode):
    """Per floating-point type an operation with a floating-point input produced, the module
    classes that ran it (``stack``: the innermost last)."""

    def __init__(self, stack: list[str]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.stack = stack
        self.seen: dict[str, list[str]] = {}
        self.conv = False

    def __torch_dispatch__(self, func: Callable[..., object], types: object,
                           args: tuple[object, ...] = (),
                           kwargs: dict[str, object] | None = None) -> object:
        out = func(*args, **(kwargs or {}))
        try:
            if any(isinstance(t, torch.Tensor) and t.is_floating_point()
                   for t in tree_leaves((args, kwargs))):
                self.conv = self.conv or "convolution" in str(func)
                where = self.stack[-1] if self.stack else "?"
                for t in tree_leaves(out):
                    if isinstance(t, torch.Tensor) and t.is_floating_point():
                        found = self.seen.setdefault(str(t.dtype).removeprefix("torch."), [])
                        if where not in found and len(found) < NAMED:
                            found.append(where)
        except Exception:  # noqa: BLE001 - the census never breaks the user's forward
            pass
        return out


@dataclass(frozen=True)
class _Heard:
    """What ``Precision.before`` did for one module call: the census it began (the outermost
    call), and whether it put the module on the census's stack."""

    census: _Census | None
    counted: bool


class Precision:
    """What the forward computed in before the first update (``summary``); ``done`` once
    that update started. It hears every module call (``guard.MODULE_CALLS``) inside a guard of
    its own: an error switches the census off (``summary`` then falls back to the parameters'
    type and autocast), and the user's forward runs whatever happens."""

    where = "the precision census of a module call"

    def __init__(self) -> None:
        self.autocast: dict[str, str] = {}  # device type → autocast's type, where enabled
        self.census: _Census | None = None  # the first training forward's, once taken
        self.active = False  # while the census is taken
        self.done = False
        self.stack: list[str] = []
        self.guard = Guard("the precision census")
        self.guard.arm(self._off)

    def _autocast(self) -> None:
        for device in ("cpu", "cuda", "xpu", "mps", "hpu"):
            try:
                if torch.is_autocast_enabled(device):
                    self.autocast[device] = str(torch.get_autocast_dtype(device)) \
                        .removeprefix("torch.")
            except Exception:  # noqa: BLE001 - a device type this torch does not know
                continue

    def _census_here(self, module: torch.nn.Module) -> bool:
        """Whether this outermost call is the one to take the census in."""
        if self.census is not None or not torch.is_grad_enabled():
            return False
        if threading.current_thread() is not threading.main_thread():
            return False
        if torch._C._len_torch_dispatch_stack() or "OptimizedModule" in type(module).__name__:
            return False
        return all(type(p) in (torch.nn.Parameter, torch.Tensor) for p in module.parameters())

    def before(self, module: object, args: tuple[object, ...], kwargs: dict[str, object],
               depth: int) -> _Heard | None:
        """Before a module call: the outermost one reads autocast and may begin the census; a
        call while it is taken goes on its stack."""
        if self.done or not isinstance(module, torch.nn.Module):
            return None
        census = None
        if depth == 0:
            self._autocast()
            if self._census_here(module):
                census = self.census = _Census(self.stack)
                census.__enter__()  # type: ignore[no-untyped-call]
                self.active = True
        counted = self.active and threading.current_thread() is threading.main_thread()
        if counted:
            self.stack.append(type(module).__name__)
        return _Heard(census, counted)

    def after(self, heard: object, out: object, raised: bool) -> None:
        """After a module call: off the stack, and the census ended where it began."""
        if not isinstance(heard, _Heard):
            return
        if heard.counted and self.stack:
            self.stack.pop()
        if heard.census is not None:
            self.active = False
            heard.census.__exit__(None, None, None)  # type: ignore[no-untyped-call]

    def _off(self, why: str) -> None:
        """The census off (its guard tripped): one still taken ends, and none is kept."""
        census, taken = self.census, self.active
        self.census, self.active = None, False
        if census is not None and taken:
            census.__exit__(None, None, None)  # type: ignore[no-untyped-call]

    def summary(self, params: list[torch.Tensor]) -> dict[str, object]:
        """The coarsest type the update computed in (``precision``), what set it (``why``),
        and what was seen: autocast per device, the census, TF32's flags."""
        kinds = sorted({str(p.dtype).removeprefix("torch.") for p in params
                        if p.is_floating_point()})
        devices = sorted({p.device.type for p in params})
        seen = {} if self.census is None else dict(self.census.seen)
        cast = {d: t for d, t in self.autocast.items() if d in devices}
        tf32 = _tf32(devices, self.census is not None and self.census.conv)
        own = coarsest(kinds)
        found = coarsest([*kinds, *cast.values(), *seen, *(["tfloat32"] if tf32 else [])])
        if found in cast.values():
            device = next(d for d, t in cast.items() if t == found)
            why = f"{SHORT.get(found, found)} autocast on {device}"
        elif found in seen and found != own:
            who = ", ".join(seen[found])
            verb = "computes" if len(seen[found]) == 1 else "compute"
            why = f"{found} inside a {own} model ({who} {verb} in {found})"
        elif found == "tfloat32":
            why = f"TF32 on cuda ({tf32})"
        else:
            why = f"{'+'.join(kinds) or 'no floating-point'} parameters"
        return {"precision": found, "why": why, "autocast": cast, "ops": seen,
                "tf32": tf32 or None, "census": self.census is not None}


def _tf32(devices: list[str], conv: bool) -> str:
    """The TF32 settings that make float32 products on CUDA round to TF32 ('' where none)."""
    if "cuda" not in devices:
        return ""
    found = []
    if torch.backends.cuda.matmul.allow_tf32 or torch.get_float32_matmul_precision() != "highest":
        found.append(f"float32_matmul_precision {torch.get_float32_matmul_precision()!r}")
    if conv and torch.backends.cudnn.allow_tf32:
        found.append("torch.backends.cudnn.allow_tf32")
    return ", ".join(found)


# This process's: what its forward computed in before its first update (``watch``, ``finish``).
OBSERVED = Precision()
_undo: list[Callable[[], None]] = []


def watch(on: bool = True, precision: Precision = OBSERVED) -> Callable[[], None]:
    """``precision`` on every module call (``guard.MODULE_CALLS``, where ``on``) until
    ``finish`` or the process's first optimizer step; returns the undo."""
    if not on:
        return lambda: None
    removal = MODULE_CALLS.listen(precision)

    def restore(*_: object) -> None:
        precision.done = True
        try:
            removal()
        except Exception:  # noqa: BLE001 - called in the user's optimizer.step()
            pass

    # The first optimizer step of the process ends the watch, whether or not it is finished
    # (the hook stays, a no-op after: torch iterates its hooks as it calls them).
    register_optimizer_step_pre_hook(restore)
    _undo.append(restore)
    return restore


def finish(params: list[torch.Tensor], precision: Precision = OBSERVED) -> dict[str, object]:
    """What update 0 of ``params`` computed in (``Precision.summary``; the parameters' type
    where that fails, with the reason); the watch ends here."""
    precision.done = True
    while _undo:
        _undo.pop()()
    try:
        return precision.summary(params)
    except Exception as exc:  # noqa: BLE001 - never in the way of the user's training
        kinds = sorted({str(p.dtype).removeprefix("torch.") for p in params})
        return {"precision": coarsest(kinds), "why": f"{'+'.join(kinds)} parameters (the "
                f"precision was not observed: {exc})"}
