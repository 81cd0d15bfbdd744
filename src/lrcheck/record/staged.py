"""The ranks' records of one update stitched stage by stage, where each rank's optimizer steps
one pipeline stage's parameters (``record.pipeline``: the layout's ``stage``, ``[index,
stages]``): data only, no torch.

The stages hold parts of the model, so the whole model's fingerprint is the stages' tensors
one after the other in stage order (the first rank of each stage; the order of the model's
``parameters()`` where, as torchtitan splits a model, each stage keeps the whole model's module
paths and drops the other stages' layers), each parameter name once: a name two stages hold
(weights tied across stages) is the first stage's (by position where the names are not
described). The squared gradient norm is the stages' sum over the tensors counted, kept per
stage too (``grad_sq_stages``, with each stage's number of tensors,
``stage_tensors``) for ``checks.stages`` to compare with the reference's same tensors. Ranks
of one stage (data parallel beside the pipeline) are replicas of its first rank, checked as
DDP's are. Only stage 0's ranks feed rows of their own (the later stages are fed
activations)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from lrcheck.record.placed import rank_squares

Layout = Mapping[str, object]


def stages_of(layouts: Sequence[Layout | None]) -> list[int] | None:
    """Each rank's stage index where every rank described one and there are several stages;
    None otherwise (not a pipeline: merged by ``record.placed`` or as before)."""
    found = [None if f is None else f.get("stage") for f in layouts]
    if len(found) < 2 or not all(isinstance(s, list) and s for s in found):
        return None
    index = [int(s[0]) for s in found if isinstance(s, list)]
    return index if len(set(index)) > 1 else None


def names_of(layouts: Sequence[Layout | None]) -> list[list[str] | None]:
    """Each rank's parameter names in its stage's module (``record.pipeline``; None: not
    described)."""
    found = [None if f is None else f.get("names") for f in layouts]
    return [[str(n) for n in x] if isinstance(x, list) else None for x in found]


def _kept(first: Mapping[int, int], counts: Sequence[int],
          names: Sequence[list[str] | None]) -> dict[int, list[int]]:
    """Per stage, the tensors of its first rank counted: each name once, from the first stage
    holding it (a tensor two stages hold, tied weights, is the first's); by position where a
    rank's names are not known."""
    seen: set[object] = set()
    kept: dict[int, list[int]] = {}
    for stage, rank in first.items():
        mine = names[rank] if rank < len(names) else None
        keys = mine if mine is not None and len(mine) == counts[rank] else \
            [(stage, t) for t in range(counts[rank])]
        kept[stage] = [t for t, key in enumerate(keys) if key not in seen]
        seen.update(keys)
    return kept


def stitch(stages: Sequence[int], lines: Sequence[Mapping[str, object]],
           names: Sequence[list[str] | None] = ()
           ) -> tuple[dict[str, object], tuple[float, int, int] | None]:
    """One update's records (one per rank, ranks in order, ``stages`` their stage indices,
    ``names`` their tensors' names) as the whole model's: ``fingerprint``, ``stage_tensors``,
    ``grad_sq_stages``, ``grad_sq``, ``grad_sqs`` and ``grad_dots`` where every rank measured
    them; and the replicas'
    largest gap ``(|Δsum| / max|p|, rank, the rank it is a replica of)`` (None: none)."""
    first = {s: stages.index(s) for s in sorted(set(stages))}
    prints = [line.get("fingerprint") for line in lines]
    if not all(isinstance(p, list) for p in prints):
        return {}, None
    arrays = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in prints]
    kept = _kept(first, [len(a) for a in arrays], names)
    out: dict[str, object] = {
        "fingerprint": np.concatenate([arrays[r][kept[s]] for s, r in first.items()]
                                      ).ravel().tolist(),
        "stage_tensors": [len(kept[s]) for s in first]}
    squares = [q for r in first.values() if isinstance(q := lines[r].get("grad_sqs"), list)
               and len(q) == len(arrays[r])]
    if len(squares) == len(first):  # every stage's per tensor: its kept tensors' sum
        stage_sq = [float(sum(q[t] for t in kept[s])) for q, s in zip(squares, first, strict=True)]
        out["grad_sq_stages"], out["grad_sq"] = stage_sq, float(sum(stage_sq))
        out["grad_sqs"] = [q[t] for q, s in zip(squares, first, strict=True) for t in kept[s]]
        out |= rank_squares([line.get("grad_sqs") for line in lines])
    dots = [d for r in first.values() if isinstance(d := lines[r].get("grad_dots"), list)
            and len(d) == len(arrays[r])]
    if len(dots) == len(first):  # record.probes: each stage's kept tensors', in order
        out["grad_dots"] = [d[t] for d, s in zip(dots, first, strict=True) for t in kept[s]]
    return out, _replicas(stages, first, arrays)


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
