"""A record folder (``lrcheck record --out DIR``) read as one run: its ranks' Recorder files of
one optimizer merged into the records of the whole run.

Merging: the LR, the scheduler steps and the skipped steps are rank 0's (every rank steps the
same schedule); every rank's LR and scheduler steps are kept beside the records
(``RankSchedules``), so that a rank whose schedule parts from rank 0's is a failure of its
own. Parameters sharded over the ranks (FSDP2's DTensors; ZeRO's partitions) are
fingerprinted per shard: the sums add and the largest absolute values max, which gives the
whole tensor's fingerprint exactly. ZeRO steps its optimizer on flat partitions of the model's
parameters rather than on its tensors: a partitioned run's fingerprint is the whole model's
(one sum, one largest absolute value), and ``record.sides`` compares the other run's whole
model with it. Replicated parameters (DDP) are rank 0's, and every other rank's are checked
against them, update by update: replicas that part are a failure of their own. The EMA model
(``record.ema``'s ``ema-rank{R}.jsonl``) is read apart, by ``read_ema``.

Several processes of one rank in one command (a resume, a second stage: ``rank{R}.jsonl`` and
``rank{R}-p{pid}.jsonl``, ``record.process``) are joined into one timeline per rank, in the
order they started (``started`` in each process's description, not the pids): each later
process's updates follow the earlier ones', their ``samples_seen`` and update numbers
continued; a later process that restored an earlier checkpoint than where the one before it
stopped joins at that checkpoint's update (``record.restore``: the updates after it, trained
twice, are the later process's in the timeline); where each boundary of rank 0 lies, and where
the training stood there (``record.stages``), is kept for ``checks.continuation``. A resume
on another world size is merged segment by segment, over the ranks that ran each
(``record.worlds``). The EMA is the first process's."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from lrcheck.errors import SpecError
from lrcheck.record.experts import joiner_of
from lrcheck.record.placed import Layout, Placed, bare, placed, unmerged
from lrcheck.record.restore import restore_point, window_continued
from lrcheck.record.roles import CANDIDATE
from lrcheck.record.staged import stages_of
from lrcheck.record.tokens import read
from lrcheck.record.worlds import (
    Segment,
    at_world_change,
    described,
    from_start,
    in_order,
    segments,
    world_of,
)
from lrcheck.recorder import COUNTS, NOT_FINITE, NUMBERS, read_records
from lrcheck.stepwise import Boundary, EmaPrints

_RANK_FILE = re.compile(r"^rank(\d+)(-p\d+)?(-opt(\d+))?\.jsonl$")
_EMA_FILE = re.compile(r"^ema-rank(\d+)\.jsonl$")
# What a Recorder line of ``lrcheck record`` counts per update beside the schedule.
CADENCE = (*COUNTS[2:], *NUMBERS)


@dataclass(frozen=True)
class ReplicaGap:
    """The largest gap at one fingerprinted update between a replica's fingerprint and rank
    0's: ``|Δsum| / max|p|``, the update and the rank; merged by placement, ``owner``: the rank
    holding the same shards that it is compared with (None: rank 0, not placed)."""

    gap: float
    update: int
    rank: int
    owner: int | None = None

    @property
    def row(self) -> tuple[float, ...]:
        """As ``checks.commands.check_replicas`` reads it."""
        return (self.gap, self.update, self.rank, *(() if self.owner is None else (self.owner,)))


@dataclass(frozen=True)
class RankSchedules:
    """Every rank's schedule, rank 0 first, up to the updates every rank recorded: its LRs
    (updates × param groups), its ``scheduler.step()`` calls before each update (None: not
    counted) and its calls per update (``lrcheck record``'s cadence: the counts and numbers of
    ``CADENCE``; None: not counted)."""

    lrs: tuple[np.ndarray, ...]
    steps: tuple[np.ndarray | None, ...]
    cadence: tuple[list[dict[str, float]] | None, ...] = ()


@dataclass(frozen=True)
class FolderRun:
    """A record folder as one run: its merged records, its description (``run.json``), how
    many ranks it had, whether they were sharded (``partitioned``: by ZeRO, into flat
    partitions), the replicas' largest gap at each fingerprinted update (None: one rank, or
    sharded) and every rank's schedule (None: one rank)."""

    records: list[dict[str, Any]]
    description: dict[str, Any]
    ranks: int
    sharded: bool
    partitioned: bool
    replicas: tuple[ReplicaGap, ...] | None
    optimizers: int
    schedules: RankSchedules | None = None
    boundaries: tuple[Boundary, ...] = ()  # where rank 0's later processes joined

    @property
    def samples_known(self) -> bool:
        return self.description.get("samples_per_update") is not None

    def incomplete(self, who: str) -> str | None:
        """Why this run's record is incomplete, in words naming it ``who`` (its command ended
        with an error, was killed, or was interrupted), or None: it ended well."""
        about = self.description
        code = about.get("exit_code", 0)
        if code == 0 and not about.get("interrupted"):
            return None
        ended = about.get("ended", f"exit code {code}")
        how = (f"was interrupted ({ended})" if about.get("interrupted") else
               f"ended with {ended}" if isinstance(code, int) and code > 0 else f"was {ended}")
        return (f"the {who}'s command {how} after {len(self.records)} update"
                f"{'s' * (len(self.records) != 1)}: its record is incomplete")


