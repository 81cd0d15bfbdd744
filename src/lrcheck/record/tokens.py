"""Each token's weight in the update, measured in the backward pass: ``∂L/∂logp_t``, the
gradient of the loss with respect to the log-probability of each token the model scored,
where that log-probability is a tensor the recording can reach (TRL's fused LM head, which
its GRPO, DPO and SFT trainers call: ``record.trl_head.tap_trl``). An RL loss is built from
these log-probs, not from a torch loss function, so the per-sample ``weights`` of the torch
losses see only their sum; here every token keeps its own.

The weights are kept per row of the micro-batch, in float64, accumulated over the backward
passes that reach them, and read at the update divided as the row weights are (the
GradScaler's scale, the world size). A row's tokens are its real positions that have a real
token before them (the ``attention_mask`` of the forward, shifted as a causal LM shifts its
labels; without a mask, every position): padding on either side, and its width, drop out, so
two runs that pad the same rows differently hold the same tokens. Stored on the Recorder line
as ``fed_tokens``: per micro-batch (as ``fed``), null or ``[tokens per row, base64 of their
little-endian float64]``, and where the loss reads the log-probs in several places (its terms:
``record.uses``) a third item, per use its name and the base64 of the weights it sent back."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from lrcheck.errors import SpecError
from lrcheck.record.guard import RECORDING

# A GRPO candidate rank's counts of the rollouts it replayed and generated (record.rollouts).
HELD = "rollouts-rank{rank}.json"

if TYPE_CHECKING:
    import torch

# Per row, each token's weight: a list per row of floats.
Rows = list[list[float]]
# Per use of the log-probs (``record.uses``), its rows.
Uses = dict[str, Rows]


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


def pack(tokens: Sequence[Rows | None],
         uses: Sequence[Uses | None] | None = None) -> list[list[object] | None]:
    """The ``fed_tokens`` of a line: per micro-batch null, or its rows' token counts and the
    base64 of all their weights (and, where ``uses`` has some for it, per use its own)."""
    out: list[list[object] | None] = []
    for m, micro in enumerate(tokens):
        if micro is None:
            out.append(None)
            continue
        entry: list[object] = [[len(row) for row in micro], _b64(micro)]
        by_use = uses[m] if uses is not None and m < len(uses) else None
        if by_use:
            entry.append({name: _b64(rows) for name, rows in by_use.items()})
        out.append(entry)
    return out


def _b64(rows: Rows) -> str:
    return base64.b64encode(np.asarray([w for row in rows for w in row], "<f8").tobytes()).decode()


def _rows(counts: list[int], text: object) -> list[np.ndarray]:
    """Rows of ``counts`` tokens read from the base64 ``text``; ValueError where it is not."""
    if not isinstance(text, str):
        raise ValueError(text)
    try:
        flat = np.frombuffer(base64.b64decode(text, validate=True), dtype="<f8")
    except binascii.Error:
        raise ValueError(text) from None
    if len(flat) != sum(counts):
        raise ValueError(text)
    return np.split(flat.astype(np.float64), np.cumsum(counts)[:-1]) if counts else []


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
        if not (isinstance(micro, list) and len(micro) in (2, 3) and isinstance(micro[0], list)
                and all(isinstance(n, int) and n >= 0 for n in micro[0])):
            raise ValueError(micro)
        out.append(_rows(micro[0], micro[1]))
    return out


def unpack_uses(value: object) -> list[dict[str, list[np.ndarray]] | None]:
    """Per micro-batch of a ``fed_tokens`` that ``unpack`` read, its uses' rows (None: the
    log-probs read in one place, or not measured); ValueError where malformed."""
    out: list[dict[str, list[np.ndarray]] | None] = []
    for micro in value if isinstance(value, list) else []:
        by_use = micro[2] if isinstance(micro, list) and len(micro) == 3 else None
        if by_use is not None and not isinstance(by_use, dict):
            raise ValueError(micro)
        out.append(None if not by_use else
                   {str(name): _rows(micro[0], text) for name, text in by_use.items()})
    return out


Read = list[tuple[list[np.ndarray], dict[str, list[np.ndarray]] | None] | None]


def read(value: object, micro: int, where: str) -> Read:
    """A line's ``fed_tokens`` (``value``; None: not recorded, none measured) read back
    (``unpack``, ``unpack_uses``), for the ``micro`` micro-batches of its ``fed``: per
    micro-batch None or its rows and its uses' rows; a ``SpecError`` naming ``where`` when it
    is not what ``pack`` writes."""
    if value is None:
        return [None] * micro
    try:
        found = unpack(value)
        if len(found) != micro:
            raise ValueError(value)
        return [None if rows is None else (rows, by_use)
                for rows, by_use in zip(found, unpack_uses(value), strict=True)]
    except ValueError:
        raise SpecError(f"{where}: 'fed_tokens' must hold, per micro-batch of 'fed', null or "
                        "[tokens per row, base64 float64] (lrcheck.record.tokens.pack)") from None


def read_held(folder: Path) -> str | None:
    """What the candidate's record folder says was held equal between the two runs' GRPO
    updates: its ranks' rollouts replayed from the reference's, or generated by the candidate
    itself; None where it replayed or generated none (no GRPO generation recorded)."""
    replayed = generated = 0
    for path in sorted(folder.glob(HELD.format(rank="*"))):
        try:
            counts = json.loads(path.read_text())
        except (OSError, ValueError):  # unreadable: as if none (the verdict does not say it)
            continue
        if isinstance(counts, dict):
            replayed += _count(counts, "replayed")
            generated += _count(counts, "generated")
    if not replayed + generated:
        return None
    said = (f"the rollouts held equal: {replayed} of the candidate's {replayed + generated} "
            "generation batches (over its ranks) were the reference's, replayed (prompts, "
            "completions, masks, advantages, old and reference log-probs), not generated")
    if generated:
        said += (f"; {generated} it generated itself (the reference wrote none that divide "
                 "into its ranks' rows): data says whether they differ")
    return said


def _count(counts: dict[str, object], key: str) -> int:
    value = counts.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
