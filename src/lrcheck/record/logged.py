"""A recorded command's own logs, found and held against its recording (``logs.truth``):
given (``--logs DIR``, ``--ref-logs DIR``), or where the frameworks put them — the folders a
recorded process's ``transformers.Trainer`` or ``lightning.Trainer`` logged into
(``record.modules.log_folders``, noted in its ``rank{R}.json``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lrcheck.errors import SpecError
from lrcheck.record.folder import description, read_folder

if TYPE_CHECKING:
    from lrcheck.logs.model import Reading
    from lrcheck.logs.truth import LogFinding

FILE = "logs.json"  # what ``lrcheck record --logs`` writes into the record folder


def noted(folder: Path) -> list[Path]:
    """The log folders the record's processes noted (rank 0's first), as they named them."""
    processes = sorted(description(folder).get("processes", []),
                       key=lambda p: (p.get("rank", 0), p.get("pid", 0)))
    seen: list[Path] = []
    for process in processes:
        for entry in process.get("logs", []) or []:
            path = Path(str(entry.get("folder", "")))
            if entry.get("folder") and path not in seen:
                seen.append(path)
    return seen


def _found(folder: Path) -> Path | None:
    """The first noted folder that holds a log (``logs.read.find_logs``); None: none does."""
    from lrcheck.logs.read import find_logs

    for hint in noted(folder):
        try:
            return find_logs(hint)
        except SpecError:
            continue
    return None


def findings(folder: Path, side: str, given: Path | None = None,
             stated: Reading | None = None) -> list[LogFinding]:
    """The findings of ``side``'s log (``given``, else the one its frameworks noted) against
    the record in ``folder`` (``stated``: the tags and step convention the user stated):
    none where no log is given nor noted; one ``unknown`` finding that says why where the log
    cannot be read or holds nothing lrcheck can map (the tags it has)."""
    from lrcheck.logs.model import Reading
    from lrcheck.logs.read import read_logs
    from lrcheck.logs.truth import UNKNOWN, LogFinding, hold

    path = given if given is not None else _found(folder)
    if path is None:
        return []
    stated = stated or Reading()
    try:
        log = read_logs(Path(path), tags=stated.tags, steps=stated.steps)
    except SpecError as exc:
        # Said in the logs section rather than raised: the runs are recorded by now, and a
        # log never decides the verdict.
        whose = "given" if given is not None else "its trainer wrote"
        return [LogFinding(side, None, UNKNOWN, f"the log {whose} could not be read: {exc}",
                           None, str(path))]
    run = read_folder(folder)
    return hold(log, run.records, side, run.description.get("samples_per_update"))


def write_findings(folder: Path, found: Sequence[LogFinding]) -> Path:
    """``logs.json`` of the record folder: the findings, as result.json's ``logs`` holds them."""
    path = folder / FILE
    path.write_text(json.dumps({"logs": [f.to_dict() for f in found]}, indent=1) + "\n",
                    encoding="utf-8")
    return path
