"""Each use of the scored log-probs in the loss, weighed on its own: the gradient reaching the
log-probs is the sum of what each operation that reads them sends back, and a loss with two
terms (GRPO's policy term reads them through the ratio ``logp − old``, its KL term through
``ref − logp``) reads them in two places. Before each backward pass, the loss's graph is walked
from its root; from the log-probs down a chain of operations each read once that carry them
unchanged (views, slices, a ``cat``: ``CARRY``), the first tensor read more than once is where
the terms part, and a hook on each operation reading it keeps the gradient it sends back, per
use, named by the operation and the operand the log-probs are (``logp − x``, ``x − logp``,
``logp × x``, else the operation's name). Nothing the loss computes changes."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from lrcheck.record.guard import RECORDING

if TYPE_CHECKING:
    import torch

# An autograd node (``torch.autograd.graph.Node``) and one of its outputs or inputs.
Edge = tuple[object, int]
# The longest chain of once-read operations followed from the log-probs to where they part.
CHAIN = 64
# The operations that carry the log-probs on unchanged in value (their shape, their layout, a
# mask's zeros), by the start of their backward node's name: the chain is followed through
# these only. A log-prob read once by anything else (GRPO's ratio ``logp − old`` alone, without
# a KL term) is one use, whatever reads its result twice further on.
CARRY = ("View", "Reshape", "UnsafeView", "Slice", "Select", "Cat", "MaskedFill", "Unsqueeze",
         "Squeeze", "Transpose", "Permute", "Clone", "ToCopy", "Expand", "AsStrided", "Split",
         "Narrow", "Index")


def readers(root: object) -> dict[tuple[int, int], list[Edge]]:
    """Per output of each node of the graph below ``root`` (keyed by the node's id and the
    output), the nodes that read it and as which of their inputs."""
    found: dict[tuple[int, int], list[Edge]] = {}
    seen = {id(root)}
    todo = [root]
    while todo:
        node = todo.pop()
        for i, (child, out) in enumerate(getattr(node, "next_functions", ())):
            if child is None:
                continue
            found.setdefault((id(child), out), []).append((node, i))
            if id(child) not in seen:
                seen.add(id(child))
                todo.append(child)
    return found


def _name(node: object) -> str:
    return str(getattr(node, "name", lambda: type(node).__name__)())


def label(node: object, operand: int) -> str:
    """A use's name: the operation reading the log-probs and which operand they are."""
    name = _name(node)
    if name == "SubBackward0":
        return "logp − x" if operand == 0 else "x − logp"
    if name == "MulBackward0":
        return "logp × x"  # either operand: a product
    return f"{name} (operand {operand + 1})"


def uses(root: object, source: Edge) -> list[tuple[str, Edge]]:
    """The uses of the tensor ``source`` (its node, its output) in the graph below ``root``:
    where a chain of once-read operations from it reaches a tensor read more than once, each
    reading (its name, the reading node and input); none where the log-probs are read once
    (one term: the totals say all) or the chain ends otherwise."""
    found = readers(root)
    node, out = source
    for _ in range(CHAIN):
        read = found.get((id(node), out), [])
        if len(read) > 1:
            return [(label(n, i), (n, i)) for n, i in read]
        if not read or not _name(read[0][0]).startswith(CARRY):
            return []
        node, out = read[0][0], 0
    return []


def hook(node: object, operand: int, keep: Callable[[torch.Tensor], None]) -> None:
    """``keep`` the gradient ``node`` sends back to its input ``operand`` in the backward
    pass."""
    def sent(grad_inputs: tuple[torch.Tensor | None, ...], _: object) -> None:
        grad = grad_inputs[operand] if operand < len(grad_inputs) else None
        if grad is not None:
            keep(grad)

    node.register_hook(RECORDING("a use of the log-probs in backward", sent))  # type: ignore[attr-defined]


class Split:
    """One micro-batch's log-probs, their uses in the loss weighed apart (the module's
    docstring): per use, the gradient it sent back, float64, in the log-probs' layout (rows,
    positions); the sent gradient is the log-probs' last ``width`` positions of each row."""

    def __init__(self) -> None:
        self.source: Edge | None = None
        self.hooked = False
        self.sent: dict[str, torch.Tensor] = {}
        self.lost = False  # a use's gradient that does not fit the layout

    def watch(self, out: torch.Tensor) -> None:
        """The log-probs ``out`` (TRL's fused head's), whose uses a backward pass will weigh."""
        self.source = (out.grad_fn, out.output_nr) if out.grad_fn is not None else None

    def backward(self, root: object, total: torch.Tensor) -> None:
        """A backward pass from ``root`` is about to run: each use of the log-probs hooked
        (once: the graph is the micro-batch's), ``total`` their watched gradient's layout."""
        if self.source is None or self.hooked:
            return
        self.hooked = True
        for name, (node, operand) in uses(root, self.source):
            hook(node, operand, functools.partial(self.add, name, total=total))

    def add(self, name: str, grad: torch.Tensor, *, total: torch.Tensor) -> None:
        import torch

        rows, width = total.shape
        if grad.dim() != 2 or grad.shape[0] != rows or grad.shape[1] > width:
            self.lost = True
            return
        if name not in self.sent:
            self.sent[name] = torch.zeros_like(total)
        self.sent[name][:, width - grad.shape[1]:] += grad.detach().to(torch.float64)

    def zero(self) -> None:
        for sent in self.sent.values():
            sent.zero_()

    def taken(self, total: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per use its gradient, where the uses add up to ``total`` (the gradient reaching the
        log-probs, float32's rounding apart); none otherwise (a use not seen, or misplaced)."""
        if self.lost or len(self.sent) < 2:
            return {}
        import torch

        if not total.numel():
            return {}
        added = torch.stack(list(self.sent.values())).sum(dim=0)
        if float((added - total).abs().max()) > 1e-5 * max(float(total.abs().max()), 1e-30):
            return {}
        return dict(self.sent)
