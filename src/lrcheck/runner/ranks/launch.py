"""A multi-process run launched through torchrun, watched from this process until it finishes,
a rank fails, it makes no progress for ``timeout`` seconds, or Ctrl-C; whatever happens, no
process it started is left running (``marks.stop``)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lrcheck.environment import Environment
from lrcheck.errors import LrcheckError, RunError, SpecError
from lrcheck.plan.judging import Step
from lrcheck.procs import marks
from lrcheck.runner.ranks import handoff
from lrcheck.runner.ranks.torchrun import torchrun_argv
from lrcheck.runner.startup import release
from lrcheck.spec import RunSpec, determinism
from lrcheck.trace import OnUpdate, RunTrace, UpdateRecord

if TYPE_CHECKING:
    from lrcheck.runner.lockstep import Lockstep

POLL_S = 0.05
# Once a rank has died, how long torchrun gets to notice it, stop the others and exit, so that
# its log holds the dead rank's exit status (it polls every MONITOR_INTERVAL_S).
SETTLE_S = 10.0
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


def launch(spec: RunSpec, step: Step, *, timeout: float | None = None,
           on_update: OnUpdate | None = None, lockstep: Lockstep | None = None) -> RunTrace:
    """Train ``spec`` (``world > 1``) as ``spec.world`` torchrun ranks on this machine, as the
    ``step`` of its pair's run order, and return rank 0's trace: ``start(...).wait(timeout)``."""
    hooks = {} if on_update is None else {step.role: on_update}
    return start(spec, step.role, order=(step,), on_update=hooks,
                 lockstep=lockstep).wait(timeout)[step.role]


def start(spec: RunSpec, role: str, *, reference: RunSpec | None = None,
          order: tuple[Step, ...] | None = None, on_update: dict[str, OnUpdate] | None = None,
          lockstep: Lockstep | None = None) -> Launched:
    """Start torchrun for ``spec`` and return at once; ``wait()`` or ``stop()`` the result.
    ``order``: the job's runs in order (``plan.judging.RunOrder.in_job``; default ``role``'s
    alone), which ``runner.rank`` follows: ``role``'s run on every rank and, with
    ``reference`` (one process), the reference's on rank 0 — before ``spec`` where it runs in
    lockstep with it (the other ranks wait for rank 0 to join their process group), else after
    it. ``on_update[role]`` is called here for every update rank 0 records in that run.
    ``lockstep``: the reference's states every rank's updates start from (a reference trained
    before)."""
    release()  # this process waits now, maybe for hours (runner.startup)
    steps = order or (Step(role),)
    folder = Path(tempfile.mkdtemp(prefix=f"lrcheck-{role}-"))
    handoff.write_spec(folder, spec, role, reference, steps)
    if lockstep is not None:
        handoff.write_lockstep(folder, lockstep)
    token = uuid.uuid4().hex
    argv = torchrun_argv(sys.executable, spec.world, [str(folder)], run_id=token)
    # --deterministic's environment variables from the ranks' start (spec.determinism).
    base = determinism.environment(os.environ) if spec.deterministic else dict(os.environ)
    env = {**base, marks.MARKER_ENV: token}
    with open(folder / handoff.TORCHRUN_LOG, "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        return Launched(spec, role, tuple(step.role for step in steps), folder, proc, token,
                        on_update or {})
    except BaseException:  # Ctrl-C (or SIGTERM) before the caller holds the job: stop it here
        marks.stop(proc, token)
        raise


class Launched:
    """A torchrun job this process started (in a session of its own: Ctrl-C here does not reach
    it; ``stop()`` does). ``roles``: the runs it trains, in order. Once it has ended:
    ``finished``, the traces rank 0 wrote (all of them after a success, those done before a
    failure or Ctrl-C otherwise), and ``environment``, where they ran as rank 0 reported it."""

    def __init__(self, spec: RunSpec, role: str, roles: tuple[str, ...], folder: Path,
                 proc: subprocess.Popen[bytes], token: str, on_update: dict[str, OnUpdate]) -> None:
        self.spec, self.role, self.roles, self.folder, self.proc, self.token = (
            spec, role, roles, folder, proc, token)
        self.watch = _Watch(spec, role, roles[0], folder, on_update)
        self.began = time.monotonic()
        self.ended = False  # wait() returned or raised, or stop() ran: nothing left to stop
        self.finished: dict[str, RunTrace] = {}
        self.environment: Environment | None = None

    def wait(self, timeout: float | None = None) -> dict[str, RunTrace]:
        """Rank 0's trace of each run once the job ends.

        Raises ``RunError`` naming the first rank that failed, with its error and the path of its
        log, or when no update arrives for ``timeout`` seconds (counted from this call);
        ``SpecError`` when the ranks found bad input before training. The job's folder is
        removed when it succeeds or is interrupted, and kept (for its logs) when it fails.
        """
        try:
            code = self.watch.wait(self.proc, timeout)
        except BaseException as exc:  # a failure, a hang, or Ctrl-C: stop them all first
            self.stop(keep_logs=isinstance(exc, RunError))
            raise
        self.stop(keep_logs=True)
        missing = [role for role in self.roles if role not in self.finished]
        if code != 0 or missing:
            role = missing[0] if missing else self.watch.role
            raise RunError(f"the {role} run ({self.watch.processes(role)}) ended with torchrun "
                           f"exit code {code}; no rank reported an error, and torchrun's log "
                           f"names none that failed: {self.folder / handoff.TORCHRUN_LOG}")
        shutil.rmtree(self.folder, ignore_errors=True)
        # The run of ``spec``'s own wall time: from the previous run's end (or the launch) to
        # the next run's first line (or now).
        at = self.roles.index(self.role)
        began = self.watch.left.get(self.roles[at - 1], self.began) if at else self.began
        ended = self.watch.left.get(self.role, time.monotonic())
        self.finished[self.role].wall_seconds = round(ended - began, 3)
        return dict(self.finished)

    def stop(self, keep_logs: bool = False) -> None:
        """Stop every process of the job, forward what rank 0 recorded until then, keep the
        traces it finished and the environment, and remove the job's folder unless
        ``keep_logs``. Once the job has ended, nothing."""
        if self.ended:
            return
        while True:  # bounded (marks.stop gives up within seconds): no process may outlive it
            try:
                marks.stop(self.proc, self.token)
                break
            except KeyboardInterrupt:  # a second Ctrl-C while stopping: finish stopping
                continue
        self.ended = True
        self.watch.pump()
        for role in self.roles:
            trace = handoff.read_trace(self.folder, role)
            if trace is not None:
                self.finished[role] = trace
        self.environment = handoff.read_environment(self.folder)
        if not keep_logs:
            shutil.rmtree(self.folder, ignore_errors=True)


class _Watch:
    """Reads rank 0's lines as they come and turns what the ranks report into errors. ``role``:
    the run the latest line came from."""

    def __init__(self, spec: RunSpec, spec_role: str, first: str, folder: Path,
                 on_update: dict[str, OnUpdate]) -> None:
        self.spec, self.role, self.folder, self.on_update = spec, first, folder, on_update
        self.spec_role = spec_role  # the run of ``spec``, on every rank (the reference: rank 0)
        self.reader = handoff.LineReader(folder)
        self.started = False
        self.last_update: tuple[int, int] | None = None
        self.left: dict[str, float] = {}  # by run: when the next run's first line was read

    def processes(self, role: str) -> str:
        return f"{self.spec.world} processes" if role == self.spec_role else "rank 0 alone"

    def pump(self) -> bool:
        """Forward new lines; True when there were any."""
        lines = self.reader.new()
        for line in lines:
            self.started = True
            role = line.get("role", self.role)
            if role != self.role:
                self.left[self.role] = time.monotonic()
                self.role, self.last_update = role, None
            if line["event"] == "update":
                record = UpdateRecord.from_dict(line["update"])
                self.last_update = (record.step, line["total"])
                hook = self.on_update.get(role)
                if hook is not None:
                    hook(record, line["total"])
        return bool(lines)

    def wait(self, proc: subprocess.Popen[bytes], timeout: float | None) -> int:
        """torchrun's exit code once every rank has finished; ``RunError`` (``SpecError`` for
        bad input) as soon as a rank reports an error or dies, or nothing arrives for
        ``timeout`` seconds."""
        last = time.monotonic()
        while True:
            if self.pump():
                last = time.monotonic()
            code = proc.poll()
            dead = self._dead()
            errors = handoff.read_errors(self.folder)
            if dead or errors or code not in (None, 0):
                failure = self._failure(proc, dead, errors)
                if failure is not None:
                    raise failure
            if code is not None:
                return code
            if timeout is not None and time.monotonic() - last > (
                    timeout if self.started else max(timeout, STARTUP_S)):
                raise RunError(self._hung(timeout))
            time.sleep(POLL_S)

    def _dead(self) -> list[int]:
        """Ranks whose process is gone although they neither finished nor reported an error,
        and torchrun did not stop them (it stops the others once one has failed)."""
        if not marks.HAS_PROC:  # no /proc to see a process in: only torchrun's exit tells
            return []
        pids = handoff.read_pids(self.folder)
        gone = {rank: pid for rank, pid in pids.items() if not marks.alive(pid)}
        if not gone:
            return []
        # Read after the processes were found gone: torchrun logs that it stops a worker
        # before it signals it, so one it stopped cannot pass for one that died.
        log = TorchrunLog.read(self.folder / handoff.TORCHRUN_LOG)
        accounted = handoff.accounted(self.folder)
        return sorted(rank for rank, pid in gone.items()
                      if rank not in accounted and pid not in log.stopped)

    def _failure(self, proc: subprocess.Popen[bytes], dead: list[int],
                 errors: list[handoff.RankError]) -> LrcheckError | None:
        """The error that names the cause: bad input; else a rank that died (its peers' errors
        are only that they lost it); else the first rank that raised; else the rank torchrun's
        log says failed first. None when nothing names one (``Launched.wait`` tells it)."""
        if errors and errors[0].bad_input:
            return SpecError(errors[0].line)
        if errors and not dead:
            raised = errors[0]
            return RunError(f"{self._rank(raised.rank, raised.role)} failed in the {raised.role} "
                            f"run: {raised.line}; full log: "
                            f"{handoff.log_path(self.folder, raised.rank)}")
        # torchrun notices a dead rank within MONITOR_INTERVAL_S, stops the others, logs the
        # exit status of each and exits: wait for that (bounded) so the message can say how.
        deadline = time.monotonic() + SETTLE_S
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(POLL_S)
        log = TorchrunLog.read(self.folder / handoff.TORCHRUN_LOG)
        pids = handoff.read_pids(self.folder)
        if not dead:  # gone before it could write its pid: torchrun's log alone names it
            dead = [log.first.rank] if log.first is not None else []
            if log.first is not None:
                pids.setdefault(log.first.rank, log.first.pid)
        if not dead:
            return None
        first = log.first.rank if log.first is not None and log.first.rank in dead else dead[0]
        role = self.spec_role if first != 0 else self.role
        last = handoff.last_log_line(self.folder, first)
        said = f"its last log line: {last!r}" if last else "its log is empty"
        return RunError(f"{self._rank(first, role)} died in the {role} run: "
                        f"{log.how(pids.get(first))}; {said}; full log: "
                        f"{handoff.log_path(self.folder, first)}")

    def _rank(self, rank: int, role: str) -> str:
        return f"rank {rank} of {self.spec.world if role == self.spec_role else 1}"

    def _hung(self, timeout: float) -> str:
        if self.last_update is None:
            where = "before training started" if not self.started else "before the first update"
        else:
            step, total = self.last_update
            where = f"after update {step} of {total}"
        return (f"the {self.role} run ({self.processes(self.role)}) made no progress for "
                f"{timeout:g} s (--timeout) {where}; every process was stopped; rank logs in "
                f"{self.folder}")


@dataclass(frozen=True)
class Exited:
    """A worker process as torchrun reported it: local ``rank``, ``pid`` and exit ``code``
    (minus the signal's number when a signal ended it)."""

    rank: int
    pid: int
    code: int


# What torchrun (torch.distributed.elastic) logs about its workers. When they cannot be found
# (another torch's wording), a dead rank is still named, only without its exit status.
_FIRST_FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
_EXITCODE = re.compile(r"exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)")
_STOPPING = re.compile(r"Sending process (\d+) closing signal")


@dataclass(frozen=True)
class TorchrunLog:
    """What torchrun's own log says: the first worker it saw fail, the exit code of every
    worker that failed (by pid), and the workers it stopped itself."""

    first: Exited | None = None
    codes: dict[int, int] = field(default_factory=dict)
    stopped: frozenset[int] = frozenset()

    @classmethod
    def parse(cls, text: str) -> TorchrunLog:
        first = _FIRST_FAILED.search(text)
        codes = {int(pid): int(code) for code, pid in _EXITCODE.findall(text)}
        if first is not None:
            codes.setdefault(int(first[3]), int(first[1]))
        return cls(None if first is None else Exited(int(first[2]), int(first[3]), int(first[1])),
                   codes, frozenset(int(pid) for pid in _STOPPING.findall(text)))

    @classmethod
    def read(cls, path: Path) -> TorchrunLog:
        try:
            return cls.parse(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return cls()

    def how(self, pid: int | None) -> str:
        """How the worker ``pid`` ended, in words."""
        code = self.codes.get(pid) if pid is not None else None
        if code is None:
            return "its process is gone (torchrun's log does not say how)"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code} without reporting an error"
