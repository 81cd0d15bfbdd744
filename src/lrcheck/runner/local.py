"""One run, or one rank of one, trained in this process."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import warnings
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

from lrcheck.environment import Environment
from lrcheck.errors import Interrupted, LrcheckError, RunError
from lrcheck.experiments.cache import load_data
from lrcheck.plan.frameworks import PLAIN
from lrcheck.procs.determinism import applied
from lrcheck.runner import plain
from lrcheck.runner.frameworks import adapter
from lrcheck.runner.lockstep import Lockstep
from lrcheck.runner.ranks.fault import fault_hook
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, RunTrace
from lrcheck.version import __version__

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

    from lrcheck.trace import UpdateRecord


def run_local(spec: RunSpec, role: str, *, device: str, rank: int = 0,
              group: ProcessGroup | None = None,
              on_update: OnUpdate | None = None,
              on_start: Callable[[], None] | None = None,
              lockstep: Lockstep | None = None, keep_states: bool = False) -> RunTrace:
    """Train ``spec`` here, as rank ``rank`` (of ``spec.world``, in a process group the caller
    set up when ``world > 1``); ``on_start``: see ``plain.train``. A crash inside training is a
    ``RunError`` naming the role. The test-only fault switch (``runner.ranks.fault``) is armed here
    for the ranks of a multi-process candidate. ``keep_states``: record the optimizer's state
    after every update too (a reference of lrcheck's own loop: ``plan.judging.keeps_states``);
    ``lockstep``: the reference's states a candidate's updates start from
    (``runner.lockstep``)."""
    trip = fault_hook(role, rank, os.environ) if spec.world > 1 else None
    if trip is not None:
        on_update = _then(on_update, trip)
    with cpu_threads(device):
        return _run_local(spec, role, device=device, rank=rank, group=group,
                          on_update=on_update, on_start=on_start, lockstep=lockstep,
                          keep_states=keep_states)


def _then(first: OnUpdate | None, second: OnUpdate) -> OnUpdate:
    def both(record: UpdateRecord, total: int) -> None:
        if first is not None:
            first(record, total)
        second(record, total)

    return both


# torch's intra-op threads while training on the CPU. lrcheck's models are tiny (a 64-64-10 MLP):
# a second OpenMP thread saves nothing on them, and when the machine's cores are busy elsewhere
# its barrier waits made each forward/backward up to 100 times slower (benchmarks/, BENCHMARKS.md).
# torchrun's workers already run with OMP_NUM_THREADS=1, so the reference and a multi-process
# candidate now use the same count.
CPU_THREADS = 1


@contextlib.contextmanager
def cpu_threads(device: str) -> Iterator[None]:
    """``CPU_THREADS`` torch threads on the CPU for the block, then the caller's count again."""
    import torch

    before = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(CPU_THREADS)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_local(spec: RunSpec, role: str, *, device: str, rank: int,
               group: ProcessGroup | None,
               on_update: OnUpdate | None, on_start: Callable[[], None] | None,
               lockstep: Lockstep | None, keep_states: bool) -> RunTrace:
    data = load_data(spec.task, spec.seed, spec.samples)
    where = f" on rank {rank}" if spec.world > 1 else ""
    if spec.framework != PLAIN:
        # A framework sets up (or finds) the process group itself.
        train = adapter(spec.framework)
        return guarded(f"the {role} run{where}", _deterministic(spec, lambda: train(
            spec, data, device=device, rank=rank, on_update=on_update, on_start=on_start)))
    return guarded(f"the {role} run{where}", _deterministic(spec, lambda: plain.train(
        spec, data, device=device, rank=rank, group=group, on_update=on_update,
        on_start=on_start, keep_states=keep_states, lockstep=lockstep)))


def _deterministic(spec: RunSpec, run: Callable[[], RunTrace]) -> Callable[[], RunTrace]:
    """``run`` with ``--deterministic``'s settings applied around it where the spec asks
    (``procs.determinism.applied``: inside ``guarded``, which keeps their warnings)."""
    def within() -> RunTrace:
        with applied(spec.deterministic):
            return run()

    return within


def environment(device: str, world: int) -> Environment:
    """What the report states about where it ran."""
    import torch

    # The threads training uses: cpu_threads sets them on the CPU for each run.
    threads = CPU_THREADS if device == "cpu" else torch.get_num_threads()
    return Environment(lrcheck=__version__, torch=str(torch.__version__), device=device,
                       world_size=world, python=platform.python_version(),
                       platform=platform.platform(), threads=threads)


def guarded(what: str, run: Callable[[], RunTrace]) -> RunTrace:
    """``run()`` with its warnings kept in the trace; a crash becomes a ``RunError`` naming
    ``what``. A warning raised while a module is being imported is about the installed
    libraries, not the run, and only the first import in a process raises it: it is left out,
    so a run's warnings do not depend on what ran before it in the process (a suite's pairs, in
    one process or in ``--jobs`` workers)."""
    caught: set[str] = set()
    here = sys._getframe()

    def keep(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: object = None, line: str | None = None) -> None:
        if not _importing(since=here):
            caught.add(f"{category.__name__}: {message}")

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = keep
            trace = run()
    except (LrcheckError, Interrupted):
        raise
    except Exception as exc:
        raise RunError(f"{what} crashed: {type(exc).__name__}: {exc}") from exc
    # torch's own warnings (such as "scheduler.step() before optimizer.step()") are findings
    # about the run: keep them in the report instead of printing them.
    trace.warnings = tuple(sorted(caught))
    return trace


def _importing(since: FrameType) -> bool:
    """Whether this thread is running a module's code for its import (importlib's frames)
    begun after the frame ``since`` (lrcheck itself may run under an import)."""
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and frame is not since:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False
