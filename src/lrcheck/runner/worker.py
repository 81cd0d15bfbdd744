"""One rank of a run that lrcheck launched: ``python -m lrcheck.runner.worker FOLDER``, started by
torchrun with the argv of ``torchrun.torchrun_argv``.

Every rank trains; rank 0 records (``handoff``: a line per update as it goes, the whole trace
at the end). A rank that raises writes its error in one line before it leaves, so the parent can
name the rank and the cause while the other ranks are still failing because they lost it.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

from lrcheck.errors import LrcheckError, RunError
from lrcheck.runner import group, handoff
from lrcheck.runner.fault import fault_hook
from lrcheck.runner.local import run_local
from lrcheck.runner.torchrun import torchrun_env


def _send_output_to(path: Path) -> None:
    """This process's stdout and stderr (Python's and any C library's) go to ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: list[str] | None = None) -> int:
    folder = Path((sys.argv[1:] if argv is None else argv)[0])
    env = torchrun_env(os.environ)
    if env is None:
        print("lrcheck.runner.worker runs under torchrun only", file=sys.stderr)
        return 2
    _send_output_to(handoff.log_path(folder, env.rank))
    try:
        spec, role = handoff.read_spec(folder)
        trip = fault_hook(role, env.rank, os.environ)
        member = group.join(env, spec.device)

        def on_start() -> None:
            if env.rank == 0:
                handoff.append_line(folder, handoff.started_line())

        def on_update(record, total: int) -> None:
            if env.rank == 0:
                handoff.append_line(folder, handoff.update_line(record, total))
            if trip is not None:
                trip(record, total)

        trace = run_local(spec, role, device=member.device, rank=env.rank, on_update=on_update,
                          on_start=on_start)
        if env.rank == 0:
            handoff.write_trace(folder, trace)
    except BaseException as exc:  # noqa: BLE001 - every way out is reported, Ctrl-C included
        traceback.print_exc()
        cause = exc.__cause__ if isinstance(exc, RunError) and exc.__cause__ else exc
        line = str(cause) if isinstance(cause, LrcheckError) else f"{type(cause).__name__}: {cause}"
        handoff.write_error(folder, env.rank, line)
        return 1
    finally:
        sys.stdout.flush()
    group.leave()
    return 0


if __name__ == "__main__":
    sys.exit(main())
