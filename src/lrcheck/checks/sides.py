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
from lrcheck.checks.continuation import check_continuation, lockstep_weights, shifted_data
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


def side_checks(reference: Side, candidate: Side, tol: float, lr_tol: float = Tolerances.lr,
                through: int = -1) -> tuple[list[CheckResult], list[str]]:
    """The checks of both runs' optimizers and of their ranks (every rank's LR against rank
    0's within ``lr_tol``, the replicas' agreement within ``tol``; ``through``: the last update
    lockstep judged, -1: none), and why a record folder is incomplete
    (``FolderRun.incomplete``)."""
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
        more.extend(_folder_checks(name, side.run, reference, candidate, tol, lr_tol, through))
    return more, incomplete


def _folder_checks(name: str, run: FolderRun, reference: Side, candidate: Side, tol: float,
                   lr_tol: float, through: int) -> list[CheckResult]:
    """The checks of one record folder ``name``: its recording, its continuation (the
    candidate's data position held against the reference's samples), its ranks' schedules
    and its replicas; only those that have something to say."""
    windows = reference.trace.windows, candidate.trace.windows
    boundaries = run.boundaries
    if name == "candidate" and reference.run is not None:  # its weights where lockstep left it
        boundaries = lockstep_weights(boundaries, reference.run.records, through,
                                      _alike(reference.run, run))
    shifted = [shifted_data(*windows, b.update) if name == "candidate" else None
               for b in boundaries]
    found = [check_recording(name, run.description.get("processes", [])),
             check_continuation(name, boundaries, shifted,
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


def _alike(reference: FolderRun, candidate: FolderRun) -> bool:
    """Whether lockstep's loads left the candidate's parameters bit for bit the reference's:
    one reference process, neither sharded, their first optimizers' parameters of one dtype."""
    def dtype(run: FolderRun) -> object:
        first = (run.description.get("processes") or [{}])[0]
        return next((o.get("dtype") for o in first.get("optimizers", [])
                     if o.get("index") == 0), None)

    return (reference.ranks == 1 and not (reference.sharded or candidate.sharded
                                          or reference.partitioned or candidate.partitioned)
            and dtype(reference) is not None and dtype(reference) == dtype(candidate))
