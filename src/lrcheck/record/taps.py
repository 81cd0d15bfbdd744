"""The samples behind each update of a recorded process, and the weight each one's loss carried
in the update's gradient, measured without a change to the user's code.

**Samples.** Every outermost call of a module that has trainable parameters (the model, or the
DDP, FSDP or DeepSpeed module around it), made with gradients on and outside a backward pass
(a checkpoint's recomputation is not a new micro-batch), starts a micro-batch: each row of its
first tensor input (``input_ids`` where it is given by name) has an identity, a hash of its
contents (``record.identity``; dynamic padding seen through the ``attention_mask`` keeps it).
Two identical rows have one identity: a data set with duplicates feeds "the same sample" twice,
which ``data`` counts as twice the one sample. A model called in parts is one micro-batch:
a call whose input the graph computed (``head(body(x))``, ``D(G(z))``: it has a ``grad_fn``)
continues the current micro-batch, and a call of another module on data, with as many rows,
before any loss or backward pass reached the current one (a user and an item embedding table
called one after the other) joins it, each row's identity then that of the whole row.

**Loss weights.** torch's loss functions (``LOSSES``, and the ``nn.*Loss`` modules, which call
them, and Transformers' ``ForCausalLMLoss``) are wrapped: an outermost call whose result needs
a gradient gets a hook on its result, and the weight of each item's own loss (``l_i``,
unweighted) in the update's gradient is the gradient that reaches the result times
``∂result/∂l_i`` — 1 for ``sum``, the item's class weight over the weights' sum (or 1 / items)
for ``mean``, the item's mask for ``ignore_index``. Nothing is computed differently: the user's
loss is torch's. The items are mapped to the micro-batch's rows (an LM's ``B·T`` tokens to its
``B`` rows) and summed per row; at the update, divided by the GradScaler's scale and by the
world size (the ranks' gradients are averaged). A micro-batch whose gradients a ``zero_grad``
erased before the update weighs 0. A loss computed elsewhere (a fused LM head, Liger's or
unsloth's kernels, a hand-written mean) leaves its micro-batch's weights unmeasured, and says
so."""

from __future__ import annotations

import functools
import inspect
import sys
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from lrcheck.record import tokens as by_token
from lrcheck.record.guard import MODULE_CALLS, RECORDING
from lrcheck.record.identity import first_input, first_tensor, join, row_ids
from lrcheck.record.trl_head import TRL_UTILS, tap_trl
from lrcheck.record.uses import Split

# torch.nn.functional's losses whose reduction the tap knows: per item, the derivative of the
# result by the item's own loss follows from the reduction, the class weights, the mask.
LOSSES = ("cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
          "binary_cross_entropy", "binary_cross_entropy_with_logits")
# Those whose ``mean`` divides by the sum of the elementwise ``weight`` (the others by the
# number of elements).
_MEAN_BY_WEIGHT = ("mse_loss", "l1_loss", "huber_loss")
_local = threading.local()


@dataclass
class _Micro:
    """One micro-batch: its rows' identities and, once a tapped loss saw it, each row's weight
    (float64, on the device), and whether a backward pass reached those weights yet."""

    ids: torch.Tensor
    weights: torch.Tensor | None = None
    backward: bool = False
    why: str | None = None  # why the weights are not measured
    dtype: torch.dtype | None = None  # the coarsest type of the losses measured
    width: int | None = None  # the length of the rows (a 2-D input's second dimension)
    modules: list[int] = field(default_factory=list)  # id() of the modules whose calls fed it
    reached: bool = False  # whether a backward pass reached an output of those calls
    mask: torch.Tensor | None = None  # the forward's attention mask
    # ∂L/∂logp of each position, once a backward pass reached them (``record.tokens``)
    tokens: list[torch.Tensor] = field(default_factory=list)
    split: Split = field(default_factory=Split)  # those weights per use (``record.uses``)


