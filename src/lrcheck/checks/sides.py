"""What two recorded runs hold beside their updates, judged: their optimizers
(``checks.optimizer``), and for each record folder whether its recording stayed on
(``check_recording``), how its later processes carried on (``check_continuation``), every
rank's schedule against rank 0's (``check_ranks``), the replicas' agreement
(``check_replicas``) and, sharded over DTensors, the run's clipping norm against the true
global one (``checks.norms``); and why a record folder is incomplete (its command failed or was
stopped). ``record.sides`` reads the runs; this judges what it read."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrcheck.checks.commands import check_merged, check_ranks, check_recording, check_replicas
from lrcheck.checks.continuation import check_continuation, shifted_data
from lrcheck.checks.experts import check_experts
from lrcheck.checks.norms import check_clip_norm
from lrcheck.checks.optimizer import check_optimizer
from lrcheck.checks.probes import check_probes
from lrcheck.checks.recorded import align
from lrcheck.checks.stages import check_stages
from lrcheck.checks.status import CheckResult
from lrcheck.spec import Tolerances

if TYPE_CHECKING:
    from lrcheck.record.folder import FolderRun
    from lrcheck.record.sides import Side


def side_checks(reference: Side, candidate: Side, tol: float, lr_tol: float = Tolerances.lr
                ) -> tuple[list[CheckResult], list[str]]:
    """The checks of both runs' optimizers and of their ranks (every rank's LR against rank
    0's within ``lr_tol``, the replicas' agreement within ``tol``), and why a record folder is
    incomplete (``FolderRun.incomplete``)."""
    more, incomplete = [], []
    optimizer = check_optimizer(reference.settings, candidate.settings,
                                align(reference.trace, candidate.trace), lr_tol)
    if optimizer is not None:
        more.append(optimizer)
    for name, side in (("reference", reference), ("candidate", candidate)):
        if side.run is None:
            continue
        if (why := side.run.incomplete(name)) is not None:
            incomplete.append(why)
        more.extend(_folder_checks(name, side.run, reference, candidate, tol, lr_tol))
    return more, incomplete


def _folder_checks(name: str, run: FolderRun, reference: Side, candidate: Side, tol: float,
                   lr_tol: float) -> list[CheckResult]:
    """The checks of one record folder ``name``: its recording, its continuation (the
    candidate's data position held against the reference's samples), its ranks' schedules
    and its replicas; only those that have something to say."""
    windows = reference.trace.windows, candidate.trace.windows
    shifted = [shifted_data(*windows, b.update) if name == "candidate" else None
               for b in run.boundaries]
    found = [check_recording(name, run.description.get("processes", [])),
             check_continuation(name, run.boundaries, shifted,
                                windows[1] if name == "candidate" else None)]
    if run.schedules is not None:
        found.append(check_ranks(name, run.schedules.lrs, run.schedules.steps, lr_tol,
                                 run.schedules.cadence))
    if run.replicas is not None:
        found.append(check_replicas(name, [g.row for g in run.replicas],
                                    run.ranks, tol))
    found.append(check_merged(name, run.records))  # record.placed.unmerged
    if run.ranks > 1 and run.sharded and not run.partitioned:  # DTensors: merged by placement
        found.append(check_clip_norm(name, run.records, tol))
    if name == "candidate" and reference.run is not None:  # pipeline stages (record.staged)
        found.append(check_stages(run.records, reference.run.records, tol))
        found.append(check_experts(run.records, reference.run.records, tol))  # record.experts
        found.append(check_probes(run.records, reference.run.records, tol))  # record.probes
    return [check for check in found if check is not None]
