"""Waiting on other processes in tests, so that a loaded machine makes a test slower, never wrong:
wait on the condition itself, and bound the wait only to turn a hang into a failure."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

# How long a test lets something that takes seconds take before calling it a hang. Not a measure
# of speed: a loaded 2-core CI machine can stretch a short run to minutes; only a hang takes this
# long. A test about lrcheck's own --timeout waits on that instead.
HANG_S = 600.0

# How long an exited process may keep its pipes open (a leftover child holding them) before
# wait_for reports it without its output.
OUTPUT_S = 10.0


def wait_for(condition: Callable[[], T], timeout: float, what: str, *,
             proc: subprocess.Popen | None = None, interval: float = 0.05) -> T:
    """Call ``condition`` until it returns something truthy, and return that value.

    Fails the test, naming ``what`` (the thing awaited, e.g. ``"pair b to start training"``),
    when ``timeout`` seconds pass first, or, given ``proc``, as soon as that process has exited
    with the condition still false (with its exit code and whatever it printed to pipes). The
    condition is always tried once more after the deadline or the exit was seen, so neither
    races with it."""
    deadline = time.monotonic() + timeout
    while True:
        exited = proc is not None and proc.poll() is not None
        late = time.monotonic() >= deadline
        value = condition()
        if value:
            return value
        if exited:
            pytest.fail(f"waiting for {what}: the process exited first, with code "
                        f"{proc.returncode}{_output(proc)}")
        if late:
            pytest.fail(f"waiting for {what}: gave up after {timeout:g} s")
        time.sleep(interval)


def _output(proc: subprocess.Popen) -> str:
    try:
        out, err = proc.communicate(timeout=OUTPUT_S)
    except subprocess.TimeoutExpired:
        return f"; its pipes were still open {OUTPUT_S:g} s after it exited"
    texts = [t.decode(errors="replace") if isinstance(t, bytes) else t for t in (out, err)]
    named = zip(("stdout", "stderr"), texts, strict=True)
    return "".join(f"\n{name}:\n{text}" for name, text in named if text)


def default_sigint() -> None:
    """A ``preexec_fn``: SIGINT's default disposition in the child. A test of what SIGINT does
    sets it: started as a background job of a non-interactive shell, this process and its
    children inherit SIGINT ignored (as POSIX says), which lrcheck rightly keeps."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@contextlib.contextmanager
def session(argv: list[str], **popen: Any) -> Iterator[subprocess.Popen]:
    """``argv`` started in a session of its own (as a terminal starts a job) with SIGINT's
    default disposition (``default_sigint``). However the test ends, whatever of the session's
    process group still runs is killed, and the process is reaped: a failing test leaves
    nothing running (a process that left the group, as a torchrun worker does, is the test's
    to kill)."""
    proc = subprocess.Popen(argv, start_new_session=True, preexec_fn=default_sigint, **popen)
    try:
        yield proc
    finally:
        # The group outlives its leader while a member runs, and its id is not reused then.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.communicate(timeout=OUTPUT_S)


_HANGING = """
    import os
    import time
    from pathlib import Path

    from torch.optim.lr_scheduler import LambdaLR

    MARK = Path(__file__).with_name("pair-b-is-training")


    def make(optimizer, ctx):
        def factor(step):
            if step == 3:  # three updates into pair "b": tell the test, wait for it to stop us
                MARK.with_suffix(".tmp").write_text(str(os.getpid()))
                os.replace(MARK.with_suffix(".tmp"), MARK)
                # Short sleeps, not signal.pause(): a Ctrl-C landing between the write and
                # pause() would wake nothing, and the suite would wait for a second one.
                deadline = time.monotonic() + {hang}
                while time.monotonic() < deadline:
                    time.sleep(0.05)
                raise RuntimeError("the test did not stop pair b")
            return 1.0

        return LambdaLR(optimizer, factor)
"""
_HANGING_SUITE = """
    [defaults]
    task = "wine"
    epochs = 1
    accum = 2
    bs = 8

    [[pair]]
    name = "a"

    [[pair]]
    name = "b"
    scheduler = "{factory}:make"

    [[pair]]
    name = "c"
    accum = 4
    bs = 4
"""


def hanging_suite(folder: Path) -> tuple[Path, Path]:
    """A suite (its file, and the mark) of three pairs of wine, a, b and c (a and c sharing a
    reference), in which pair b, three updates in, writes the pid of the process training it
    into the mark and waits ``HANG_S`` for the test to stop it."""
    factory = folder / "slow_schedule.py"
    factory.write_text(textwrap.dedent(_HANGING.format(hang=HANG_S)))
    path = folder / "ci.toml"
    path.write_text(textwrap.dedent(_HANGING_SUITE.format(factory=factory)))
    return path, folder / "pair-b-is-training"


def checks_by_name(report: Any) -> dict[str, Any]:
    """A report's checks by name, each printed (a failing test shows them all)."""
    for c in report.checks:
        print(f"{c.name}: {c.status.value} at {c.first_divergence}: {c.detail}")
    return {c.name: c for c in report.checks}


def torchrun_checks(script: Path, reference: Path, out: Path, *args: str) -> dict[str, Any]:
    """The checks, by name, of ``script`` (with ``args``) on 2 torchrun processes recorded
    into ``out`` with a fingerprint every update, against ``reference`` in float64."""
    import sys

    from lrcheck import api
    from lrcheck.spec import Dtype, Tolerances

    api.record([sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", "2", str(script), *args], out, fingerprint_every=1)
    return checks_by_name(api.diff(reference, out, tolerances=Tolerances.for_dtype(
        Dtype.FLOAT64)))


def merged_gaps(reference: Path, candidate: Path) -> tuple[float, float, float]:
    """A one-process reference's recording against a record folder's merged records: the
    largest relative gap of the gradient norm, of the parameters' sums (``|Δsum| / max|p|``)
    and of each tensor's gradient dotted with its probe (``|Δdot| / ‖g‖``, ``record.probes``)
    over the updates; asserts that both fingerprinted and probed the same tensors, each."""
    import numpy as np

    from lrcheck.record.folder import read_folder
    from lrcheck.recorder import read_records

    whole, merged = read_records(reference / "rank0.jsonl"), read_folder(candidate).records
    a = np.sqrt([r["grad_sq"] for r in whole])
    b = np.sqrt([r["grad_sq"] for r in merged])
    pa = np.array([r["fingerprint"] for r in whole]).reshape(len(whole), -1, 2)
    pb = np.array([r["fingerprint"] for r in merged]).reshape(len(merged), -1, 2)
    assert pa.shape == pb.shape, (pa.shape, pb.shape)
    sums = (np.abs(pb[..., 0] - pa[..., 0]).max(axis=1) / pa[..., 1].max(axis=1)).max()
    da = np.array([r["grad_dots"] for r in whole], dtype=np.float64)  # None: NaN, fails
    db = np.array([r["grad_dots"] for r in merged], dtype=np.float64)
    assert da.shape == db.shape == pa.shape[:2], (da.shape, db.shape)
    dots = np.abs(db - da) / np.sqrt([r["grad_sqs"] for r in whole])
    assert np.all(np.isfinite(dots)), dots
    return float(np.max(np.abs(b - a) / a)), float(sums), float(dots.max())