@dataclass
class Fed:
    """What one update was fed in this process: per micro-batch, its rows' identities and their
    weights (None: not measured), and why a weight was not measured."""

    ids: list[list[int]] = field(default_factory=list)
    weights: list[list[float] | None] = field(default_factory=list)
    why: str | None = None
    dtype: str | None = None  # the coarsest type a measured loss was computed in
    tokens: list[by_token.Rows | None] = field(default_factory=list)  # per micro-batch, or None
    uses: list[by_token.Uses | None] = field(default_factory=list)  # ``record.uses``

    def packed_tokens(self) -> dict[str, object]:
        """``fed_tokens`` (``record.tokens``), where a micro-batch's tokens were measured."""
        measured = any(t is not None for t in self.tokens)
        return {"fed_tokens": by_token.pack(self.tokens, self.uses)} if measured else {}


class Taps:
    """The micro-batches of this process since the last update (``take``). It hears every
    module call (``guard.MODULE_CALLS``) inside the recording's guard: an error here switches
    the recording off, with the reason, rather than leave a micro-batch out."""

    guard = RECORDING
    where = "the samples' tap of a module call"

    def __init__(self) -> None:
        self.micro: list[_Micro] = []
        self.current: _Micro | None = None
        # Module → whether it has trainable parameters (weakly: a module's id is reused).
        self.trainable: weakref.WeakKeyDictionary[torch.nn.Module, bool] = \
            weakref.WeakKeyDictionary()
        self.trl = False  # whether TRL's fused LM head is tapped

    def forward(self, module: torch.nn.Module, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> None:
        """An outermost module call: a new micro-batch where it is a training forward."""
        if not torch.is_grad_enabled() or torch._C._current_autograd_node() is not None:
            return
        if not self.trl and TRL_UTILS in sys.modules:
            self.trl = tap_trl(self.head)
        trains = self.trainable.get(module)
        if trains is None:
            trains = any(p.requires_grad for p in module.parameters())
            self.trainable[module] = trains
        if not trains:
            return
        found = first_input(args, kwargs)
        if found is None:
            return
        x, mask = found
        current = self.current
        if current is not None and x.grad_fn is not None:
            current.modules.append(id(module))  # the graph computed its input: a model's part
            return
        ids = row_ids(x, mask)
        if (current is not None and current.weights is None and not current.reached
                and id(module) not in current.modules and len(ids) == len(current.ids)):
            # another part fed the same rows before any loss: one sample per row
            current.ids = join(current.ids, ids)
            current.modules.append(id(module))
            return
        micro = _Micro(ids, width=int(x.shape[1]) if x.dim() == 2 else None,
                       modules=[id(module)], mask=mask)
        self.micro.append(micro)
        self.current = micro

    def before(self, module: object, args: tuple[object, ...], kwargs: dict[str, object],
               depth: int) -> bool:
        """Before a module call: an outermost one may start a micro-batch (``forward``)."""
        if depth or not isinstance(module, torch.nn.Module):
            return False
        self.forward(module, args, kwargs)
        return True

    def after(self, outermost: object, out: object, raised: bool) -> None:
        """After a module call: an outermost one that returned is watched for its backward
        pass (``called``)."""
        if outermost is True and not raised and self.current is not None:
            self.called(out)

    def called(self, out: object) -> None:
        """An outermost training call returned ``out``: a backward pass that reaches it marks
        the current micro-batch as reached (no later call joins it)."""
        micro = self.current
        tensor = first_tensor(out)
        if micro is None or micro.reached or tensor is None or not tensor.requires_grad:
            return

        def reached(grad: torch.Tensor) -> None:
            micro.reached = True

        tensor.register_hook(reached)

    def loss(self, name: str, bound: inspect.BoundArguments, out: object) -> None:
        """A tapped loss's result ``out``: its items' weights added to the current micro-batch's
        rows in the backward pass."""
        micro = self.current
        if micro is None or not isinstance(out, torch.Tensor) or not out.requires_grad:
            return
        try:
            local = derivative(name, bound)
        except _NotKnown as exc:
            micro.why = str(exc)
            return
        self.weigh(micro, name, out, local)

    def weigh(self, micro: _Micro, name: str, out: torch.Tensor, local: torch.Tensor) -> None:
        """Hook ``out``: in the backward pass, the gradient reaching it times ``local`` (per
        item, ``∂out/∂l_i``; the shape of ``out`` or, for a reduced ``out``, of its items) is
        each item's weight, summed into ``micro``'s rows."""
        rows = len(micro.ids)
        if local.dim() == 0 or local.shape[0] % max(rows, 1) or not rows:
            micro.why = (f"{name}'s {tuple(local.shape)} items do not divide into the "
                         f"{rows} rows of the forward before it")
            return
        if micro.weights is None:
            micro.weights = torch.zeros(rows, dtype=torch.float64, device=local.device)
        if micro.dtype is None or torch.finfo(out.dtype).eps > torch.finfo(micro.dtype).eps:
            micro.dtype = out.dtype
        per_row = None if out.dim() else local.reshape(rows, -1).sum(dim=1)

        def reached(grad: torch.Tensor) -> None:
            weights = micro.weights
            if weights is None:
                return
            g = grad.detach().to(torch.float64)
            if per_row is not None:
                weights.add_(g * per_row)
            else:
                weights.add_((g.expand(local.shape) * local).reshape(rows, -1).sum(dim=1))
            micro.backward = True

        out.register_hook(RECORDING("the loss's weights in backward", reached))

    def head(self, hidden: torch.Tensor, out: object) -> None:
        """TRL's fused LM head (``tap_trl``) returned ``out`` for ``hidden``: its per-token
        log-probabilities weighed (``fused``); compact where fewer than the current micro-batch's
        rows × (their length − 1) positions were scored (a causal LM's shift)."""
        scored = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(scored, torch.Tensor):
            raise TypeError(f"it returned a {type(scored).__name__}, not log-probabilities")
        micro = self.current
        every = -1 if micro is None or micro.width is None else len(micro.ids) * (micro.width - 1)
        self.fused(scored, hidden.dim() == 2 and scored.numel() != every)

    def fused(self, out: torch.Tensor, compact: bool) -> None:
        """TRL's fused LM head (``tap_trl``): ``out`` holds each token's log-probability, whose
        loss is its negative; ``compact``: only the valid tokens were scored (on a Triton
        device), which cannot be mapped to rows."""
        micro = self.current
        if micro is None or not isinstance(out, torch.Tensor) or not out.requires_grad:
            return
        if compact:
            micro.why = ("TRL's fused LM head scored only the valid tokens (a Triton device): "
                         "they are not mapped to their rows")
            return
        local = torch.full(out.shape, -1.0, dtype=torch.float64, device=out.device)
        self.weigh(micro, "TRL's fused LM head", out, local)
        if by_token.watch(micro.tokens, out, len(micro.ids)):
            micro.split.watch(out)

    def backward(self, root: object) -> None:
        """A backward pass from ``root`` is about to run: the uses of each micro-batch's
        log-probs weighed apart (``record.uses``)."""
        for micro in self.micro:
            if micro.tokens:
                micro.split.backward(root, micro.tokens[0])

    def zeroed(self) -> None:
        """``zero_grad``: the gradients of every micro-batch a backward pass reached so far are
        gone; they weigh 0 in the update."""
        for micro in self.micro:
            if micro.backward and micro.weights is not None:
                micro.weights.zero_()
                for grads in micro.tokens:
                    grads.zero_()
                micro.split.zero()

    def take(self, scale: float, world: int, reached: bool = False) -> Fed:
        """The micro-batches since the last ``take``, their weights divided by ``scale`` (the
        GradScaler's) and by ``world``, one transfer; ``reached``: only those differentiated."""
        micro, self.micro, self.current = [m for m in self.micro if m.reached >= reached], [], None
        fed = Fed()
        if not micro:
            return fed
        ids = torch.cat([m.ids for m in micro]).tolist()
        measured = [m.weights for m in micro if m.weights is not None]
        flat = (torch.cat(measured) / (scale * world)).tolist() if measured else []
        at = taken = 0
        for m in micro:
            n = len(m.ids)
            fed.ids.append(ids[at:at + n])
            at += n
            if m.weights is None:
                fed.weights.append(None)
                fed.why = fed.why or m.why or _elsewhere()
            else:
                fed.weights.append(flat[taken:taken + n])
                taken += n
            fed.tokens.append(_rows(m.tokens[0], m.mask, scale * world) if m.tokens else None)
            fed.uses.append({k: _rows(g, m.mask, scale * world) for k, g in
                             m.split.taken(m.tokens[0]).items()} if m.tokens else None)
        kinds = [m.dtype for m in micro if m.dtype is not None]
        if kinds:
            fed.dtype = str(max(kinds, key=lambda t: torch.finfo(t).eps)).replace("torch.", "")
        return fed


def _rows(grads: torch.Tensor, mask: torch.Tensor | None, divide: float) -> by_token.Rows:
    return [(row / divide).tolist() for row in by_token.rows(grads, mask)]


# Packages whose kernels compute a loss without torch's loss functions, by their module's name.
FUSED = {"liger_kernel": "Liger's kernels", "unsloth": "unsloth's kernels",
         "cut_cross_entropy": "Cut Cross-Entropy"}


def _elsewhere() -> str:
    """Why a micro-batch's weights were not measured where no tapped loss saw it."""
    imported = [module for module in FUSED if module in sys.modules]
    where = (f": the loss may be computed by {' or '.join(FUSED[m] for m in imported)} "
             f"({', '.join(imported)} imported)" if imported else "")
    return f"no loss of torch.nn.functional's {', '.join(LOSSES)} saw its forward{where}"


class _NotKnown(Exception):
    """A call whose items' weights the tap cannot say (an unknown reduction)."""


def derivative(name: str, bound: inspect.BoundArguments) -> torch.Tensor:
    """Per item of the loss ``name`` called with ``bound``: ``∂result/∂l_i`` (float64), where
    ``l_i`` is the item's own loss, unweighted; for ``reduction="none"`` the result is per item
    and this is the item's factor in it."""
    a = bound.arguments
    if a.get("size_average") is not None or a.get("reduce") is not None:
        raise _NotKnown(f"{name} was called with the deprecated size_average / reduce")
    reduction = a.get("reduction", "mean")
    if reduction not in ("mean", "sum", "none"):
        raise _NotKnown(f"{name}'s reduction {reduction!r} is not one torch knows")
    x, target = a["input"], a["target"]
    weight = a.get("weight")
    if name in ("cross_entropy", "nll_loss"):
        if target.is_floating_point():  # class probabilities: items are the input's rows
            shape = (x.shape[0], *x.shape[2:]) if x.dim() > 1 else ()
            local = torch.ones(shape, dtype=torch.float64, device=x.device)
            count = float(local.numel())
            return local / count if reduction == "mean" else local
        valid: torch.Tensor = target != a.get("ignore_index", -100)
        local = valid.to(torch.float64)
        if weight is not None:
            local = local * weight.detach().to(torch.float64)[target.clamp(min=0)]
        total = local.sum()
        return local / total if reduction == "mean" else local
    shape = torch.broadcast_shapes(x.shape, target.shape)
    local = torch.ones(shape, dtype=torch.float64, device=x.device)
    if weight is not None:
        local = local * weight.detach().to(torch.float64)
    if reduction != "mean":
        return local
    if weight is not None and name in _MEAN_BY_WEIGHT:
        return local / local.sum()
    return local / float(max(local.numel(), 1))


def _outermost(key: str) -> bool:
    """Whether this thread is outside every call counted under ``key``."""
    return getattr(_local, key, 0) == 0


def _weigh(taps: Taps, name: str, signature: inspect.Signature, args: tuple[object, ...],
           kwargs: dict[str, object], out: object) -> None:
    """The loss ``name`` called with ``args`` and ``kwargs`` weighed (``Taps.loss``)."""
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    taps.loss(name, bound, out)


def tap(taps: Taps) -> Callable[[], None]:
    """``taps`` on every module call (``guard.MODULE_CALLS``) and the losses of ``LOSSES``
    wrapped for it; returns the undo."""
    import torch.nn.functional as F

    undo = [MODULE_CALLS.listen(taps)]
    for name in LOSSES:
        original = getattr(F, name)
        signature = inspect.signature(original)

        def loss(*args: Any, _original: Any = original, _name: str = name,
                 _signature: inspect.Signature = signature, **kwargs: Any) -> Any:
            if torch.compiler.is_compiling() or not _outermost("loss"):
                return _original(*args, **kwargs)
            _local.loss = 1
            try:
                out = _original(*args, **kwargs)
            finally:
                _local.loss = 0
            RECORDING.run(f"the tap of F.{_name}", _weigh, taps, _name, _signature, args,
                          kwargs, out)
            return out

        functools.update_wrapper(loss, original)
        setattr(F, name, loss)
        undo.append(functools.partial(setattr, F, name, original))

    def restore() -> None:
        for step in reversed(undo):
            step()

    return restore
