"""``lrcheck diff`` of two runs from their logs alone (docs/logs.md, "Two runs from their
logs"), read: each log read (``logs.read``) and made a ``RunTrace`` of the updates it logged, so
that the report is every diff's (table, plots, result.json, report.html, exit codes).
``checks.logs`` compares the updates both logged."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lrcheck.errors import SpecError
from lrcheck.logs.model import LoggedRun, Quantity, Reading
from lrcheck.logs.read import is_log_folder, read_logs
from lrcheck.logs.steps import counted
from lrcheck.trace import RunTrace, UpdateRecord


def logs_pair(reference: Path, candidate: Path) -> bool:
    """Whether ``lrcheck diff`` compares two logs: both are (``logs.read.is_log_folder``); one
    log against a recording is a ``SpecError``."""
    for path in (reference, candidate):
        if not path.exists():
            raise SpecError(f"{path}: no such file or folder")
    ref, cand = is_log_folder(reference), is_log_folder(candidate)
    if ref != cand:
        log, other = (reference, candidate) if ref else (candidate, reference)
        raise SpecError(f"{log} is a training log, {other} is not: lrcheck diff compares two "
                        "logs, or two recordings (Recorder files, record folders)")
    return ref


def read_pair(reference: Path, candidate: Path, stated: Reading | None = None
              ) -> tuple[tuple[LoggedRun, LoggedRun], tuple[RunTrace, RunTrace]]:
    """Both logs, and each as a trace (``log_trace``: both by samples seen where both logged
    them at every update, else both by update index); ``stated``: the tags and the step
    convention the user stated, for both. ``checks.logs.log_checks`` judges them."""
    stated = stated or Reading()
    steps = None if stated.steps is None else counted(stated.steps, f"{reference}, {candidate}")
    logs = (read_logs(reference, tags=stated.tags, steps=steps),
            read_logs(candidate, tags=stated.tags, steps=steps))
    samples = all(_samples_known(run) for run in logs)  # else both by update index
    return logs, (log_trace(logs[0], samples), log_trace(logs[1], samples))


def _by_update(run: LoggedRun) -> dict[Quantity, dict[int, float]]:
    return {q: dict(zip(*(a.tolist() for a in run.at_updates(q)), strict=True)) for q in Quantity}


def _samples_known(run: LoggedRun) -> bool:
    """Whether ``run`` logged its samples seen at every update it logged anything at."""
    at = _by_update(run)
    ks = {k for values in at.values() for k in values}
    return bool(ks) and ks <= set(at[Quantity.SAMPLES])


def log_trace(run: LoggedRun, samples: bool = True) -> RunTrace:
    """The updates ``run`` logged anything at, in order, as a trace: each with its LR per
    param group (NaN where not logged at that update), its loss and gradient norm (None where
    not), and its samples seen where ``samples`` and the log has them at every such update
    (else ``k + 1``: the report's plots align the runs by it)."""
    at = _by_update(run)
    groups = [dict(zip(*(a.tolist() for a in run.series_at_updates(s)), strict=True))
              for s in run.lr_groups]
    ks = sorted({k for values in at.values() for k in values})
    known = samples and _samples_known(run)
    samples_at = at[Quantity.SAMPLES]
    updates = [UpdateRecord(k, tuple(g.get(k, np.nan) for g in (at[Quantity.LR], *groups)),
                            at[Quantity.LOSS].get(k), int(samples_at[k]) if known else k + 1,
                            None, None) for k in ks]
    norms = at[Quantity.GRAD_NORM]
    return RunTrace(spec=None, updates=updates, epochs=[], params=np.empty((0, 0)),
                    planned_updates=len(updates), context=None, source=str(run.path),
                    grad_norms=[norms.get(k) for k in ks] if norms else None)
