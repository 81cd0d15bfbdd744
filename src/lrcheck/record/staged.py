"""The ranks' records of one update stitched stage by stage, where each rank's optimizer steps
one pipeline stage's parameters (``record.pipeline``: the layout's ``stage``, ``[index,
stages]``): data only, no torch.

The stages hold parts of the model, so the whole model's fingerprint is the stages' tensors
one after the other in stage order (the first rank of each stage; the order of the model's
``parameters()`` where, as torchtitan splits a model, each stage keeps the whole model's module
paths and drops the other stages' layers), each parameter once (by position where the names are
not described). A name two stages hold is one weight tied across them, the first stage's, where
the names are the whole model's paths (``pipeline()``'s stages); where they are the stage
modules' own (a ``PipelineStage`` of the user's module: stages built as separate modules name
different parameters alike), the copies' fingerprints tell (``shared_of``), and what was taken
is said (``checks.stages``). The squared gradient norm is the stages' sum over the tensors
counted, kept per stage too (``grad_sq_stages``, with each stage's number of tensors,
``stage_tensors``) for ``checks.stages`` to compare with the reference's same tensors. Ranks
of one stage (data parallel beside the pipeline) are replicas of its first rank, checked as
DDP's are. Only stage 0's ranks feed rows of their own (the later stages are fed
activations)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lrcheck.record.placed import rank_squares
from lrcheck.words import plural

Layout = Mapping[str, object]
# The largest gap (|Δsum| and |Δmax|, over the larger max|p|) of two copies taken for one weight.
SAME = 1e-12
_UNSAID = ("the stages' modules do not say where a parameter lies in the whole model (a "
           "PipelineStage of a module of the user's), so the recording cannot tell a weight tied "
           "across the stages from parameters named alike")


@dataclass(frozen=True)
class Shared:
    """Of the names several stages hold, those counted in each stage (``apart``: parameters of
    their own), the others once (a weight tied across the stages); and, where the recording
    could not tell which, what was taken and why (``told``)."""

    apart: frozenset[str] = frozenset()
    told: str | None = None


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


def shared_of(stages: Sequence[int], layouts: Sequence[Layout | None],
              per_rank: Sequence[Sequence[Mapping[str, object]]]) -> Shared:
    """Which of the names several stages' first ranks hold are weights tied across the stages,
    each counted once: all where the names are the whole model's paths (the layouts' ``paths``);
    else, name by name, those whose copies have the same fingerprint (``SAME``) at every update
    all fingerprinted (none fingerprinted: taken for tied, as before, and said). A name whose
    copies differ at any update is the stage modules' own (separate modules naming their
    parameters alike): a parameter of each stage's own, counted in each."""
    first = {s: stages.index(s) for s in sorted(set(stages))}
    names, held = names_of(layouts), dict[str, list[tuple[int, int]]]()
    for rank in first.values():
        for t, name in enumerate(names[rank] or ()):
            held.setdefault(name, []).append((rank, t))
    shared = {name: where for name, where in held.items() if len(where) > 1}
    if not shared or all((layouts[r] or {}).get("paths") == "model" for r in first.values()):
        return Shared()
    parted = {name: _parted(where, per_rank) for name, where in shared.items()}
    apart = [name for name, (_, at) in parted.items() if at is not None]
    told = [f"{_few(apart, 'name')} held by several stages taken for parameters of each "
            f"stage's own, counted in each ({_first(parted, apart)}: the names are the stage "
            "modules' own)"] if apart else []
    for tied, why in _tied(parted):
        told.append(f"{_few(tied, 'name')} held by several stages taken for weights tied across "
                    f"them, each counted once ({why})")
    return Shared(frozenset(apart), f"{'; '.join(told)}: {_UNSAID}")


def _first(parted: Mapping[str, tuple[int, int | None]], apart: Sequence[str]) -> str:
    """``norm.weight's fingerprints differ from update 0``: the first update where a name's
    copies part, of the names ``apart`` (the first of them held, of those parting there)."""
    at, _, name = min((parted[n][1], i, n) for i, n in enumerate(apart)
                      if parted[n][1] is not None)
    return f"{name}'s fingerprints differ from update {at}"