def description(folder: Path) -> dict[str, Any]:
    path = folder / "run.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        raise SpecError(f"{str(folder)!r} is a folder but not a record folder (no run.json): "
                        "pass one that lrcheck record --out wrote, or a Recorder file") from None
    except ValueError as exc:
        raise SpecError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("kind") != "lrcheck-record":
        raise SpecError(f"{path} is not the description lrcheck record writes")
    return data


def read_folder(folder: Path, optimizer: int = 0) -> FolderRun:
    """The run recorded in ``folder``, optimizer ``optimizer`` of each process (numbered in the
    order they first stepped); a ``SpecError`` when it holds none."""
    about = description(folder)
    files: dict[int, dict[int, list[Path]]] = {}
    for path in folder.iterdir():
        found = _RANK_FILE.match(path.name)
        if found:
            files.setdefault(int(found[4] or 0), {}).setdefault(int(found[1]), []).append(path)
    missing = [name for name in about.get("updates", {}) if not (folder / name).is_file()]
    if missing:
        raise SpecError(f"{folder}: {missing[0]}, which its run.json lists with "
                        f"{about['updates'][missing[0]]} update(s), is missing: the folder "
                        "is not the whole record")
    if not files:
        raise SpecError(f"{folder}: the command ({about.get('ended', '?')}) made no optimizer "
                        "update that lrcheck saw")
    if optimizer not in files:
        raise SpecError(f"{folder} has no optimizer {optimizer}: its processes stepped "
                        f"{len(files)} optimizer(s), 0 to {max(files)}")
    ranks = files[optimizer]
    if sorted(ranks) != list(range(len(ranks))):
        raise SpecError(f"{folder}: Recorder files of ranks {sorted(ranks)}, not 0 to "
                        f"{len(ranks) - 1}: a rank recorded nothing")
    parts = [[(read_records(path), described(path)) for path in in_order(ranks[r])]
             for r in range(len(ranks))]
    joined = [join(part) for part in parts]
    per_rank = [records for records, _ in joined]
    mine = [o for p in about.get("processes", []) for o in p.get("optimizers", [])
            if o.get("index") == optimizer]
    partitioned = any(o.get("partitioned") for o in mine)
    sharded = partitioned or any(o.get("sharded") for o in mine)
    layout = functools.partial(_layout, optimizer=optimizer)
    resized = segments(parts, *joined[0], layout)  # another world size (``record.worlds``)
    if resized is not None:
        records, gaps = merge_segments(resized, sharded, partitioned)
        return FolderRun(records, about, len(ranks), sharded, partitioned, gaps, len(files),
                         rank_schedules(from_start(resized)),
                         at_world_change(joined[0][1], sharded))
    layouts = [layout(part[0][1]) for part in parts]
    records, gaps = merge(per_rank, sharded, partitioned, layouts)
    return FolderRun(records, about, len(ranks), sharded, partitioned, gaps, len(files),
                     rank_schedules(per_rank), joined[0][1])


