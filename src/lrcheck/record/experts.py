"""The ranks' records of one update merged by parameter name where the ranks' optimizers step
different parameters beside replicated ones — expert parallel written by hand: each rank holds
its own experts (plain tensors, under their global names) and a replica of the rest (the
router, the embeddings), as the layouts' ``names`` say (``record.process``: the names the
model gives the optimizer's tensors, in every process of several): data only, no torch.

Each name is counted once, from the lowest rank holding it: a name every rank holds is rank
0's, the other ranks its replicas, checked as DDP's are; an expert's from the rank that holds
it. The model's order: rank 0's names, each further rank's own names put just before the next
of its names already placed (at the end where none follows), so that ``moe.experts.2`` and
``.3`` of rank 1 follow rank 0's ``.0`` and ``.1`` where one process holding all 4 lists them.
The squared gradient norm is the names' sum, and is kept per group (``grad_sq_groups``, with
the merged tensors of each, ``group_tensors``) for ``checks.experts`` to compare with the
reference's same tensors: the experts (the names not every rank holds), the router (a
replicated name with a part ``router`` or ``gate``) and the rest; and the router's gradient
per term (``router_terms``, ``record.router``), the ranks' rows together."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lrcheck.record.groups import GROUPS, group_of, router_terms
from lrcheck.record.placed import rank_squares
from lrcheck.record.staged import names_of, shared_of, stitch

Layout = Mapping[str, object]
# One update's records of the ranks as the whole model's, and the replicas' largest gap
# (``Split.merge``; ``record.staged``'s ``stitch``).
Joiner = Callable[[Sequence[Mapping[str, object]]],
                  tuple[dict[str, object], tuple[float, int, int] | None]]


def split_of(layouts: Sequence[Layout | None]) -> list[list[str]] | None:
    """Each rank's parameter names where every rank of several described them with no mesh
    and no pipeline stage, some on every rank and some not (ranks holding nothing in common,
    as stages of a pipeline written by hand do, are not taken for expert parallel); None
    otherwise."""
    found = [None if f is None or "meshes" in f or "stage" in f else f.get("names")
             for f in layouts]
    if len(found) < 2 or not all(isinstance(n, list) for n in found):
        return None
    names = [[str(n) for n in mine] for mine in found if isinstance(mine, list)]
    shared = set.intersection(*(set(mine) for mine in names))
    return names if shared and any(set(mine) != shared for mine in names) else None


def model_order(names: Sequence[Sequence[str]]) -> list[str]:
    """Every name once, in the model's order (see the module's docstring)."""
    merged = list(names[0])
    for mine in names[1:]:
        known = set(merged)
        for i, name in enumerate(mine):
            if name in known:
                continue
            after = next((n for n in mine[i + 1:] if n in known), None)
            merged.insert(len(merged) if after is None else merged.index(after), name)
            known.add(name)
    return merged


@dataclass(frozen=True)
class Split:
    """Per merged tensor, in the model's order: its name and the ranks holding it with its
    index in each one's records (the first its owner); each rank's number of tensors."""

    names: tuple[str, ...]
    holders: tuple[tuple[tuple[int, int], ...], ...]  # per tensor, (rank, index) pairs
    counts: tuple[int, ...]

    @classmethod
    def of(cls, names: Sequence[Sequence[str]]) -> Split:
        order = model_order(names)
        where = [{n: i for i, n in enumerate(mine)} for mine in names]
        return cls(tuple(order), tuple(tuple((r, at[n]) for r, at in enumerate(where) if n in at)
                                       for n in order), tuple(len(mine) for mine in names))

    def groups(self) -> dict[str, list[int]]:
        """The merged tensors of each group that has any."""
        out: dict[str, list[int]] = {}
        for t, (name, held) in enumerate(zip(self.names, self.holders, strict=True)):
            out.setdefault(group_of(name, len(held), len(self.counts)), []).append(t)
        return {g: out[g] for g in GROUPS if g in out}

    def expert_ranks(self) -> int:
        """How many ranks hold experts."""
        return len({r for held in self.holders if len(held) < len(self.counts) for r, _ in held})

    def merge(self, lines: Sequence[Mapping[str, object]]
              ) -> tuple[dict[str, object], tuple[float, int, int] | None]:
        """One update's records (one per rank, in order) as the whole model's:
        ``fingerprint``; ``grad_sq`` (``grad_sqs`` per tensor), ``grad_sq_groups``,
        ``group_tensors``, ``expert_ranks`` and ``grad_dots`` where every rank measured its
        tensors'; and the replicas' largest gap
        ``(|Δsum| / max|p|, rank, its owner)`` (None: no replica)."""
        prints = [_per_tensor(line.get("fingerprint"), 2 * n)
                  for line, n in zip(lines, self.counts, strict=True)]
        squares = [q for line, n in zip(lines, self.counts, strict=True)
                   if (q := _per_tensor(line.get("grad_sqs"), n)) is not None]
        out: dict[str, object] = {}
        if len(squares) == len(lines):
            per = [float(squares[r][i]) for (r, i), *_ in self.holders]
            groups = self.groups()
            out |= {"grad_sq": float(sum(per)), "grad_sqs": per, "group_tensors": groups,
                    "grad_sq_groups": {g: float(sum(per[t] for t in ts))
                                       for g, ts in groups.items()},
                    "expert_ranks": self.expert_ranks(), **rank_squares(squares)}
        dots = [d for line, n in zip(lines, self.counts, strict=True)
                if (d := _per_tensor(line.get("grad_dots"), n)) is not None]
        if len(dots) == len(lines):  # record.probes: each name once, from its owner
            out["grad_dots"] = [dots[r][i] for (r, i), *_ in self.holders]
        out |= router_terms(lines)
        arrays = [np.asarray(p, dtype=np.float64).reshape(-1, 2) for p in prints
                  if p is not None]
        if len(arrays) < len(lines):
            return out, None
        rows = np.array([arrays[r][i] for (r, i), *_ in self.holders]).reshape(-1, 2)
        return out | {"fingerprint": rows.ravel().tolist()}, self._replicas(arrays, rows)

    def _replicas(self, arrays: Sequence[np.ndarray], rows: np.ndarray
                  ) -> tuple[float, int, int] | None:
        """The largest ``|Δsum| / max|p|`` of a replicated tensor against its owner's."""
        scale = max(float(np.max(rows[:, 1], initial=0.0)), 1e-300)
        worst: tuple[float, int, int] | None = None
        for (owner, at), *others in self.holders:
            for rank, i in others:
                found = abs(float(arrays[rank][i][0] - arrays[owner][at][0])) / scale
                if worst is None or not found <= worst[0]:  # NaN too
                    worst = (found, rank, owner)
        return worst


def joiner_of(layouts: Sequence[Layout | None], staged: list[int] | None,
              per_rank: Sequence[Sequence[Mapping[str, object]]] = ()) -> Joiner | None:
    """How the ranks' records of one update are joined into the whole model's: pipeline
    stages stitched (``record.staged``, ``staged`` their stage indices; the names several
    stages hold told apart from ``per_rank``, every rank's records), else expert parallel
    merged by name (``Split``); None: neither (merged by placement, or as DDP's)."""
    if staged is not None:
        return functools.partial(stitch, staged, names=names_of(layouts),
                                 shared=shared_of(staged, layouts, per_rank))
    names = split_of(layouts)
    return None if names is None else Split.of(names).merge


def _per_tensor(values: object, size: int) -> list[float] | None:
    """``values`` where it is a list of ``size`` numbers (None: not recorded, or not so many)."""
    return values if isinstance(values, list) and len(values) == size else None
