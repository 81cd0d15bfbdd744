"""A resume on another world size: the candidate interrupted on 2 ranks and resumed as one
process (or 1 → 2), where the framework allows it (``torch.save`` of a DDP model's replicas;
FSDP2's distributed checkpoints, which ``dcp.load`` reshards). Each process describes its world
size (``rank{R}.json``'s ``world``); where rank 0's processes had different ones, the timeline
is cut into segments, one per process of rank 0 (``record.folder.join`` placed them: the
updates each kept, a resume from an earlier checkpoint's updates trained twice left out), and
each segment is merged over the ranks that ran it: rank R's processes, in the order they
started, are those of the segments whose world is larger than R. A rank's timeline thus ends
where its world did (2 → 1: rank 1's at the interrupt) or begins at a resume (1 → 2).

Where the processes cannot be matched so (a process of rank R more or fewer than rank 0's
segments of a world larger than R, one that describes no world size, or a rank whose
segment's updates it did not all record), None: ``record.folder`` merges the ranks as one
world. Sharded parameters are fingerprinted per shard, and a shard's sums differ in rounding
from the whole tensor's: at a change of world size with sharded parameters, the weights are
not compared at the boundary (``checks.continuation``), and ``params`` judges them."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lrcheck.record.placed import Layout
from lrcheck.stepwise import Boundary

Part = tuple[list[dict[str, Any]], dict[str, Any]]  # a process's Recorder lines, description


def described(path: Path) -> dict[str, Any]:
    """The description of the process that wrote the Recorder file ``path`` (``rank0.json``
    for ``rank0-opt1.jsonl``); empty where unreadable."""
    stem = re.sub(r"-opt\d+$", "", path.name.removesuffix(".jsonl"))
    try:
        found = json.loads((path.parent / f"{stem}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def in_order(paths: list[Path]) -> list[Path]:
    """One rank's Recorder files of one optimizer, in the order their processes started."""
    def started(path: Path) -> tuple[float, bool, str]:
        at = described(path).get("started")
        return (float(at) if isinstance(at, (int, float)) else 0.0, "-p" in path.name,
                path.name)

    return sorted(paths, key=started)


def world_of(about: dict[str, Any]) -> int | None:
    """The world size a process described (None: not described)."""
    world = about.get("world")
    return world if isinstance(world, int) and world > 0 else None


@dataclass(frozen=True)
class Segment:
    """The updates one process of rank 0 kept in the timeline, from update ``start``: each
    taking part rank's Recorder lines of them (rank 0's as joined: updates and samples
    numbered in the timeline) and its tensors' layout (``record.placements``)."""

    start: int
    lines: tuple[list[dict[str, Any]], ...]
    layouts: tuple[Layout | None, ...]


def segments(parts: Sequence[Sequence[Part]], timeline: list[dict[str, Any]],
             boundaries: Sequence[Boundary], layout: Callable[[dict[str, Any]], Layout | None]
             ) -> list[Segment] | None:
    """Rank 0's timeline (``timeline``, joined at ``boundaries``) cut into segments, one per
    process of rank 0, each with the lines of the ranks that ran it (``parts``: each rank's
    processes in the order they started), where rank 0's processes had different world sizes;
    None where they had one, or the ranks' processes cannot be matched (the module's
    docstring). ``layout``: a process's tensors' layout, from its description."""
    worlds = [world_of(about) for _, about in parts[0]]
    if len(worlds) < 2 or None in worlds or len(set(worlds)) == 1:
        return None
    starts = [0, *(b.update for b in boundaries)]
    ends = [*starts[1:], len(timeline)]
    queues = [list(p) for p in parts]
    out = []
    for order, (start, end, world) in enumerate(zip(starts, ends, worlds, strict=True)):
        if world is None or world > len(queues):
            return None
        taking = [timeline[start:end]]
        layouts = [layout(queues[0].pop(0)[1])]
        for rank in range(1, world):
            if not queues[rank]:
                return None
            lines, about = queues[rank].pop(0)
            if world_of(about) != world or (len(lines) < end - start and order + 1 < len(worlds)):
                return None
            taking.append(lines[:end - start])
            layouts.append(layout(about))
        out.append(Segment(start, tuple(taking), tuple(layouts)))
    return None if any(queues) else out


def from_start(found: Sequence[Segment]) -> list[list[dict[str, Any]]]:
    """Each rank's lines from the first update on, through the segments it ran one after the
    other (2 → 1: rank 1's up to the interrupt; 1 → 2: rank 1 ran none from the start, and is
    left out): what ``record.folder.rank_schedules`` compares, rank by rank."""
    per_rank = []
    for rank in range(len(found[0].lines)):
        lines: list[dict[str, Any]] = []
        for segment in found:
            if rank >= len(segment.lines):
                break
            lines.extend(segment.lines[rank])
        per_rank.append(lines)
    return per_rank


def at_world_change(boundaries: Sequence[Boundary], sharded: bool) -> tuple[Boundary, ...]:
    """``boundaries``, where the world size changed at one and the parameters are sharded,
    without the fingerprints of the weights on either side (a shard's, not comparable with
    the whole tensor's: the module's docstring)."""
    def unsharded(b: Boundary) -> Boundary:
        if not sharded or len(set(b.worlds)) < 2:
            return b
        return replace(b, before=None if b.before is None else {**b.before, "fingerprint": None},
                       after=None if b.after is None else {**b.after, "fingerprint": None})

    return tuple(unsharded(b) for b in boundaries)
