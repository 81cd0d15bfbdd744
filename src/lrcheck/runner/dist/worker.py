"""One rank of a run that lrcheck launched: ``python -m lrcheck.runner.dist.worker FOLDER``,
started by torchrun with the argv of ``torchrun.torchrun_argv``.

Every rank checks the plan (bad input is told before anything trains) and trains; rank 0
records (``handoff``: a line per update as it goes, the whole trace at the end). When the job
carries a single-process reference, rank 0 trains it — so the parent process imports neither
torch nor the data: first when the candidate runs in lockstep with it (the other ranks wait in
the process group's rendezvous, then get its states by broadcast), else afterwards, the other
ranks having left, as a bare torchrun script would. A
rank that raises writes its error in one line before it leaves, so the parent can name the rank
and the cause while the other ranks are still failing because they lost it.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from lrcheck.errors import LrcheckError, RunError, SpecError
from lrcheck.runner.dist import handoff
from lrcheck.runner.dist.procs import exit_now
from lrcheck.runner.dist.torchrun import torchrun_env
from lrcheck.runner.startup import hold
from lrcheck.trace import OnUpdate, UpdateRecord


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
    from lrcheck.runner.dist import group
    from lrcheck.runner.local import run_local
    from lrcheck.runner.lockstep import broadcast, lockstep_from
    from lrcheck.runner.pair import preflight

    folder = Path((sys.argv[1:] if argv is None else argv)[0])
    env = torchrun_env(os.environ)
    if env is None:
        print("lrcheck.runner.dist.worker runs under torchrun only", file=sys.stderr)
        return 2
    _send_output_to(handoff.log_path(folder, env.rank))
    handoff.write_pid(folder, env.rank)
    lead, role = env.rank == 0, "candidate"
    lines = _Lines(folder, lead)
    hook, on_start = lines.on_update, lines.on_start
    try:
        job = handoff.read_spec(folder)
        spec, reference = job.spec, job.reference
        device, environment = preflight(spec, *([] if reference is None else [reference]))
        if lead:
            handoff.write_environment(folder, environment)
        lockstep = handoff.read_lockstep(folder)  # a reference trained before the job
        if reference is not None and job.reference_first:
            # The candidate runs in lockstep with it: rank 0 trains it first, while the other
            # ranks wait for it in the process group's rendezvous; then it hands every rank
            # the reference's states.
            ref_trace = None
            if lead:
                role = "reference"
                ref_trace = run_local(reference, role, device=device, on_update=hook(role),
                                      on_start=on_start(role))
                handoff.write_trace(folder, ref_trace, role)
            role = job.role
            member = group.join(env, spec.device)
            lockstep = broadcast(lockstep_from(ref_trace), env.rank, member.device)
        else:
            member = group.join(env, spec.device)
        role = job.role
        trace = run_local(spec, role, device=member.device, rank=env.rank,
                          on_start=on_start(role), on_update=hook(role), lockstep=lockstep)
        if lead:
            handoff.write_trace(folder, trace, role)
        group.leave()
        if lead and reference is not None and not job.reference_first:
            role = "reference"
            handoff.write_trace(folder, run_local(reference, role, device=member.device,
                                                  on_update=hook(role), on_start=on_start(role)),
                                role)
    except BaseException as exc:  # noqa: BLE001 - every way out is reported, Ctrl-C included
        _write_error(folder, env.rank, exc, role)
        return 1
    finally:
        sys.stdout.flush()
    handoff.write_done(folder, env.rank)
    return 0


if __name__ == "__main__":
    exit_now(main())  # never through interpreter teardown: see exit_now
