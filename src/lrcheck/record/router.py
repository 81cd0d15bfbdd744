"""A mixture of experts' router gradient weighed term by term: the router's scores (a softmax
or a sigmoid of its logits) are read by the top-k that routes the tokens — the path of the
cross-entropy, through the gates — and by the auxiliary load-balancing loss (Switch's: the
experts' load times their mean score), so the gradient reaching the scores is the sum of what
each use sends back. Before each backward pass the loss's graph is walked from its root
(``record.uses``' ``readers``); from each top-k down the once-read chain that carries its input
(views, the score function: ``CARRY``, ``SCORES``), the first tensor read more than once is
where the terms part, and a hook on each reader keeps the squared norm of the gradient it
sends back: the top-k's as the ``routing`` term, the others' as the ``auxiliary`` one, summed
over the update's backward passes and the MoE layers. The Recorder line gains
``router_terms`` (``record.experts`` merges the ranks': every rank's own tokens' rows, over the
ranks averaged; ``checks.experts`` compares them). Nothing the loss computes changes. The
graph is walked at every backward pass until the first update, and after it only where a
router was found."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from lrcheck.record.uses import CARRY, CHAIN, Edge, hook, readers

if TYPE_CHECKING:
    import torch

# The router's score functions, carried through from the top-k down to the logits.
SCORES = ("Softmax", "Sigmoid", "LogSoftmax")
TERMS = ("routing", "auxiliary")


def _name(node: object) -> str:
    return str(getattr(node, "name", lambda: type(node).__name__)())


def parted(found: dict[tuple[int, int], list[Edge]], topk: object
           ) -> tuple[Edge, list[Edge]] | None:
    """Where the top-k ``topk``'s input parts (``found``: the graph's readers): the reader on
    the top-k's path and the others; None where its chain ends first."""
    reader: Edge = (topk, 0)
    inputs = getattr(topk, "next_functions", ())
    node, out = inputs[0] if inputs else (None, 0)
    for _ in range(CHAIN):
        if node is None:
            return None
        read = found.get((id(node), out), [])
        if len(read) > 1:
            return reader, [r for r in read if r[0] is not reader[0] or r[1] != reader[1]]
        below = getattr(node, "next_functions", ())
        if not _name(node).startswith(CARRY + SCORES) or not below:
            return None
        reader = (node, 0)
        node, out = below[0]
    return None


class RouterTerms:
    """The router's gradient per term since the last update (the module's docstring)."""

    def __init__(self) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.hooked: list[object] = []  # the readers hooked this update (kept: ids are reused)
        self.found = False  # a router seen: the graph is walked at every backward pass
        self.taken = False  # an update taken: walked only where a router was found

    def backward(self, root: object) -> None:
        """A backward pass from ``root`` is about to run: each router's uses hooked."""
        if self.taken and not self.found:
            return
        found = readers(root)
        tops = {id(n): n for edges in found.values() for n, _ in edges
                if _name(n).startswith("TopkBackward")}
        for topk in tops.values():
            split = parted(found, topk)
            if split is None:
                continue
            route, others = split
            for term, (node, operand) in [(TERMS[0], route)] + [(TERMS[1], e) for e in others]:
                if any(node is n for n in self.hooked):
                    continue
                self.hooked.append(node)
                self.found = True
                hook(node, operand, functools.partial(self.add, term))

    def add(self, term: str, grad: torch.Tensor) -> None:
        import torch

        square = grad.detach().to(torch.float64).pow(2).sum()
        self.sums[term] = self.sums[term] + square if term in self.sums else square

    def zeroed(self) -> None:
        """``zero_grad``: the gradients so far are gone."""
        self.sums = {}

    def take(self, scale: float) -> dict[str, object]:
        """``router_terms``: each term's squared norm since the last ``take`` (a GradScaler's
        ``scale`` divided out), one transfer; none where no router was seen."""
        sums, self.sums, self.hooked, self.taken = self.sums, {}, [], True
        if not sums:
            return {}
        import torch

        values = (torch.stack([sums[t].cpu() for t in sums]) / scale ** 2).tolist()
        return {"router_terms": dict(zip(sums, values, strict=True))}
