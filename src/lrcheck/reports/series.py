"""A whole per-update series (an LR or loss trace of up to millions of updates) packed small for
report.html, where ``assets/report.js`` unpacks it.

Every value is kept, as float32 (7 significant digits: what a hover shows; the difference of
two runs is packed as its own series, so a gap of 1e-13 keeps its digits). The float32 bit
patterns, read as integers, are differenced ``order`` times — against the series' own previous
values, or, for a candidate, first against the reference's bits — which turns a smooth or
piecewise-constant schedule into small integers or zeros. Those are zigzag-coded (small
magnitude → small unsigned), split into four byte planes (high bytes, nearly all zero, lie
together), deflated (zlib; the browser's ``DecompressionStream("deflate")`` inflates it) and
base64'd. Both ways are tried for a candidate and the smaller kept.

A cosine over 10⁶ updates packs into about 0.3 bytes per value; a constant or step schedule, or
a candidate equal to its reference, into almost nothing.
"""

from __future__ import annotations

import base64
import zlib
from typing import TypedDict

import numpy as np

LEVEL = 6


def _bits(values: np.ndarray) -> np.ndarray:
    """The float32 bit patterns of ``values`` as int32 (whose arithmetic wraps modulo 2**32,
    as JavaScript's ``| 0`` does)."""
    return np.ascontiguousarray(values, dtype=np.float32).view(np.int32)


def _pack(ints: np.ndarray, order: int) -> bytes:
    for _ in range(order):
        ints = np.diff(ints, prepend=np.int32(0))
    zigzag = ((ints << 1) ^ (ints >> 31)).astype("<i4")
    planes = zigzag.view(np.uint8).reshape(-1, 4).T
    return zlib.compress(np.ascontiguousarray(planes).tobytes(), LEVEL)


class Packed(TypedDict):
    """A series packed for report.js: ``n`` values, differenced ``order`` times, on the
    reference's values where ``base``, as base64 of the zlib of their zigzag bytes."""

    n: int
    order: int
    base: bool
    data: str


def pack(values: np.ndarray, base: np.ndarray | None = None) -> Packed:
    """``values`` (1-D, NaN allowed) as ``{"n", "order", "base", "data"}`` for report.js;
    ``base``: the reference's values of the same length, tried as a starting point (the only
    way tried when the two are the same)."""
    bits = _bits(values)
    tries = []
    if base is not None and len(base) == len(bits):
        residual = bits - _bits(base)
        tries.append((_pack(residual, 1), 1, True))
    if not tries or residual.any():
        tries.append((_pack(bits, 2), 2, False))
    data, order, on_base = min(tries, key=lambda t: len(t[0]))
    return {"n": len(bits), "order": order, "base": on_base,
            "data": base64.b64encode(data).decode("ascii")}


def unpack(packed: Packed, base: np.ndarray | None = None) -> np.ndarray:
    """The float32 values ``pack`` packed: what report.js computes, here for the tests."""
    n = packed["n"]
    raw = np.frombuffer(zlib.decompress(base64.b64decode(packed["data"])), np.uint8)
    zigzag = raw.reshape(4, n).T.copy().view("<u4").ravel()
    ints = ((zigzag >> 1).astype(np.int32) ^ -(zigzag & 1).astype(np.int32))
    for _ in range(packed["order"]):
        ints = np.cumsum(ints, dtype=np.int32)
    if packed["base"]:
        assert base is not None
        ints = ints + _bits(base)
    values: np.ndarray = ints.view(np.float32)
    return values
