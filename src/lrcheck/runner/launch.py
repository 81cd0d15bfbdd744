"""A multi-process run launched through torchrun, watched from this process until it finishes,
a rank fails, it makes no progress for ``timeout`` seconds, or Ctrl-C; whatever happens, no
process it started is left running (``procs.stop``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from lrcheck.errors import RunError, SpecError
from lrcheck.runner import handoff, procs
from lrcheck.runner.loop import OnUpdate
from lrcheck.runner.torchrun import torchrun_argv
from lrcheck.spec import RunSpec
from lrcheck.trace import RunTrace, UpdateRecord

POLL_S = 0.05
# Until training starts, the clock also covers starting Python and torch on every rank, the
# rendezvous, loading the data and building the model and DDP.
STARTUP_S = 60.0


def check_gpus(spec: RunSpec, device: str) -> None:
    """One GPU per process on CUDA."""
    import torch

    if device == "cuda" and torch.cuda.device_count() < spec.world:
        raise SpecError(f"{spec.world} processes on --device cuda need one GPU each, this machine "
                        f"has {torch.cuda.device_count()}; lower --nproc/--ref-nproc or use "
                        "--device cpu")


def launch(spec: RunSpec, role: str, *, timeout: float | None = None,
           on_update: OnUpdate | None = None) -> RunTrace:
    """Train ``spec`` (``world > 1``) as ``spec.world`` torchrun ranks on this machine and return
    rank 0's trace. ``on_update`` is called here for every update rank 0 records.

    Raises ``RunError`` naming the first rank that failed, with its error and the path of its
    log, or when no update arrives for ``timeout`` seconds. The run's folder is removed when it
    succeeds or is interrupted, and kept (for its logs) when it fails.
    """
    folder = Path(tempfile.mkdtemp(prefix=f"lrcheck-{role}-"))
    handoff.write_spec(folder, spec, role)
    token = uuid.uuid4().hex
    argv = torchrun_argv(sys.executable, spec.world, [str(folder)], run_id=token)
    env = {**os.environ, procs.MARKER_ENV: token}
    with open(folder / handoff.TORCHRUN_LOG, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    watch = _Watch(spec, role, folder, on_update)
    began = time.monotonic()
    try:
        code = watch.wait(proc, timeout)
    except BaseException as exc:  # a failure, a hang, or Ctrl-C: stop them all first
        procs.stop(proc, token)
        watch.pump()  # what rank 0 recorded before it was stopped
        if not isinstance(exc, RunError):
            shutil.rmtree(folder, ignore_errors=True)
        raise
    procs.stop(proc, token)
    watch.pump()
    trace = handoff.read_trace(folder)
    if code != 0 or trace is None:
        raise RunError(f"the {role} run ({spec.world} processes) ended with torchrun exit code "
                       f"{code} and no rank reported an error (a worker killed by a signal?); "
                       f"torchrun's log: {folder / handoff.TORCHRUN_LOG}")
    shutil.rmtree(folder, ignore_errors=True)
    trace.spec = spec
    trace.extra["wall_seconds"] = round(time.monotonic() - began, 3)
    return trace


class _Watch:
    """Reads rank 0's lines as they come and turns what the ranks report into errors."""

    def __init__(self, spec: RunSpec, role: str, folder: Path,
                 on_update: OnUpdate | None) -> None:
        self.spec, self.role, self.folder, self.on_update = spec, role, folder, on_update
        self.reader = handoff.LineReader(folder)
        self.started = False
        self.last_update: tuple[int, int] | None = None

    def pump(self) -> bool:
        """Forward new lines; True when there were any."""
        lines = self.reader.new()
        for line in lines:
            self.started = True
            if line["event"] == "update":
                record = UpdateRecord.from_dict(line["update"])
                self.last_update = (record.step, line["total"])
                if self.on_update is not None:
                    self.on_update(record, line["total"])
        return bool(lines)

    def wait(self, proc: subprocess.Popen, timeout: float | None) -> int:
        """torchrun's exit code once it exits on its own; ``RunError`` as soon as a rank reports
        an error or nothing arrives for ``timeout`` seconds."""
        last = time.monotonic()
        while True:
            if self.pump():
                last = time.monotonic()
            code = proc.poll()
            errors = handoff.read_errors(self.folder)
            if errors:
                rank, line = errors[0]
                raise RunError(f"rank {rank} of {self.spec.world} failed in the {self.role} run: "
                               f"{line}; full log: {handoff.log_path(self.folder, rank)}")
            if code is not None:
                return code
            allowed = timeout if self.started else max(timeout or 0.0, STARTUP_S)
            if timeout is not None and time.monotonic() - last > allowed:
                raise RunError(self._hung(timeout))
            time.sleep(POLL_S)

    def _hung(self, timeout: float) -> str:
        if self.last_update is None:
            where = "before training started" if not self.started else "before the first update"
        else:
            step, total = self.last_update
            where = f"after update {step} of {total}"
        return (f"the {self.role} run ({self.spec.world} processes) made no progress for "
                f"{timeout:g} s (--timeout) {where}; every process was stopped; rank logs in "
                f"{self.folder}")
