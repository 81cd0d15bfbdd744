"""The two runs ``lrcheck diff`` compares, each a Recorder file or a record folder, read as
traces: a folder's ranks merged (``record.folder``), and both aligned by update index where a
folder does not know its samples per update. Where one run was partitioned by ZeRO (its
fingerprint the whole model's, ``record.folder``), the other's is taken whole too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lrcheck.checks.commands import check_replicas
from lrcheck.checks.status import CheckResult
from lrcheck.record.folder import FolderRun, read_folder, whole_model
from lrcheck.recorder import read_records
from lrcheck.trace import RunTrace


def read_sides(reference: Path, candidate: Path,
               tol: float) -> tuple[RunTrace, RunTrace, list[CheckResult], list[str]]:
    """Both runs as traces, the checks of their replicas' agreement, and why a record folder
    is incomplete (``FolderRun.incomplete``: its command failed or was stopped)."""
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
    if any(run is not None and run.partitioned for _, run in sides):
        sides = [(records if run is not None and run.partitioned else
                  [_whole(r) for r in records], run) for records, run in sides]
    traces = [RunTrace.from_records(records, str(path))
              for (records, _), path in zip(sides, (reference, candidate), strict=True)]
    more, incomplete = [], []
    for name, (_, run) in zip(("reference", "candidate"), sides, strict=True):
        if run is not None and (why := run.incomplete(name)) is not None:
            incomplete.append(why)
        if run is not None and run.replicas is not None:
            gap = run.replicas
            found = check_replicas(name, (gap.gap, gap.update, gap.rank), run.ranks, tol)
            if found is not None:
                more.append(found)
    return traces[0], traces[1], more, incomplete


def _whole(record: dict[str, Any]) -> dict[str, Any]:
    if record.get("fingerprint") is None:
        return record
    return {**record,
            "fingerprint": whole_model([np.asarray(record["fingerprint"]).reshape(-1, 2)])}
