"""One rank of a run that lrcheck launched: ``python -m lrcheck.runner.rank FOLDER``,
started by torchrun with the argv of ``torchrun.torchrun_argv``.

Every rank checks the plan (bad input is told before anything trains) and trains; rank 0
records (``handoff``: a line per update as it goes, the whole trace at the end). When the job
carries a single-process reference, rank 0 trains it — so the parent process imports neither
torch nor the data — where the job's order (``plan.judging.run_order``, in ``spec.json``) puts
it: first when the candidate runs in lockstep with it (the other ranks wait in the process
group's rendezvous, then get its states by broadcast), else afterwards, the other ranks having
left, as a bare torchrun script would. A rank that raises writes its error in one line before it
leaves, so the parent can name the rank and the cause while the other ranks are still failing
because they lost it.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from lrcheck.errors import LrcheckError, RunError, SpecError
from lrcheck.plan.judging import REFERENCE
from lrcheck.procs.marks import exit_now
from lrcheck.runner.ranks import handoff
from lrcheck.runner.ranks.torchrun import TorchrunEnv, torchrun_env
from lrcheck.runner.startup import hold
from lrcheck.trace import OnUpdate, RunTrace, UpdateRecord


def _send_output_to(path: Path) -> None:
    """This process's stdout and stderr (Python's and any C library's) go to ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


class _Lines:
    """The lines rank 0 appends to the hand-off as a run goes (``handoff``): its start and each
    update; the other ranks write none."""

    def __init__(self, folder: Path, lead: bool) -> None:
        self.folder, self.lead = folder, lead

    def on_update(self, run: str) -> OnUpdate:
        def on_update(record: UpdateRecord, total: int) -> None:
            if self.lead:
                handoff.append_line(self.folder, handoff.update_line(record, total, run))

        return on_update

    def on_start(self, run: str) -> Callable[[], None]:
        def started() -> None:
            if self.lead:
                handoff.append_line(self.folder, handoff.started_line(run))

        return started


def _write_error(folder: Path, rank: int, exc: BaseException, role: str) -> None:
    """The error that ended this rank, in one line (the cause of a ``RunError``)."""
    traceback.print_exc()
    cause = exc.__cause__ if isinstance(exc, RunError) and exc.__cause__ else exc
    line = str(cause) if isinstance(cause, LrcheckError) else f"{type(cause).__name__}: {cause}"
    handoff.write_error(folder, rank, line, role, bad_input=isinstance(cause, SpecError))


def main(argv: list[str] | None = None) -> int:
    hold()  # until the run is built (runner.startup): first, then the imports that load torch
    from lrcheck.runner.preflight import preflight

    folder = Path((sys.argv[1:] if argv is None else argv)[0])
    env = torchrun_env(os.environ)
    if env is None:
        print("lrcheck.runner.rank runs under torchrun only", file=sys.stderr)
        return 2
    _send_output_to(handoff.log_path(folder, env.rank))
    handoff.write_pid(folder, env.rank)
    running = ["candidate"]  # the run this rank is in, for its error line
    try:
        job = handoff.read_spec(folder)
        steps = {step.role: step for step in job.order}
        runs = [(job.spec, steps[job.role])]
        if job.reference is not None:
            runs.append((job.reference, steps[REFERENCE]))
        device, environment = preflight(runs)
        if env.rank == 0:
            handoff.write_environment(folder, environment)
        _follow(job, env, folder, device, running)
    except BaseException as exc:  # noqa: BLE001 - every way out is reported, Ctrl-C included
        _write_error(folder, env.rank, exc, running[0])
        return 1
    finally:
        sys.stdout.flush()
    handoff.write_done(folder, env.rank)
    return 0


def _follow(job: handoff.JobSpec, env: TorchrunEnv, folder: Path, device: str,
            running: list[str]) -> None:
    """The job's runs in its order: ``job.spec`` on every rank, in the process group, and the
    single-process ``job.reference`` on rank 0 alone — before the candidate the other ranks wait
    for it in the process group's rendezvous, then get its states by broadcast where the
    candidate runs in lockstep with it; after it, they have left. ``running[0]``: the run this
    rank is in."""
    from lrcheck.runner.local import run_local
    from lrcheck.runner.lockstep import broadcast, lockstep_from
    from lrcheck.runner.ranks import group

    lead = env.rank == 0
    lines = _Lines(folder, lead)
    states = handoff.read_lockstep(folder)  # a reference trained before the job
    reference: RunTrace | None = None
    trained_reference = False
    member = None
    for step in job.order:
        role = running[0] = step.role
        hook, on_start = lines.on_update(role), lines.on_start(role)
        if job.reference is not None and role == REFERENCE:
            if lead:
                reference = run_local(job.reference, role,
                                      device=device if member is None else member.device,
                                      on_update=hook, on_start=on_start,
                                      keep_states=step.keep_states)
                handoff.write_trace(folder, reference, role)
            trained_reference = True
            continue
        member = group.join(env, job.spec.device)
        lockstep = states if step.lockstep else None
        if step.lockstep and trained_reference:  # from rank 0 to every rank
            lockstep = broadcast(lockstep_from(reference), env.rank, member.device)
        trace = run_local(job.spec, role, device=member.device, rank=env.rank,
                          on_start=on_start, on_update=hook, lockstep=lockstep,
                          keep_states=step.keep_states)
        if lead:
            handoff.write_trace(folder, trace, role)
        group.leave()


if __name__ == "__main__":
    exit_now(main())  # never through interpreter teardown: see exit_now
