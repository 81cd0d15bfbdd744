"""The ranks' records of one update merged by where each tensor is placed on the device mesh
(``record.placements``'s layout, one per rank): data only, no torch.

A tensor's shard on a rank is named by the rank's coordinates on the mesh dimensions the tensor
is sharded over (``S``; partial, ``P``, counts as sharded): ranks that differ only along
dimensions where it is replicated (``R``), or that are not on its mesh at all (a plain tensor,
or one on a sub-mesh: FSDP2's on ``dp`` beside tensor parallel's ``(dp, tp)``), hold the same
shard. Per tensor, each shard is counted once, from the lowest rank holding it (its owner):
fingerprint sums add and the largest absolute values max, squared gradient norms add; every
other rank holding a shard is a replica, checked against the owner's as DDP's replicas are.
On a 1-D mesh of ``Shard(0)`` (FSDP2) every rank owns its own shard, so this is the plain sum
over the ranks; with no DTensor at all, rank 0 owns everything (DDP).

Where some tensors are sharded over a mesh dimension named ``ep`` (``EXPERT_DIMS``:
transformers' ``DistributedConfig(ep_size=...)`` places its experts so) and the
ranks named their tensors, the merged squares are also kept per group as ``record.experts``
keeps them (the experts: those tensors; the router; the rest), for ``checks.experts``, with the
router's terms (``record.router``) of the ranks that feed rows of their own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from lrcheck.record.groups import GROUPS, group_of, router_terms

Layout = Mapping[str, object]
Key = tuple[int, ...]
V = TypeVar("V")
# What the ranks' records of one update add up to (rank 0's alone is a part of it), and in words.
SUMMED = ("fingerprint", "grad_sq", "grad_sqs", "grad_dots")
_WORDS = {"fingerprint": "parameter fingerprints", "grad_sq": "gradient norms"}
# Mesh dimensions, by name, over which experts are sharded (transformers').
EXPERT_DIMS = ("ep",)


def _key(found: Layout | None, tensor: int) -> Key:
    """Which shard of ``tensor`` the rank with layout ``found`` holds (``()``: the whole)."""
    tensors = found.get("tensors") if found is not None else None
    entry = tensors[tensor] if isinstance(tensors, list) and tensor < len(tensors) else None
    meshes = found.get("meshes") if found is not None else None
    if not isinstance(entry, list) or not isinstance(meshes, list):
        return ()
    coord = meshes[entry[0]].get("coord") or []
    return tuple(int(coord[d]) for d, p in enumerate(entry[1:]) if p != "R" and d < len(coord))


@dataclass(frozen=True)
class Placed:
    """Per tensor, per rank, which shard the rank holds (``keys``), and per rank whether it
    feeds rows of its own (``feeds``: not a tensor-parallel rank other than the first); the
    merged tensors of each group where experts are sharded over ``ep`` (``groups``, empty
    where none is) and the ranks they are sharded over (``expert_ranks``)."""

    keys: tuple[tuple[Key, ...], ...]
    feeds: tuple[bool, ...]
    groups: Mapping[str, list[int]] = field(default_factory=dict)
    expert_ranks: int = 1

    @classmethod
    def of(cls, layouts: Sequence[Layout | None], tensors: int) -> Placed:
        keys = tuple(tuple(_key(found, t) for found in layouts) for t in range(tensors))
        return cls(keys, tuple(found is None or found.get("feeds") is not False
                               for found in layouts), *_groups(layouts[0], tensors, len(layouts)))

    def owners(self, tensor: int) -> list[int]:
        """The ranks counted for ``tensor``: the lowest holding each of its shards."""
        first: dict[Key, int] = {}
        for rank, key in enumerate(self.keys[tensor]):
            first.setdefault(key, rank)
        return sorted(first.values())

    def replicas(self, tensor: int) -> list[tuple[int, int]]:
        """``(rank, owner)`` for every rank holding a shard of ``tensor`` that another owns."""
        row = self.keys[tensor]
        owner = {row[r]: r for r in reversed(range(len(row)))}
        return [(r, owner[key]) for r, key in enumerate(row) if owner[key] != r]

    def copies(self, tensor: int) -> int:
        """How many ranks hold each shard of ``tensor`` (1: sharded over every rank)."""
        return len(self.keys[tensor]) // max(1, len(self.owners(tensor)))

    def fingerprint(self, arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, float, int, int]:
        """The ranks' fingerprints (rows ``(sum, max|p|)`` per tensor) as the whole model's,
        and the replicas' largest gap ``|Δsum| / max|p|`` (over the model) with its rank and
        the rank it is a replica of (rank -1: no replica)."""
        rows = np.empty((len(self.keys), 2))
        for t in range(len(self.keys)):
            owned = [arrays[r][t] for r in self.owners(t)]
            rows[t] = (sum(row[0] for row in owned), max(row[1] for row in owned))
        scale = max(float(np.max(rows[:, 1], initial=0.0)), 1e-300)
        gap = 0.0
        worst = next((pair for t in range(len(self.keys)) for pair in self.replicas(t)),
                     (-1, -1))
        for t in range(len(self.keys)):
            for rank, owner in self.replicas(t):
                found = abs(float(arrays[rank][t][0] - arrays[owner][t][0])) / scale
                if not found <= gap:  # NaN too
                    gap, worst = found, (rank, owner)
        return rows, gap, *worst

    def squares(self, per_rank: Sequence[Sequence[float]]) -> dict[str, object]:
        """The ranks' squared gradient norms per tensor as the whole gradient's: ``grad_sq``,
        each shard once, and per tensor (``grad_sqs``); each rank's own (``rank_squares``);
        and, where some tensors are
        replicated over ranks, their part of it (``grad_sq_replicated``) and how many ranks
        hold each of their shards (``replicated_ranks``, the most)."""
        replicated, most = 0.0, 1
        parts = [float(sum(per_rank[r][t] for r in self.owners(t))) for t in range(len(self.keys))]
        for t, part in enumerate(parts):
            if (copies := self.copies(t)) > 1:
                replicated, most = replicated + part, max(most, copies)
        out: dict[str, object] = {"grad_sq": float(sum(parts)), "grad_sqs": parts,
                                  **rank_squares(per_rank)}
        if self.groups:  # as ``record.experts`` keeps them
            out |= {"group_tensors": dict(self.groups), "expert_ranks": self.expert_ranks,
                    "grad_sq_groups": {g: float(sum(parts[t] for t in ts))
                                       for g, ts in self.groups.items()}}
        if most > 1:
            out |= {"grad_sq_replicated": replicated, "replicated_ranks": most}
        return out


    def dots(self, lines: Sequence[Mapping[str, object]]) -> dict[str, object]:
        """``grad_dots`` of the whole gradient (``record.probes``) from the ranks' records of
        one update: per tensor its shards' dot products summed, each shard once (None where
        one is not known); none unless every rank recorded one per tensor."""
        rows = [d for line in lines if isinstance(d := line.get("grad_dots"), list)
                and len(d) == len(self.keys)]
        if len(rows) < len(lines):
            return {}
        return {"grad_dots": [summed([rows[r][t] for r in self.owners(t)])
                              for t in range(len(self.keys))]}


    def gradients(self, lines: Sequence[Mapping[str, Sequence[float]]]) -> dict[str, object]:
        """One update's ``squares``, ``dots`` and ``terms`` from the ranks' records (each with
        its ``grad_sqs``)."""
        return self.squares([line["grad_sqs"] for line in lines]) | self.dots(lines) \
            | self.terms(lines)

    def terms(self, lines: Sequence[Mapping[str, object]]) -> dict[str, object]:
        """``router_terms`` of the whole run where experts are sharded over ``ep``: those of
        the ranks feeding rows of their own, merged as ``record.experts`` merges them."""
        feeding = [line for line, f in zip(lines, self.feeds, strict=True) if f]
        return router_terms(feeding) if self.groups and feeding else {}


def _groups(found: Layout | None, tensors: int, ranks: int
            ) -> tuple[dict[str, list[int]], int]:
    """The merged tensors of each group (``record.experts``' groups: an expert a tensor
    sharded over a dimension of ``EXPERT_DIMS``) and that dimension's ranks, from rank 0's
    layout ``found``; none where it shards no tensor so or does not name its tensors."""
    names = found.get("names") if found is not None else None
    tensor_list = found.get("tensors") if found is not None else None
    meshes = found.get("meshes") if found is not None else None
    if not isinstance(names, list) or len(names) != tensors or not isinstance(meshes, list) \
            or not isinstance(tensor_list, list) or len(tensor_list) != tensors:
        return {}, 1
    out: dict[str, list[int]] = {}
    most = 1
    for t, (name, entry) in enumerate(zip(names, tensor_list, strict=True)):
        mesh = meshes[entry[0]] if isinstance(entry, list) else {}
        dims = [d for d, n in enumerate(mesh.get("names") or []) if n in EXPERT_DIMS
                and isinstance(entry, list) and d + 1 < len(entry) and entry[d + 1] != "R"]
        most = max([most, *(int(mesh["shape"][d]) for d in dims)])
        out.setdefault(group_of(str(name), 1 if dims else ranks, ranks), []).append(t)
    if "experts" not in out:
        return {}, 1
    return {g: out[g] for g in GROUPS if g in out}, most


def summed(parts: Sequence[object]) -> float | None:
    """The shards' dot products of one tensor summed (None: one is not a number)."""
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in parts):
        return None
    return float(sum(x for x in parts if isinstance(x, (int, float))))


