"""A long trace in little room: a digest of an LR trace that survives last-bit differences
between machines, and the updates a thinned selection keeps."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

import numpy as np

DIGEST_BITS = 40


def lr_digest(lrs: np.ndarray) -> str:
    """``sha256:`` of an LR trace (updates x param groups) in a canonical form: the shape, then
    every value's binary exponent and its mantissa rounded to ``DIGEST_BITS`` bits (about 12
    significant digits) as little-endian int64, so that last-bit differences of the maths
    library between machines do not change it."""
    rows = np.asarray(lrs, dtype=np.float64).reshape(len(lrs), -1)
    mantissa, exponent = np.frexp(rows)
    digest = hashlib.sha256(f"{rows.shape[0]}x{rows.shape[1]}\n".encode())
    digest.update(np.round(mantissa * 2.0 ** DIGEST_BITS).astype("<i8").tobytes())
    digest.update(exponent.astype("<i8").tobytes())
    return "sha256:" + digest.hexdigest()


def thin_indices(n: int, limit: int, pinned: Iterable[int] = (), around: int = 2) -> np.ndarray:
    """At most about ``limit`` evenly spaced indices of ``range(n)``, always with the first and
    the last, plus ``around`` on either side of every index in ``pinned``."""
    if n <= limit:
        return np.arange(n)
    even = np.linspace(0, n - 1, limit).astype(np.int64)
    near = [np.arange(max(0, p - around), min(n, p + around + 1)) for p in pinned]
    return np.unique(np.concatenate([even, *near]))
