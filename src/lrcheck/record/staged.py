"""The ranks' records of one update stitched stage by stage, where each rank's optimizer steps
one pipeline stage's parameters (``record.pipeline``: the layout's ``stage``, ``[index,
stages]``): data only, no torch.

The stages hold disjoint parts of the model, so the whole model's fingerprint is the stages'
tensors one after the other in stage order (the first rank of each stage; the order of the
model's ``parameters()`` where, as torchtitan splits a model, each stage keeps the whole
model's module paths and drops the other stages' layers); the squared gradient norm is the
stages' sum, kept per stage too (``grad_sq_stages``, with each stage's number of tensors,
``stage_tensors``) for ``checks.stages`` to compare with the reference's same tensors. Ranks
of one stage (data parallel beside the pipeline) are replicas of its first rank, checked as
DDP's are. Only stage 0's ranks feed rows of their own (the later stages are fed
activations)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

Layout = Mapping[str, object]


def stages_of(layouts: Sequence[Layout | None]) -> list[int] | None:
    """Each rank's stage index where every rank described one and there are several stages;
    None otherwise (not a pipeline: merged by ``record.placed`` or as before)."""
    found = [None if f is None else f.get("stage") for f in layouts]
    if len(found) < 2 or not all(isinstance(s, list) and s for s in found):
        return None
    index = [int(s[0]) for s in found if isinstance(s, list)]
    return index if len(set(index)) > 1 else None


def stitch(stages: Sequence[int], lines: Sequence[Mapping[str, object]]
           ) -> tuple[dict[str, object], tuple[float, int, int] | None]:
    """One update's records (one per rank, ranks in order, ``stages`` their stage indices) as
    the whole model's: ``fingerprint``, ``grad_sq``, ``grad_sq_stages`` and ``stage_tensors``
    where every rank measured them; and the replicas' largest gap ``(|Δsum| / max|p|, rank,
    the rank it is a replica of)`` (None: no replica)."""
    first = {s: stages.index(s) for s in sorted(set(stages))}
    out: dict[str, object] = {}
    prints = [line.get("fingerprint") for line in lines]
    gap = None
    if all(isinstance(p, list) for p in prints):
        arrays = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in prints]
        out["fingerprint"] = np.concatenate([arrays[r] for r in first.values()]).ravel().tolist()
        out["stage_tensors"] = [len(arrays[r]) for r in first.values()]
        gap = _replicas(stages, first, arrays)
    squares = [q for r in first.values() if isinstance(q := lines[r].get("grad_sq"), (int, float))]
    if len(squares) == len(first):
        out["grad_sq_stages"] = [float(q) for q in squares]
        out["grad_sq"] = float(sum(squares))
    return out, gap


def _replicas(stages: Sequence[int], first: Mapping[int, int], arrays: Sequence[np.ndarray]
              ) -> tuple[float, int, int] | None:
    """The largest ``|Δsum| / max|p|`` of a rank against its stage's first rank."""
    worst: tuple[float, int, int] | None = None
    for rank, stage in enumerate(stages):
        owner = first[stage]
        if owner == rank:
            continue
        a, b = arrays[owner], arrays[rank]
        scale = max(float(np.max(a[:, 1], initial=0.0)), 1e-300)
        found = (float(np.max(np.abs(b[:, 0] - a[:, 0]), initial=0.0)) / scale
                 if a.shape == b.shape else float("inf"))
        if worst is None or not found <= worst[0]:
            worst = (found, rank, owner)
    return worst