def merge_segments(found: list[Segment], sharded: bool, partitioned: bool
                   ) -> tuple[list[dict[str, Any]], tuple[ReplicaGap, ...] | None]:
    """The timeline's segments (``record.worlds``) each merged over the ranks that ran it
    (``merge``), one after the other; the replicas' gaps numbered in the timeline."""
    records: list[dict[str, Any]] = []
    gaps: list[ReplicaGap] = []
    for segment in found:
        merged, found_gaps = merge(list(segment.lines), sharded, partitioned,
                                   list(segment.layouts))
        records.extend(merged)
        gaps.extend(replace(g, update=g.update + segment.start) for g in found_gaps or ())
    return records, tuple(gaps) if gaps else None


def _layout(about: dict[str, Any], optimizer: int) -> Layout | None:
    """Where the optimizer's tensors lie on the device mesh (``record.placements``), as the
    process described by ``about`` described it; None: not DTensors, or not described."""
    for found in about.get("optimizers", []):
        if isinstance(found, dict) and found.get("index") == optimizer:
            return found.get("layout")
    return None


def join(parts: list[tuple[list[dict[str, Any]], dict[str, Any]]]
         ) -> tuple[list[dict[str, Any]], tuple[Boundary, ...]]:
    """The records of one rank's processes (each with its description), in the order they
    started, as one timeline: each later process's ``samples_seen`` and update numbers continue
    the earlier ones'; and where each later process joined (``checks.continuation``)."""
    records = list(parts[0][0])
    boundaries = []
    for order, (lines, about) in enumerate(parts[1:], start=1):
        earlier, ended = parts[order - 1], len(records)
        restored = restore_point(records[ended - len(earlier[0]):], earlier[1], about,
                                 lines[0] if lines else None)
        del records[ended - len(earlier[0]) + restored.at:]  # trained twice: the resumed's count
        seen, step = (records[-1]["samples_seen"], records[-1]["step"] + 1) if records else (0, 0)
        boundaries.append(Boundary(len(records), about.get("pid"), order, restored.standing,
                                   restored.start, about.get("lockstep") == CANDIDATE,
                                   ended, (world_of(earlier[1]), world_of(about))))
        records.extend({**r, "samples_seen": r["samples_seen"] + seen, "step": r["step"] + step}
                       for r in window_continued(lines, restored))
    return records, tuple(boundaries)


def merge(per_rank: list[list[dict[str, Any]]], sharded: bool,
          partitioned: bool = False, layouts: list[Layout | None] | None = None
          ) -> tuple[list[dict[str, Any]], tuple[ReplicaGap, ...] | None]:
    """The ranks' records as the whole run's (see the module's docstring), up to the updates
    every rank recorded, and the replicas' largest gap at each fingerprinted update (None:
    nothing to compare). Where the ranks described their tensors' ``layouts`` on a device
    mesh, by placement (``record.placed``), stitched or by name (``record.experts``)."""
    count = min(len(r) for r in per_rank)
    merged: list[dict[str, Any]] = []
    gaps: list[ReplicaGap] = []
    staged = None if partitioned or layouts is None else stages_of(layouts)
    joiner = None if partitioned or layouts is None else joiner_of(layouts, staged, per_rank)
    where = None if joiner or partitioned or layouts is None or len(per_rank) < 2 \
        else placed(layouts, [line.get("fingerprint") for line in per_rank[0]])
    feeds = where.feeds if where else None if staged is None else [s == 0 for s in staged]
    summed = partitioned or len(per_rank) > 1 and bool(joiner or where or sharded)
    for k in range(count):
        lines = [r[k] for r in per_rank]
        record = bare(lines[0]) if summed else dict(lines[0])  # never a part
        prints = [line.get("fingerprint") for line in lines]
        if joiner is not None:  # pipeline stages, or experts by name
            joined, gap = joiner(lines)
            record.update(joined)
            gaps.extend([] if gap is None else [ReplicaGap(gap[0], k, gap[1], gap[2])])
        elif where is not None:
            record.update(_placed(where, lines, k, gaps))
        elif all(p is not None for p in prints) and (len(lines) > 1 or partitioned):
            arrays = [np.asarray(p).reshape(-1, 2) for p in prints]
            if partitioned or (sharded and len({a.shape for a in arrays}) > 1):
                record["fingerprint"] = whole_model(arrays)
            elif sharded:
                stacked = np.stack(arrays)
                record["fingerprint"] = np.column_stack(
                    [stacked[:, :, 0].sum(axis=0), stacked[:, :, 1].max(axis=0)]).ravel().tolist()
            else:
                gaps.append(_replica_gap(arrays, k))
        if sharded and where is None and all("grad_sq" in line for line in lines):
            record.pop("grad_sqs", None), record.pop("grad_dots", None)  # flat shards
            record["grad_sq"] = float(sum(line["grad_sq"] for line in lines))
        record.update(rank_mean_losses(lines), **unmerged(record, lines) if summed else {})
        record.pop("fed", None), record.pop("fed_weights", None), record.pop("fed_tokens", None)
        feeding = [x for x, f in zip(lines, feeds, strict=True) if f] if feeds else lines
        if all("fed" in line for line in feeding):
            record["fed"] = fed_rows(feeding)
        merged.append(record)
    return merged, tuple(gaps) if gaps else None


