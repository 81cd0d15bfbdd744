"""The files through which launched workers and the parent talk: one folder per launched run.

These are the runner's working files, not a report (reports/ writes those)::

    spec.json            the RunSpec and its role, written by the parent; with the single-process
                         reference that rank 0 trains, when there is one, and the order of the
                         job's runs (``plan.judging.Step``)
    updates.jsonl        rank 0: a line when training starts (every rank has built its model and
                         DDP), then one per update of each run (progress, and what an
                         interrupted run recorded)
    ROLE-trace.json      rank 0 at the end of each run: its RunTrace without the parameters ...
    ROLE-params.npy      ... which are here: parameters after every update
    environment.json     rank 0: where the runs ran (lrcheck, torch, device, ...)
    rankR.log            rank R's stdout and stderr
    rankR.pid            rank R's process id, written when it starts ...
    rankR.done           ... and this when it has done all its work and leaves: a rank whose
                         process is gone with neither this nor an error file died
    rankR.error          when rank R raised: the run it was in, the error on one line, and
                         whether it is bad input (exit 2) rather than a crash (exit 3)
    torchrun.log         torchrun's own output

Single-line and whole-file writes are atomic (a reader never sees half of one).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from lrcheck.environment import Environment
from lrcheck.plan.judging import Step
from lrcheck.spec import RunSpec
from lrcheck.trace import RunTrace, UpdateJson, UpdateRecord

if TYPE_CHECKING:  # the parent of a launch imports no torch
    from lrcheck.runner.lockstep import Lockstep

SPEC, UPDATES, ENVIRONMENT, TORCHRUN_LOG = (
    "spec.json", "updates.jsonl", "environment.json", "torchrun.log")


def log_path(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}.log"


def _replace_into(path: Path, write: Callable[[Path], object]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def trace_path(folder: Path, role: str) -> Path:
    return folder / f"{role}-trace.json"


def params_path(folder: Path, role: str) -> Path:
    return folder / f"{role}-params.npy"


def _write_json(path: Path, data: object) -> None:
    text = json.dumps(data, allow_nan=True)
    _replace_into(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_spec(folder: Path, spec: RunSpec, role: str, reference: RunSpec | None = None,
               order: tuple[Step, ...] | None = None) -> None:
    _write_json(folder / SPEC, {"role": role, "spec": spec.to_dict(),
                                "reference": None if reference is None else reference.to_dict(),
                                "order": [s.to_dict() for s in order or (Step(role),)]})


@dataclass(frozen=True)
class JobSpec:
    """What a launched job trains, in ``order`` (its pair's ``plan.judging.RunOrder``): ``spec``
    as ``role`` on every rank and, maybe, a single-process ``reference`` on rank 0."""

    spec: RunSpec
    role: str
    reference: RunSpec | None
    order: tuple[Step, ...]


def read_spec(folder: Path) -> JobSpec:
    data = json.loads((folder / SPEC).read_text(encoding="utf-8"))
    reference = data.get("reference")
    return JobSpec(RunSpec(**data["spec"]), data["role"],
                   None if reference is None else RunSpec(**reference),
                   tuple(Step.from_dict(step) for step in data["order"]))


class _Event(TypedDict):
    event: str
    role: str


class HandoffLine(_Event, total=False):
    """A line of ``updates.jsonl``: a run ``started``, or made an ``update`` (of ``total``)."""

    total: int
    update: UpdateJson


def append_line(folder: Path, entry: HandoffLine) -> None:
    """One JSON line, written with a single ``write`` so that a reader sees all of it or none."""
    with open(folder / UPDATES, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def started_line(role: str) -> HandoffLine:
    return {"event": "started", "role": role}


def update_line(record: UpdateRecord, total: int, role: str) -> HandoffLine:
    return {"event": "update", "role": role, "total": total, "update": record.to_dict()}


@dataclass
class LineReader:
    """Reads ``updates.jsonl`` as it grows: each call returns the complete lines added since."""

    folder: Path
    offset: int = 0
    pending: str = field(default="", repr=False)

    def new(self) -> list[HandoffLine]:
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


def states_path(folder: Path, role: str) -> Path:
    return folder / f"{role}-states.npy"


def _save_array(path: Path, array: np.ndarray) -> None:
    def save(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # a file object: np.save would append .npy to a name
            np.save(f, array)

    _replace_into(path, save)


def write_trace(folder: Path, trace: RunTrace, role: str) -> None:
    _save_array(params_path(folder, role), trace.params)
    if trace.optimizer_states is not None:
        _save_array(states_path(folder, role), trace.optimizer_states)
    _write_json(trace_path(folder, role), trace.to_dict(windows=True))


def read_trace(folder: Path, role: str) -> RunTrace | None:
    """The finished trace of ``role``, or None when rank 0 did not write one."""
    path = trace_path(folder, role)
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    trace = RunTrace.from_dict(data, np.load(params_path(folder, role)))
    if states_path(folder, role).exists():
        trace.optimizer_states = np.load(states_path(folder, role))
    return trace


LOCKSTEP_PARAMS, LOCKSTEP_STATES = "lockstep-params.npy", "lockstep-states.npy"


def write_lockstep(folder: Path, lockstep: Lockstep) -> None:
    """The reference's states a launched candidate runs in lockstep with (every rank reads
    them: the ranks run on this machine)."""
    _save_array(folder / LOCKSTEP_PARAMS, lockstep.params)
    _save_array(folder / LOCKSTEP_STATES, lockstep.states)


def read_lockstep(folder: Path) -> Lockstep | None:
    from lrcheck.runner.lockstep import Lockstep

    if not (folder / LOCKSTEP_PARAMS).exists():
        return None
    return Lockstep(np.load(folder / LOCKSTEP_PARAMS), np.load(folder / LOCKSTEP_STATES))


def write_environment(folder: Path, environment: Environment) -> None:
    _write_json(folder / ENVIRONMENT, environment.to_dict())


def read_environment(folder: Path) -> Environment | None:
    """What rank 0 wrote, or None before it has."""
    path = folder / ENVIRONMENT
    if not path.exists():
        return None
    return Environment.from_dict(json.loads(path.read_text(encoding="utf-8")))


@dataclass(frozen=True)
class RankError:
    """What a rank that raised reported: ``line`` on one line, the ``role`` of the run it was
    in, and whether it is bad input (a ``SpecError``: exit 2) rather than a crash."""

    rank: int
    line: str
    role: str
    bad_input: bool = False


def write_error(folder: Path, rank: int, line: str, role: str, bad_input: bool = False) -> None:
    _write_json(folder / f"rank{rank}.error",
                {"line": " ".join(line.split()), "role": role, "bad_input": bad_input})


def write_pid(folder: Path, rank: int) -> None:
    _replace_into(folder / f"rank{rank}.pid", lambda tmp: tmp.write_text(str(os.getpid())))


def write_done(folder: Path, rank: int) -> None:
    _replace_into(folder / f"rank{rank}.done", lambda tmp: tmp.write_text(""))


def read_pids(folder: Path) -> dict[int, int]:
    """The process id of every rank that has started, by rank."""
    return {int(path.stem.removeprefix("rank")): int(path.read_text())
            for path in folder.glob("rank*.pid")}


def accounted(folder: Path) -> set[int]:
    """The ranks that left on their own terms: done, or after reporting an error."""
    return {int(path.stem.removeprefix("rank"))
            for pattern in ("rank*.done", "rank*.error") for path in folder.glob(pattern)}


def last_log_line(folder: Path, rank: int) -> str:
    """The last non-empty line of rank ``rank``'s log ('' when there is none)."""
    try:
        with open(log_path(folder, rank), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def read_errors(folder: Path) -> list[RankError]:
    """Every rank that raised, the first to raise first: a rank that fails makes its peers fail
    too (their collectives lose it), and the first one is the cause."""
    found = []
    for path in folder.glob("rank*.error"):
        data = json.loads(path.read_text(encoding="utf-8"))
        found.append((path.stat().st_mtime_ns,
                      RankError(int(path.stem.removeprefix("rank")), **data)))
    return [error for _, error in sorted(found, key=lambda item: (item[0], item[1].rank))]
