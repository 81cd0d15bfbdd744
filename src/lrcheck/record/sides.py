"""The two runs ``lrcheck diff`` compares, each a Recorder file or a record folder, read as
traces: a folder's ranks merged (``record.folder``), and both aligned by update index where a
folder does not know its samples per update. Where one run was partitioned by ZeRO (its
fingerprint the whole model's, ``record.folder``), the other's is taken whole too. Data only:
``checks.sides`` and ``checks.recorded`` judge it."""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from lrcheck.errors import SpecError
from lrcheck.hparams import OptimizerSettings
from lrcheck.plan.judging import Recorded, RecordedJudging, recorded_judging
from lrcheck.record.folder import (
    FolderRun,
    description,
    fed_rows,
    read_ema,
    read_folder,
    whole_model,
)
from lrcheck.record.tokens import read_held
from lrcheck.recorder import read_records
from lrcheck.stepwise import LINES, Boundary, EmaPrints, RecordedFacts, StepGaps
from lrcheck.trace import RecordedCommand, RunTrace
from lrcheck.words import plural


@dataclass(frozen=True)
class Side:
    """One of the two runs as read: its trace, its optimizers' settings (``hparams``) and, for
    a record folder, the folder as one run (None: a Recorder file)."""

    trace: RunTrace
    settings: OptimizerSettings | None
    run: FolderRun | None


def read_sides(reference: Path, candidate: Path) -> tuple[Side, Side]:
    """Both runs as read, traces aligned (see the module's docstring); ``checks.sides`` judges
    what they hold beside their updates (optimizers, ranks, replicas, continuation)."""
    sides: list[tuple[list[dict[str, Any]], FolderRun | None]] = []
    for path in (reference, candidate):
        if path.is_dir():
            folder = read_folder(path)
            sides.append((folder.records, folder))
        else:
            sides.append((read_records(path), None))
    if any(run is not None and not run.samples_known for _, run in sides):
        sides = [([{**r, "samples_seen": k + 1} for k, r in enumerate(records)], run)
                 for records, run in sides]
    sides = _numbered(sides)
    if any(run is not None and run.partitioned for _, run in sides):
        sides = [(records if run is not None and run.partitioned else
                  [_whole(r) for r in records], run) for records, run in sides]
    ref, cand = (Side(RunTrace.from_records(records, str(path),
                                            None if run is None else _command(run)),
                      OptimizerSettings.from_records(records), run)
                 for (records, run), path in zip(sides, (reference, candidate), strict=True))
    return ref, cand


def _numbered(sides: list[tuple[list[dict[str, Any]], FolderRun | None]]
              ) -> list[tuple[list[dict[str, Any]], FolderRun | None]]:
    """Both runs' records with each sample's identity (a row's hash, ``record.taps``) as a
    number shared by the two runs: the samples numbered in the order the reference first fed
    them, then the candidate's others in theirs. A Recorder file's own micro-batches (one
    process's) are read as rank 0's."""
    numbers: dict[int, int] = {}
    out = []
    for records, run in sides:
        numbered = []
        for record in records:
            if "fed" not in record:
                numbered.append(record)
                continue
            window = record["fed"] if run is not None else fed_rows([record])
            numbered.append({**record, "fed": [
                [rank, [numbers.setdefault(int(h), len(numbers)) for h in ids], *more]
                for rank, ids, *more in window]})
        out.append((numbered, None if run is None else _numbered_cuts(run, numbers)))
    return out


def _numbered_cuts(run: FolderRun, numbers: dict[int, int]) -> FolderRun:
    """``run`` with the samples of each window cut by an interrupt (a boundary's ``cut``:
    ``record.interrupt``) numbered as the records' are."""
    def numbered(b: Boundary) -> Boundary:
        cut = (b.before or {}).get("cut")
        if not cut:
            return b
        fed = [[numbers.setdefault(int(h), len(numbers)) for h in ids] for ids in cut["fed"]]
        return replace(b, before={**(b.before or {}), "cut": {**cut, "fed": fed}})

    return replace(run, boundaries=tuple(numbered(b) for b in run.boundaries))


def _command(run: FolderRun) -> RecordedCommand:
    """The command a record folder recorded, as its run.json says (its world size, or else the
    ranks that recorded)."""
    about = run.description
    return RecordedCommand(shlex.join(str(word) for word in about.get("command", [])),
                           int(about.get("world_size") or run.ranks), run.samples_known)


def _whole(record: dict[str, Any]) -> dict[str, Any]:
    if record.get("fingerprint") is None:
        return record
    return {**record,
            "fingerprint": whole_model([np.asarray(record["fingerprint"]).reshape(-1, 2)])}


