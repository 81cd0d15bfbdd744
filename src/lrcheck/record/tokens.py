"""Each token's weight in the update, measured in the backward pass: ``∂L/∂logp_t``, the
gradient of the loss with respect to the log-probability of each token the model scored,
where that log-probability is a tensor the recording can reach (TRL's fused LM head, which
its GRPO, DPO and SFT trainers call: ``record.taps.tap_trl``). An RL loss is built from
these log-probs, not from a torch loss function, so the per-sample ``weights`` of the torch
losses see only their sum; here every token keeps its own.

The weights are kept per row of the micro-batch, in float64, accumulated over the backward
passes that reach them, and read at the update divided as the row weights are (the
GradScaler's scale, the world size). A row's tokens are its real positions that have a real
token before them (the ``attention_mask`` of the forward, shifted as a causal LM shifts its
labels; without a mask, every position): padding on either side, and its width, drop out, so
two runs that pad the same rows differently hold the same tokens. Stored on the Recorder line
as ``fed_tokens``: per micro-batch (as ``fed``), null or ``[tokens per row, base64 of their
little-endian float64]``."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from lrcheck.errors import SpecError
from lrcheck.record.guard import RECORDING

if TYPE_CHECKING:
    import torch

# Per row, each token's weight: a list per row of floats.
Rows = list[list[float]]


def watch(grads: list[torch.Tensor], out: torch.Tensor, rows: int) -> bool:
    """Hook ``out`` (the log-probs of ``rows`` rows, flattened or not): the gradient reaching
    it, as float64 of shape ``(rows, positions)``, is added to ``grads`` (one tensor, made
    here). A micro-batch scored once; a second call on it (log-probs in chunks, say) leaves
    its tokens unmeasured: ``grads`` emptied, False. False too where ``out`` does not divide
    into ``rows``."""
    if grads or not rows or out.numel() % rows:
        grads.clear()
        return False
    import torch

    grads.append(torch.zeros((rows, out.numel() // rows), dtype=torch.float64,
                             device=out.device))
    total = grads[0]

    def reached(grad: torch.Tensor) -> None:
        if grads and grads[0] is total:
            total.add_(grad.detach().to(torch.float64).reshape(total.shape))

    out.register_hook(RECORDING("the tokens' weights in backward", reached))
    return True


def rows(grads: torch.Tensor, mask: torch.Tensor | None) -> list[torch.Tensor]:
    """Per row, the weights of its tokens (see the module's docstring); ``mask``: the
    forward's ``attention_mask`` (rows, positions + 1), or None."""
    if mask is None or mask.shape != (grads.shape[0], grads.shape[1] + 1):
        return list(grads)
    real = mask.to(grads.device) != 0
    seen = real.cumsum(dim=1)[:, :-1] > 0  # a real token at or before the position
    keep = real[:, 1:] & seen
    return [g[k] for g, k in zip(grads, keep, strict=True)]


def pack(tokens: Sequence[Rows | None]) -> list[list[object] | None]:
    """The ``fed_tokens`` of a line: per micro-batch null, or its rows' token counts and the
    base64 of all their weights."""
    out: list[list[object] | None] = []
    for micro in tokens:
        if micro is None:
            out.append(None)
            continue
        flat = np.asarray([w for row in micro for w in row], dtype="<f8")
        out.append([[len(row) for row in micro], base64.b64encode(flat.tobytes()).decode()])
    return out


def unpack(value: object) -> list[list[np.ndarray] | None]:
    """``fed_tokens`` read back: per micro-batch null or one array per row; ValueError where
    the value is not one ``pack`` writes."""
    if not isinstance(value, list):
        raise ValueError(value)
    out: list[list[np.ndarray] | None] = []
    for micro in value:
        if micro is None:
            out.append(None)
            continue
        if not (isinstance(micro, list) and len(micro) == 2 and isinstance(micro[1], str)
                and isinstance(micro[0], list)
                and all(isinstance(n, int) and n >= 0 for n in micro[0])):
            raise ValueError(micro)
        try:
            flat = np.frombuffer(base64.b64decode(micro[1], validate=True), dtype="<f8")
        except binascii.Error:
            raise ValueError(micro) from None
        if len(flat) != sum(micro[0]):
            raise ValueError(micro)
        cuts = np.cumsum(micro[0])[:-1]
        out.append(np.split(flat.astype(np.float64), cuts) if micro[0] else [])
    return out


def read(value: object, micro: int, where: str) -> list[list[np.ndarray] | None]:
    """A line's ``fed_tokens`` (``value``; None: not recorded, none measured) read back
    (``unpack``), for the ``micro`` micro-batches of its ``fed``; a ``SpecError`` naming
    ``where`` when it is not what ``pack`` writes."""
    if value is None:
        return [None] * micro
    try:
        found = unpack(value)
        if len(found) != micro:
            raise ValueError(value)
    except ValueError:
        raise SpecError(f"{where}: 'fed_tokens' must hold, per micro-batch of 'fed', null or "
                        "[tokens per row, base64 float64] (lrcheck.record.tokens.pack)") from None
    return found
