"""The EMA model of a recorded process, fingerprinted beside the model for ``ema-params``.

Which EMA: the first object of a process whose update ``record.calls`` counts as
``ema_update`` — torch's ``AveragedModel.update_parameters``, and, once their modules are
imported, timm's ``ModelEmaV2`` / ``ModelEmaV3`` ``update`` and diffusers' ``EMAModel.step``. A
second EMA of the same process is counted, not fingerprinted.

When: the EMA *after update k* is its state once every EMA update that folded in update k's
weights has run — those after update k's step and those of update k+1's micro-batches before its
step, which see the same weights — so it is taken as update k+1's step begins (the first
optimizer's pre-hook), and when the process ends for its last update. Where the model's
parameters are fingerprinted (every K updates, update 0 always), so is the EMA, and after the
last update of all (the EMA a training gives, whatever K): a fingerprint
(two reductions per tensor) of 2.1 M parameters took 15.8 ms here against 59 ms for an update of
the bench loop (BENCHMARKS.md): every update, it would cost about a quarter of the loop.

Where: ``ema-rank{R}.jsonl`` beside the Recorder file, a header (the EMA's class, the call that
updates it, its tensors' names, whether they are sharded) and then per fingerprinted update
``{"after": k, "fingerprint": [...]}``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

import torch

from lrcheck.record.optimizers import local_tensor
from lrcheck.recorder import fingerprint, json_number

FILE = "ema-{stem}.jsonl"
# What updates an EMA, by the module and class that define it: the class's name in the details,
# and the call (``record.calls`` wraps each).
KINDS = {("torch.optim.swa_utils", "AveragedModel"): ("AveragedModel", "update_parameters"),
         ("timm.utils.model_ema", "ModelEmaV2"): ("timm's ModelEmaV2", "update"),
         ("timm.utils.model_ema", "ModelEmaV3"): ("timm's ModelEmaV3", "update"),
         ("diffusers.training_utils", "EMAModel"): ("diffusers' EMAModel", "step")}


def tensors(ema: Any) -> list[tuple[str, torch.Tensor]]:
    """The EMA's averaged tensors, named: its copy of the model's parameters (``module``:
    AveragedModel, timm's), or diffusers' ``shadow_params`` (named by their place)."""
    module = getattr(ema, "module", None)
    if isinstance(module, torch.nn.Module):
        return list(module.named_parameters())
    shadow = getattr(ema, "shadow_params", None)
    if isinstance(shadow, (list, tuple)):
        return [(f"shadow_params.{i}", t) for i, t in enumerate(shadow)
                if isinstance(t, torch.Tensor)]
    return []


class EmaWatch:
    """The process's EMA (the first one updated) and its file."""

    def __init__(self) -> None:
        # Held (not weakly): the EMA after the last update is taken as the process ends, when
        # the loop that made it has returned.
        self.ema: Any = None
        self.kind = ("", "")
        self.file: IO[str] | None = None
        self.taken = -1  # the last update whose EMA was written

    def updated(self, ema: Any, kind: tuple[str, str]) -> None:
        """An EMA update ran on ``ema``: the first EMA updated is the one fingerprinted."""
        if self.ema is None:
            self.ema, self.kind = ema, kind

    def at_update(self, done: int, every: int, path: Path, last: bool = False) -> None:
        """An optimizer update begins after ``done`` updates (``last``: the process ends): the
        EMA after the last of them, where that update is fingerprinted (every ``every``), and
        after the last update of all (the EMA the training gives)."""
        after = done - 1
        if after < 0 or not every or (after % every and not last) or after <= self.taken:
            return
        if self.ema is None:
            return
        named = tensors(self.ema)
        prints = fingerprint(local_tensor(t) for _, t in named)
        self._open(path, named).write(json.dumps(
            {"after": after, "fingerprint": [json_number(v) for v in prints]},
            allow_nan=False) + "\n")
        self.file.flush()  # type: ignore[union-attr]
        self.taken = after

    def close(self, path: Path) -> None:
        """The header at least, where an EMA was updated and none was fingerprinted."""
        if self.ema is not None and self.file is None:
            self._open(path, tensors(self.ema))
        if self.file is not None:
            self.file.close()
        self.ema, self.file = None, None  # nothing more is written

    def _open(self, path: Path, named: list[tuple[str, torch.Tensor]]) -> IO[str]:
        if self.file is None:
            self.file = path.open("w", encoding="utf-8")
            cls, call = self.kind
            self.file.write(json.dumps({
                "ema": cls, "call": f"{cls}.{call}", "names": [n for n, _ in named],
                "sharded": any(hasattr(t, "to_local") for _, t in named)}) + "\n")
        return self.file