def _placed(where: Placed, lines: list[dict[str, Any]], k: int, gaps: list[ReplicaGap]
            ) -> dict[str, Any]:
    """Update ``k``'s fingerprint and squared gradient norm merged by placement
    (``record.placed``), the replicas' largest gap added to ``gaps``."""
    out: dict[str, Any] = {}
    prints = [line.get("fingerprint") for line in lines]
    if all(p is not None for p in prints):
        arrays = [np.asarray(p).reshape(-1, 2) for p in prints]
        if len({a.shape for a in arrays}) > 1 or len(arrays[0]) != len(where.keys):
            out["fingerprint"] = whole_model(arrays)  # not one model's tensors on every rank
        else:
            rows, gap, rank, owner = where.fingerprint(arrays)
            out["fingerprint"] = rows.ravel().tolist()
            if rank >= 0:
                gaps.append(ReplicaGap(gap, k, rank, owner))
    if where.keys and all(len(line.get("grad_sqs", ())) == len(where.keys) for line in lines):
        out |= where.gradients(lines)
    elif all("grad_sq" in line for line in lines):  # not per tensor: the shards' sum
        out["grad_sq"] = float(sum(line["grad_sq"] for line in lines))
    return out


def rank_mean_losses(lines: list[dict[str, Any]]) -> dict[str, Any]:
    """The loss one update differentiated (``record.losses``) as the whole run's: each rank's
    mean over the ranks (DDP averages the ranks' gradients), per micro-batch where every rank
    ran as many; rank 0's where the ranks did not all measure it."""
    out: dict[str, Any] = {}
    if len(lines) > 1 and all("loss_backward" in line for line in lines):
        out["loss_backward"] = float(np.mean([line["loss_backward"] for line in lines]))
    micro = [line.get("loss_micro") or [] for line in lines]
    if len(lines) > 1 and micro[0] and all(len(m) == len(micro[0]) for m in micro):
        out["loss_micro"] = [None if any(v is None for v in column) else float(np.mean(column))
                             for column in zip(*micro, strict=True)]
    return out


def fed_rows(lines: list[dict[str, Any]]) -> list[list[Any]]:
    """The micro-batches every rank fed one update (``record.taps``), as ``[rank, row
    identities, their weights or None]``, and their rows' token weights (``record.tokens``)
    where every rank measured them, rank by rank in the order fed."""
    window: list[list[Any]] = []
    by_token = all("fed_tokens" in line for line in lines)
    for rank, line in enumerate(lines):
        weights = line.get("fed_weights") or [None] * len(line["fed"])
        tokens = read(line["fed_tokens"] if by_token else None, len(line["fed"]),
                      f"rank {rank}'s line")
        window.extend([rank, ids, w, *([t] if by_token else [])]
                      for ids, w, t in zip(line["fed"], weights, tokens, strict=True))
    return window


