"""The files through which launched workers and the parent talk: one folder per launched run.

These are the runner's working files, not a report (reports/ writes those)::

    spec.json       the RunSpec and the role, written by the parent
    updates.jsonl   rank 0: a line when training starts (every rank has built its model and
                    DDP), then one per update (progress, and what an interrupted run recorded)
    trace.json      rank 0 at the end: the RunTrace without its parameters ...
    params.npy      ... which are here: parameters after every update
    rankR.log       rank R's stdout and stderr
    rankR.error     one line, when rank R raised
    torchrun.log    torchrun's own output

Single-line and whole-file writes are atomic (a reader never sees half of one).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lrcheck.spec import RunSpec
from lrcheck.trace import RunTrace, UpdateRecord

SPEC, UPDATES, TRACE, PARAMS, TORCHRUN_LOG = (
    "spec.json", "updates.jsonl", "trace.json", "params.npy", "torchrun.log")


def log_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.log"


def _replace_into(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def write_spec(folder: Path, spec: RunSpec, role: str) -> None:
    text = json.dumps({"role": role, "spec": spec.to_dict()})
    _replace_into(folder / SPEC, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_spec(folder: Path) -> tuple[RunSpec, str]:
    data = json.loads((folder / SPEC).read_text(encoding="utf-8"))
    return RunSpec(**data["spec"]), data["role"]


def append_line(folder: Path, entry: dict) -> None:
    """One JSON line, written with a single ``write`` so that a reader sees all of it or none."""
    with open(folder / UPDATES, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def started_line() -> dict:
    return {"event": "started"}


def update_line(record: UpdateRecord, total: int) -> dict:
    return {"event": "update", "total": total, "update": record.to_dict()}


@dataclass
class LineReader:
    """Reads ``updates.jsonl`` as it grows: each call returns the complete lines added since."""

    folder: Path
    offset: int = 0
    pending: str = field(default="", repr=False)

    def new(self) -> list[dict]:
        path = self.folder / UPDATES
        if not path.exists():
            return []
        with open(path, encoding="utf-8") as f:
            f.seek(self.offset)
            chunk = f.read()
            self.offset = f.tell()
        lines = (self.pending + chunk).split("\n")
        self.pending = lines.pop()
        return [json.loads(line) for line in lines if line]


def write_trace(folder: Path, trace: RunTrace) -> None:
    def save_params(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.save would append .npy to a name
            np.save(f, trace.params)

    _replace_into(folder / PARAMS, save_params)
    text = json.dumps(trace.to_dict(), allow_nan=True)
    _replace_into(folder / TRACE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_trace(folder: Path) -> RunTrace | None:
    """The finished trace, or None when rank 0 did not write one."""
    if not (folder / TRACE).exists():
        return None
    data = json.loads((folder / TRACE).read_text(encoding="utf-8"))
    return RunTrace.from_dict(data, np.load(folder / PARAMS))


def write_error(folder: Path, rank: int, line: str) -> None:
    one_line = " ".join(line.split())
    _replace_into(folder / f"rank{rank}.error",
                  lambda tmp: tmp.write_text(one_line, encoding="utf-8"))


def read_errors(folder: Path) -> list[tuple[int, str]]:
    """``(rank, line)`` for every rank that raised, the first to raise first: a rank that fails
    makes its peers fail too (their collectives lose it), and the first one is the cause."""
    found = []
    for path in folder.glob("rank*.error"):
        rank = int(path.stem.removeprefix("rank"))
        found.append((path.stat().st_mtime_ns, rank, path.read_text(encoding="utf-8")))
    return [(rank, line) for _, rank, line in sorted(found)]