def read_emas(reference: Path, candidate: Path, twin: Path | None = None
              ) -> tuple[EmaPrints | None, EmaPrints | None, EmaPrints | None] | None:
    """The EMA model of each record folder (``record.folder.read_ema``: None where it updated
    none) and of the reference command's ``twin``; None where a run is a Recorder file, whose
    EMA was not recorded."""
    if not (reference.is_dir() and candidate.is_dir()):
        return None
    return read_ema(reference), read_ema(candidate), None if twin is None else read_ema(twin)


def read_facts(reference: Path, candidate: Path, twin: Path | None = None,
               boundaries: Sequence[Boundary] | None = None) -> RecordedFacts:
    """What the two record folders say beyond their Recorder lines (``RecordedFacts``; the
    ``twin``'s record folder read as the reference is, against the candidate; ``boundaries``:
    where the candidate's later processes joined its timeline, read from its folder where not
    given); empty for Recorder files."""
    if not (reference.is_dir() and candidate.is_dir()):
        return RecordedFacts()
    about = {side: description(path) for side, path in (("reference", reference),
                                                       ("candidate", candidate))}
    judging, gaps = read_judging(candidate, boundaries)
    first = [o for p in about["reference"].get("processes", []) for o in p.get("optimizers", [])
             if o.get("index") == 0]
    optimizer = str(first[0].get("class", "")).rsplit(".", 1)[-1] if first else ""
    twin_trace = None if twin is None else read_sides(twin, candidate)[0].trace
    others = []
    for rank in range(1, int(about["candidate"].get("world_size") or 1)):
        path = candidate / LINES.format(rank=rank)
        if gaps is not None and path.exists():
            others.append(StepGaps.from_lines(_json_lines(path), str(path)).before(
                resumed_at(boundaries)))
    return RecordedFacts(gaps, judging, _stochastic(about), optimizer, twin_trace, tuple(others),
                         read_held(candidate), tuple(boundaries or ()))


def resumed_at(boundaries: Sequence[Boundary] | None) -> int | None:
    """The update where the first later process of a lockstep candidate joined its timeline
    (a resume, which runs free); None where none did."""
    return next((b.update for b in boundaries or () if b.lockstep), None)


def read_judging(candidate: Path, boundaries: Sequence[Boundary] | None = None
                 ) -> tuple[RecordedJudging, StepGaps | None]:
    """How the effects of a candidate's record folder are judged (``recorded_judging``), from
    its rank 0's lockstep file and where a later process resumed it (``boundaries``, read from
    the folder where not given), and that file's gaps of the updates lockstep judged (None: it
    judged none)."""
    lines = candidate / LINES.format(rank=0)
    if not lines.exists():
        return recorded_judging(None, free="the runs were recorded one after the other, by "
                                           "lrcheck run --free or lrcheck record"), None
    if boundaries is None:
        boundaries = (read_folder(candidate).boundaries
                      if any(candidate.glob("rank0-p*.jsonl")) else ())
    resumed = resumed_at(boundaries)
    found = StepGaps.from_lines(_json_lines(lines), str(lines))
    judging = recorded_judging(found.steps.tolist(), found.stopped, resumed=resumed)
    return judging, None if judging.mode is Recorded.FREE else found.before(resumed)


def _json_lines(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]
    except (OSError, ValueError) as exc:
        raise SpecError(f"{path}: cannot be read as JSON lines ({exc})") from None


def _stochastic(about: dict[str, dict[str, Any]]) -> str | None:
    """Why the effects are not comparable: dropout that drew masks in either run."""
    found = []
    for side, data in about.items():
        layers = {(o["module"], o["p"]) for p in data.get("processes", [])
                  for opt in p.get("optimizers", []) for o in opt.get("stochastic", [])}
        calls = sum(int(p.get("dropout_calls") or 0) for p in data.get("processes", []))
        if not calls and not layers:
            continue
        if layers:
            ps = ", ".join(f"p={p:g}" for p in sorted({p for _, p in layers}))
            names = sorted(m for m, _ in layers)
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3
                                            else "")
            found.append(f"dropout {ps} active in {plural(len(names), 'module')} of the {side} "
                         f"({shown})")
        else:
            found.append(f"dropout drew masks {calls} times in the {side} "
                         "(torch.nn.functional's dropout in training)")
    if not found:
        return None
    return ("; ".join(found) + ": set it to 0 for the check (or call model.eval() on its "
            "dropout layers), or the effects are not comparable")
