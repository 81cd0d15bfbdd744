"""A logged gradient norm held against the ranks' own, in a run whose ranks hold shards of the
gradient (tensor parallel, FSDP2, HSDP, pipeline stages: ``record.placed``): each rank's local
norm — of the shards it holds, replicas included — is recorded at fingerprinted updates
(``grad_sq_ranks``, after the clip), beside the true global norm merged from the shards, each
counted once (``grad_sq``). A log that holds one rank's local norm rather than the global one
is named: ``clip_grad_norm_`` on DTensor parameters returns a norm that is reduced over the
ranks only when materialised (``full_tensor()``), so a log of its local value (``to_local()``,
or ``.item()`` of a norm reduced lazily) reads rank 0's shards' norm, about 1/√N of the true
one over N ranks holding a shard each (miles_diffusion PR #35, torchtitan #766). Pure: numbers
in, words out."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

Close = Callable[[np.ndarray, np.ndarray], np.ndarray]
EPS = 1e-6  # torch's clip_grad_norm_: max_norm / (total_norm + 1e-6)
WHY = ("a sharded norm's local value, as to_local() or item() of a DTensor norm reads it "
       "before full_tensor(): miles_diffusion PR #35")


def rank_norms(records: Sequence[Mapping[str, object]]) -> np.ndarray:
    """Per update, each rank's local gradient norm after the clip (updates × ranks; NaN where
    not measured); ``(updates, 0)`` where no update measured several ranks'."""
    rows = [r.get("grad_sq_ranks") for r in records]
    width = max((len(q) for q in rows if isinstance(q, list)), default=0)
    out = np.full((len(records), width if width > 1 else 0), math.nan)
    for k, squares in enumerate(rows):
        if isinstance(squares, list) and len(squares) == out.shape[1]:
            out[k] = np.sqrt(np.asarray(squares, dtype=np.float64))
    return out


def coefficients(pre: np.ndarray, top: np.ndarray) -> np.ndarray:
    """The clip's coefficient at each update, ``min(1, max_norm / (norm + 1e-6))`` from the
    norm the run clipped with (``pre``); 1 where it did not clip by norm."""
    return np.where(np.isnan(top), 1.0, np.minimum(1.0, top / (pre + EPS)))


def merged_words(ks: np.ndarray, values: np.ndarray, expected: np.ndarray, ranks: np.ndarray,
                 close: Close) -> str:
    """Words saying the logged ``values`` (at updates ``ks``) are the true global norm merged
    from the ranks' shards, where the ranks' were measured there and they equal ``expected``
    (the merged norm, at ``ks``) in a run of several ranks."""
    if ranks.shape[1] < 2 or not len(ks) or np.isnan(ranks[ks]).any() \
            or np.isnan(expected).any() or not close(values, expected).all():
        return ""
    return f": the true global norm, merged from the {ranks.shape[1]} ranks' shards, each once"


def local_words(ks: np.ndarray, values: np.ndarray, ranks: np.ndarray, stepped: np.ndarray,
                coef: np.ndarray, close: Close) -> str | None:
    """Where the logged ``values`` (at updates ``ks``) are one rank's local norm, before or
    after the clip (``coef``, each update's), at every update: the sentence naming it and its
    ratio to the true global norm (``stepped``: the merged norm after the clip); None
    otherwise."""
    n = ranks.shape[1]
    if n < 2 or not len(ks):
        return None
    true = stepped[ks] / coef[ks]
    for when, scale in (("before clipping", coef[ks]), ("after clipping", np.ones(len(ks)))):
        for r in range(n):
            expected = ranks[ks, r] / scale
            if np.isnan(expected).any() or not close(values, expected).all():
                continue
            ratio = float(values[0] / true[0])
            root = next((f", about 1/√{m}" for m in range(2, n + 1)
                         if abs(ratio * math.sqrt(m) - 1) <= 0.05), "")
            return (f"the logged grad norm is rank {r}'s local norm {when}, of the shards it "
                    f"holds, not reduced over the {n} ranks: {ratio:.3f}× the true global "
                    f"norm at update {int(ks[0])}{root} ({WHY})")
    return None