def rank_squares(per_rank: Sequence[object]) -> dict[str, object]:
    """``grad_sq_ranks``: each rank's squared norm of the gradient shards it holds (its
    replicas' too), per-tensor squares summed: the local norm a rank computes without reducing
    it over the ranks (``logs.shards``, ``checks.norms`` name it); none for one rank, or where
    a rank measured none."""
    if len(per_rank) < 2 or not all(isinstance(q, list) for q in per_rank):
        return {}
    return {"grad_sq_ranks": [float(sum(q)) for q in per_rank if isinstance(q, list)]}


def bare(line: Mapping[str, V]) -> dict[str, V]:
    """Rank 0's record of one update without what the ranks' records add up to (``SUMMED``):
    what the merge cannot give stays absent, never rank 0's part taken for the whole."""
    return {key: value for key, value in line.items() if key not in SUMMED}


def unmerged(record: Mapping[str, object], lines: Sequence[Mapping[str, object]]
             ) -> dict[str, object]:
    """``unmerged``, why the merged ``record`` of one update lacks the fingerprint or gradient
    norm rank 0 recorded (a rank recorded none, or the ranks' do not fit together): the checks
    say those are not judged (``checks.commands.check_merged``); none where nothing lacks."""
    lost = [key for key in _WORDS if lines[0].get(key) is not None and key not in record]
    if not lost:
        return {}
    lacking = next(((r, none) for r, line in enumerate(lines)
                    if (none := [_WORDS[k] for k in lost if line.get(k) is None])), None)
    why = (f"rank {lacking[0]} recorded no {' and no '.join(lacking[1])}" if lacking else
           "they do not fit together (not as many tensors on every rank)")
    return {"unmerged": f"the ranks' {' and '.join(_WORDS[k] for k in lost)} could not be "
                        f"merged: {why}"}


def placed(layouts: Sequence[Layout | None], prints: Sequence[Sequence[float] | None]
           ) -> Placed | None:
    """The placement of the ranks' tensors where any rank described a layout beyond its
    parameters' names (None: none did, the records are merged as before: ``record.folder``);
    the tensors counted from the first fingerprint, else the layouts."""
    if not any(found is not None and set(found) - {"names", "feeds"} for found in layouts):
        return None  # none described where its tensors lie: its parameters' names at most
    sizes = [len(p) // 2 for p in prints if p is not None]
    sizes += [len(t) for found in layouts if found is not None
              and isinstance(t := found.get("tensors"), list)]
    return Placed.of(layouts, sizes[0] if sizes else 0)
