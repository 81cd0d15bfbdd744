"""One comparison, from a ``PairSpec`` to its ``Report``: what ``lrcheck.compare``, ``lrcheck
compare`` and every pair of a suite run, and the checks of how processes are used that they
share. Importing this module imports neither torch nor numpy; training does."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from lrcheck.errors import SpecError
from lrcheck.runner.ranks.torchrun import candidate_world, check_ref_world, torchrun_env
from lrcheck.spec import DEFAULT_TIMEOUT_S, PairSpec, RunSpec, check_timeout

if TYPE_CHECKING:
    from lrcheck.result import Report
    from lrcheck.runner.pair import Progress
    from lrcheck.trace import RunTrace


def check_processes(ref_world: int, world: int | None, timeout: float | None,
                    environ: Mapping[str, str] = os.environ) -> int:
    """How a comparison uses processes, checked as ``lrcheck compare`` checks its flags: the
    ``timeout`` (``--timeout``: seconds > 0, or None), and, inside torchrun, the reference's
    processes (``--ref-nproc``: 1 or torchrun's world) and the candidate's (``--nproc``: None or
    torchrun's world). Returns the candidate's world size: ``world`` (None: 1), or torchrun's."""
    env = torchrun_env(environ)
    check_timeout(timeout)
    check_ref_world(ref_world, env)
    return candidate_world(world, env)


def under_torchrun(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this process was started by torchrun."""
    return torchrun_env(environ) is not None


def run_comparison(pair: PairSpec, on_report: Callable[[Report], None], *,
                   progress: Progress | None = None, timeout: float | None = DEFAULT_TIMEOUT_S,
                   cache: dict[RunSpec, RunTrace] | None = None) -> int:
    """Train and check ``pair``: ``on_report`` gets the report where there is one, and the exit
    code every process leaves with is returned. Inside torchrun that is rank 0's on every rank,
    and ``on_report`` runs on rank 0 before the processes part: torchrun stops every rank as soon
    as one exits non-zero, so rank 0 saves and shows the report there while the others wait.
    The pair's processes and ``timeout`` are checked first (``check_processes``)."""
    from lrcheck.checks import needs_floor, run_checks
    from lrcheck.result import Report
    from lrcheck.runner.pair import join_torchrun, leave_torchrun, release_torchrun, run_pair

    check_processes(pair.reference.world, pair.candidate.world, timeout)
    member = join_torchrun(pair.candidate, timeout)
    try:
        traces = run_pair(pair, progress, timeout=timeout, member=member, cache=cache,
                          needs_floor=lambda ref, cand: needs_floor(ref, cand,
                                                                    pair.tolerances))
    except BaseException as exc:
        if member is None:
            raise
        told = release_torchrun(member, exc)  # a later comparison in this process joins afresh
        if told is exc:
            raise
        raise told from exc
    report = None
    if traces is not None:
        checks = run_checks(traces.reference, traces.candidate, pair.tolerances, traces.twin)
        report = Report(pair, traces.reference, traces.candidate, checks, traces.environment,
                        judging=traces.judging)

    def hand_over() -> None:
        if report is not None:
            on_report(report)

    code = 0 if report is None else report.exit_code
    if member is None:
        hand_over()
        return code
    return leave_torchrun(member, code, hand_over)


def compare_pair(pair: PairSpec, *, progress: Progress | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT_S,
                 cache: dict[RunSpec, RunTrace] | None = None) -> Report | None:
    """``run_comparison``'s report (None on a torchrun rank other than 0)."""
    reports: list[Report] = []
    run_comparison(pair, reports.append, progress=progress, timeout=timeout, cache=cache)
    return reports[0] if reports else None


def check_setup(specs: list[RunSpec],
                located: Callable[[int, SpecError], SpecError] | None = None) -> None:
    """What can fail for a whole command before any run is built, for each of ``specs``: its
    scheduler factory imports (each name once), and its device exists (``cuda`` is the one that
    can be missing; checking it imports torch, which the others need not wait for).
    ``located(index, error)``: the error to raise instead, saying where ``specs[index]`` came
    from."""
    from lrcheck.experiments.schedulers import SCHEDULERS, load_factory

    loaded: set[str] = set()
    for index, spec in enumerate(specs):
        if spec.scheduler in SCHEDULERS or spec.scheduler in loaded:
            continue
        try:
            load_factory(spec.scheduler)
        except SpecError as exc:
            raise (exc if located is None else located(index, exc)) from None
        loaded.add(spec.scheduler)
    if any(spec.device == "cuda" for spec in specs):
        from lrcheck.runner.device import resolve_device

        resolve_device("cuda")