def rank_schedules(per_rank: list[list[dict[str, Any]]]) -> RankSchedules | None:
    """Every rank's LRs, scheduler steps and calls per update, up to the updates every rank
    recorded (None: one rank). A rank whose param groups change in number gets NaN where it
    has none."""
    if len(per_rank) < 2:
        return None
    count = min(len(r) for r in per_rank)
    lrs, steps, cadence = [], [], []
    for lines in per_rank:
        groups = max((len(line["lr"]) for line in lines[:count]), default=0)
        lrs.append(np.array([[*line["lr"], *[np.nan] * (groups - len(line["lr"]))]
                             for line in lines[:count]], dtype=np.float64).reshape(count, groups))
        counted = all("scheduler_steps" in line for line in lines[:count])
        steps.append(np.array([int(line["scheduler_steps"]) for line in lines[:count]],
                              dtype=np.int64) if counted else None)
        cadence.append([{key: line[key] for key in CADENCE if key in line}
                        for line in lines[:count]]
                       if all("backward" in line for line in lines[:count]) else None)
    return RankSchedules(tuple(lrs), tuple(steps), tuple(cadence))


def whole_model(arrays: list[np.ndarray]) -> list[float]:
    """Fingerprints (rows of ``(sum, max|p|)``) as one: the sum of all, the largest of all."""
    return [float(sum(a[:, 0].sum() for a in arrays)),
            float(max((a[:, 1].max(initial=0.0) for a in arrays), default=0.0))]


def _replica_gap(arrays: list[np.ndarray], k: int) -> ReplicaGap:
    """The largest gap of update ``k`` over the replicas (the first rank where it is largest)."""
    scale = max(float(np.max(arrays[0][:, 1], initial=0.0)), 1e-300)
    worst = ReplicaGap(0.0, k, 1)
    for rank, other in enumerate(arrays[1:], start=1):
        if other.shape != arrays[0].shape:
            return ReplicaGap(float("inf"), k, rank)
        gap = float(np.max(np.abs(other[:, 0] - arrays[0][:, 0]), initial=0.0)) / scale
        if not gap <= worst.gap:  # NaN too
            worst = ReplicaGap(gap, k, rank)
    return worst


def read_ema(folder: Path) -> EmaPrints | None:
    """The EMA model the folder's processes fingerprinted (``record.ema``; None: none updated):
    rank 0's, or, sharded (FSDP2's), every rank's shards merged (none where a rank's is lost)."""
    files = {int(found[1]): path for path in folder.iterdir()
             if (found := _EMA_FILE.match(path.name))}
    if not files:
        return None
    read = [_ema_file(files[rank]) for rank in sorted(files)]
    header, prints = read[0]
    ranks = set(files) | {int(f[1]) for p in folder.iterdir() if (f := _RANK_FILE.match(p.name))}
    if header.get("sharded") and len(ranks) > 1:  # a rank's file missing: no update, no part
        common = set.intersection(*(set(p) for _, p in read)) if len(read) == len(ranks) else ()
        prints = {k: np.column_stack([sum(p[k][:, 0] for _, p in read),
                                      np.max([p[k][:, 1] for _, p in read], axis=0)])
                  for k in sorted(common)}
    return EmaPrints(str(header["ema"]), str(header.get("call", header["ema"])),
                     tuple(str(n) for n in header.get("names", [])), prints)


def _ema_file(path: Path) -> tuple[dict[str, Any], dict[int, np.ndarray]]:
    """An ``ema-rank{R}.jsonl``: its header, and per update the EMA's fingerprint after it."""
    try:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        if not lines or not isinstance(lines[0], dict) or "ema" not in lines[0]:
            raise ValueError("no header")
        prints = {int(line["after"]): np.asarray(
            [NOT_FINITE.get(v, v) if isinstance(v, str) else v for v in line["fingerprint"]],
            dtype=np.float64).reshape(-1, 2) for line in lines[1:]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"{path}: not the EMA file lrcheck record writes ({exc})") from None
    return lines[0], prints
