"""The loss each update differentiated, for holding a run's own logs against it
(``logs.truth``): the value of the tensor each outermost ``backward()`` was called on (a
scalar, called without a gradient: what a loop accumulating over GA micro-batches
differentiates is its loss / GA), kept detached on its device and read once, at the update, in
one transfer. A GradScaler's scale divides it (the scaled loss is what was differentiated, the
loss is what a log holds); ``zero_grad`` drops the values before it (their gradients are gone).
The Recorder line gains ``loss_backward``, their sum, and ``loss_micro``, each value in the
order run (null where a backward was not of a scalar); and a router's gradient per term,
``router_terms`` (``record.router``)."""

from __future__ import annotations

from typing import Any

import torch

from lrcheck.record.router import RouterTerms
from lrcheck.recorder import json_number


class Losses:
    """The values differentiated since the last update of this process's first optimizer."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor | None] = []
        self.terms = RouterTerms()  # hooked before each backward pass (``record.calls``)

    def backward(self, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        """One outermost ``torch.autograd.backward(tensors, grad_tensors, …)``."""
        tensor = args[0] if args else kwargs.get("tensors")
        gradient = args[1] if len(args) > 1 else kwargs.get("grad_tensors")
        if isinstance(tensor, torch.Tensor) and gradient is None and tensor.numel() == 1:
            self.values.append(tensor.detach().reshape(()))
        else:
            self.values.append(None)

    def zeroed(self) -> None:
        self.values = []
        self.terms.zeroed()

    def take(self, scale: float) -> dict[str, Any]:
        """The Recorder keys of the values since the last ``take``, divided by ``scale``."""
        return self.terms.take(scale) | self._values(scale)

    def _values(self, scale: float) -> dict[str, object]:
        values, self.values = self.values, []
        measured = [v for v in values if v is not None]
        if not measured:
            return {"loss_micro": [None] * len(values)} if values else {}
        devices = {v.device for v in measured}
        on = measured[0].device if len(devices) == 1 else torch.device("cpu")
        read = iter((torch.stack([v.to(on, torch.float64) for v in measured]) / scale).tolist())
        micro = [None if v is None else json_number(next(read)) for v in values]
        out: dict[str, Any] = {"loss_micro": micro}
        if all(v is not None for v in values):
            out["loss_backward"] = json_number(sum(float(m) for m in micro if m is not None))
        return out