def _tied(parted: Mapping[str, tuple[int, int | None]]) -> list[tuple[list[str], str]]:
    """The names whose copies never part, grouped by why they are taken for tied weights: the
    same fingerprint at each of the updates all fingerprinted (said per number of updates), or
    no fingerprint to tell."""
    groups: dict[str, list[str]] = {}
    for name, (seen, at) in parted.items():
        if at is None:
            groups.setdefault(f"the same fingerprint at each of the {plural(seen, 'update')} "
                              "fingerprinted" if seen else "no fingerprint to tell", []
                              ).append(name)
    return [(names, why) for why, names in groups.items()]


def _parted(where: Sequence[tuple[int, int]], per_rank: Sequence[Sequence[Mapping[str, object]]]
            ) -> tuple[int, int | None]:
    """How many updates fingerprinted the copies of one name (``(rank, tensor)`` each), and
    the first where they differ (None: never)."""
    seen = 0
    for k in range(min((len(per_rank[r]) for r, _ in where), default=0)):
        prints = [per_rank[r][k].get("fingerprint") for r, _ in where]
        rows = [p[2 * t:2 * t + 2] for p, (_, t) in zip(prints, where, strict=True)
                if isinstance(p, list)]
        a = np.asarray(rows if len(rows) == len(where) and all(len(row) == 2 for row in rows)
                       else [[np.nan, np.nan]], dtype=np.float64)
        if not np.all(np.isfinite(a)):  # not recorded by all, or diverged: it cannot tell
            continue
        seen += 1
        scale = max(float(np.max(np.abs(a[:, 1]))), 1e-300)
        if not float(np.max(np.abs(a - a[0]))) <= SAME * scale:  # NaN too
            return seen, k
    return seen, None


def _few(names: Sequence[str], noun: str) -> str:
    """``2 names (a, b)``, the first 3 named."""
    more = ", …" if len(names) > 3 else ""
    return f"{plural(len(names), noun)} ({', '.join(names[:3])}{more})"


def _kept(first: Mapping[int, int], counts: Sequence[int],
          names: Sequence[list[str] | None], apart: frozenset[str]) -> dict[int, list[int]]:
    """Per stage, the tensors of its first rank counted: each name once, from the first stage
    holding it (a tensor two stages hold, tied weights, is the first's), but those ``apart``
    in each stage; by position where a rank's names are not known."""
    seen: set[object] = set()
    kept: dict[int, list[int]] = {}
    for stage, rank in first.items():
        mine = names[rank] if rank < len(names) else None
        keys = [(stage, n) if n in apart else n for n in mine] \
            if mine is not None and len(mine) == counts[rank] else \
            [(stage, t) for t in range(counts[rank])]
        kept[stage] = [t for t, key in enumerate(keys) if key not in seen]
        seen.update(keys)
    return kept


def stitch(stages: Sequence[int], lines: Sequence[Mapping[str, object]],
           names: Sequence[list[str] | None] = (), shared: Shared = Shared()
           ) -> tuple[dict[str, object], tuple[float, int, int] | None]:
    """One update's records (one per rank, ranks in order, ``stages`` their stage indices,
    ``names`` their tensors' names, ``shared`` which names several stages hold are counted in
    each) as the whole model's: ``fingerprint``, ``stage_tensors``, ``grad_sq_stages``,
    ``grad_sq``, ``grad_sqs`` and ``grad_dots`` where every rank measured them, and
    ``stage_names`` (``Shared.told``); and the replicas'
    largest gap ``(|Δsum| / max|p|, rank, the rank it is a replica of)`` (None: none)."""
    first = {s: stages.index(s) for s in sorted(set(stages))}
    prints = [line.get("fingerprint") for line in lines]
    if not all(isinstance(p, list) for p in prints):
        return {}, None
    arrays = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in prints]
    kept = _kept(first, [len(a) for a in arrays], names, shared.apart)
    out: dict[str, object] = {
        "fingerprint": np.concatenate([arrays[r][kept[s]] for s, r in first.items()]
                                      ).ravel().tolist(),
        "stage_tensors": [len(kept[s]) for s in first],
        **({} if shared.told is None else {"stage_names": shared.told})}
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
