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
from lrcheck.words import plural

if TYPE_CHECKING:
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


def findings(folder: Path, side: str, given: Path | None = None) -> list[LogFinding]:
    """The findings of ``side``'s log (``given``, else the one its frameworks noted) against
    the record in ``folder``: none where no log is given nor noted. A log given that cannot
    be read is a ``SpecError``."""
    from lrcheck.logs.read import read_logs
    from lrcheck.logs.truth import hold

    path = given if given is not None else _found(folder)
    if path is None:
        return []
    try:
        log = read_logs(Path(path))
    except SpecError:
        if given is not None:
            raise
        return []  # a folder a trainer named, holding nothing this reads
    return hold(log, read_folder(folder).records, side)


def write_findings(folder: Path, found: Sequence[LogFinding]) -> Path:
    """``logs.json`` of the record folder: the findings, as result.json's ``logs`` holds them."""
    path = folder / FILE
    path.write_text(json.dumps({"logs": [f.to_dict() for f in found]}, indent=1) + "\n",
                    encoding="utf-8")
    return path


def summary(found: Sequence[LogFinding]) -> str:
    """One line: how many quantities logged match their recording."""
    words = {status: [f.quantity.value for f in found if f.status.value == status]
             for status in ("matches", "differs", "unknown")}
    return (f"logs: {plural(len(found), 'quantity', 'quantities')} logged, held against the "
            "recording: " + "; ".join(f"{status} {', '.join(names)}"
                                      for status, names in words.items() if names))
