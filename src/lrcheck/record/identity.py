"""Each sample's identity in a recorded process (``record.taps``): a 62-bit hash of a row of
the model's first input, computed on its device — an integer dot product, wrapping in 64 bits,
of the row's bits with coefficients fixed by position, so that it depends on nothing but the
row. With an ``attention_mask`` the masked positions are left out and positions count from the
first unmasked one: a sequence padded to different lengths, left or right, keeps its identity.
Two identical rows have one identity."""

from __future__ import annotations

import functools
from typing import Any

import torch

_BITS = 62
_MASK = (1 << _BITS) - 1
_JOIN = 0x1E3779B97F4A7C15


def first_input(args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """A forward's first tensor input with at least one dimension — ``input_ids`` where given
    by name; a first argument that is a dict is read as named inputs, a list or tuple for its
    first tensor — with the ``attention_mask`` given beside it, if any."""
    named = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}
    if args and isinstance(args[0], dict):
        named = {**{str(k): v for k, v in args[0].items() if isinstance(v, torch.Tensor)},
                 **named}
    else:
        for value in args:
            items = value if isinstance(value, (list, tuple)) else (value,)
            x = next((v for v in items if isinstance(v, torch.Tensor)), None)
            if x is not None:
                return (x, named.get("attention_mask")) if x.dim() else None
    x = named.get("input_ids")
    if x is None:
        x = next((v for k, v in named.items() if k != "attention_mask" and v.dim()), None)
    if x is None or not x.dim():
        return None
    return x, named.get("attention_mask")


def first_tensor(value: object) -> torch.Tensor | None:
    """The first tensor of a module's output: itself, or the first of a tuple, list or dict
    (a ``ModelOutput`` is a dict), one level deep."""
    if isinstance(value, torch.Tensor):
        return value
    items = value.values() if isinstance(value, dict) else \
        value if isinstance(value, (list, tuple)) else ()
    return next((v for v in items if isinstance(v, torch.Tensor)), None)


def join(first: torch.Tensor, second: torch.Tensor) -> torch.Tensor:
    """The identities of rows fed in two parts (``first``'s row i and ``second``'s), as one:
    wrapping in 64 bits, with an odd multiplier (splitmix64's, 62 bits) so that the order of
    the parts counts."""
    return (first * _JOIN + second) & _MASK


def row_ids(x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's identity (int64, ``len(x)``, on ``x``'s device): a dot product, wrapping in
    64 bits, of the row's bits with random coefficients fixed by position; with a ``mask`` of
    ``x``'s shape (B, T), the masked positions left out and positions counted from the first
    unmasked one."""
    with torch.no_grad():
        if not x.numel():
            return torch.zeros(len(x), dtype=torch.int64, device=x.device)
        masked = mask is not None and mask.shape == x.shape and x.dim() == 2
        flat = x.detach().reshape(len(x), -1)
        rows = _bits(flat) if masked else _words(flat)
        width = rows.shape[1]
        coeff = _coefficients(max(width, 1), rows.device)
        if masked and mask is not None:
            keep = mask.detach().to(torch.bool)
            start = torch.argmax(keep.to(torch.int32), dim=1, keepdim=True)
            at = (torch.arange(width, device=rows.device) - start).clamp(min=0)
            terms = rows * coeff[at] * keep.to(torch.int64)
            return (terms.sum(dim=1) + keep.sum(dim=1) * _LENGTH) & _MASK
        # Zeros add nothing: a row padded with zeros to any width keeps its identity. On the
        # CPU a matrix-vector product makes no B×W temporary (CUDA has no integer one).
        if rows.device.type == "cpu":
            return torch.mv(rows, coeff[:width]) & _MASK
        return (rows * coeff[:width]).sum(dim=1) & _MASK


def _words(rows: torch.Tensor) -> torch.Tensor:
    """``rows``' bytes read as int64 words (the last padded with zero bytes): half the
    multiplications of ``_bits`` for float32, an eighth for bytes, and no copy where a row's
    bytes fill whole words. Zero bytes add nothing, so zero padding keeps a row's identity."""
    if rows.is_complex():
        rows = torch.view_as_real(rows).reshape(len(rows), -1)
    if rows.dtype == torch.bool:
        rows = rows.to(torch.uint8)
    size = rows.element_size()
    if size == 8:
        return rows.contiguous().view(torch.int64)
    per_word = 8 // size
    short = -rows.shape[1] % per_word
    if short:
        rows = torch.nn.functional.pad(rows, (0, short))
    return rows.contiguous().view(torch.int64)


def _bits(rows: torch.Tensor) -> torch.Tensor:
    """``rows`` as int64: a float's bit pattern, an integer's or a bool's value."""
    if rows.is_floating_point() or rows.is_complex():
        if rows.is_complex():
            rows = torch.view_as_real(rows).reshape(len(rows), -1)
        as_int = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}
        rows = rows.contiguous().view(as_int[rows.element_size()])
    return rows.to(torch.int64)


@functools.lru_cache(maxsize=64)
def _coefficients(width: int, device: torch.device) -> torch.Tensor:
    """The coefficients of positions 0 to ``width - 1`` (odd, 62 bits): splitmix64 of the
    position, so that a position's coefficient is the same in rows of any width."""
    import numpy as np

    with np.errstate(over="ignore"):
        z = np.arange(width, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15) \
            + np.uint64(0x1C0FFEE)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    odd = (z & np.uint64(_MASK)) | np.uint64(1)
    return torch.from_numpy(odd.astype(np.int64)).to(device)


_LENGTH = int(_coefficients(1, torch.device("cpu"))[0]) ^ 0x5A5A5A5A5A5A5A5
