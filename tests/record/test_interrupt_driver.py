"""The interrupt's driver and the wait in the recorded process (``record.interrupt``), without
torch: ranks that torchrun starts in sessions of their own are interrupted and gone before the
resume starts, even under SIGKILL (killing torchrun's group alone left them paused for ever);
and a rank waits for the driver's SIGTERM, not for the first signal any handler took. Slow:
each starts Python processes."""

import os
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lrcheck.record import interrupt
from tests.helpers import HANG_S

pytestmark = pytest.mark.slow
SRC = str(Path(interrupt.__file__).parents[2])

# A launcher as torchrun is one: its rank in a session of its own, which reports its pid, then
# waits as a recorded rank waits at the interrupt point.
RANK = textwrap.dedent("""
    import os, sys
    from lrcheck.record import interrupt
    open(sys.argv[1], "w").write(str(os.getpid()))

    def tell():
        fd = os.open(os.environ[interrupt.ENV_INTERRUPT].split(":", 1)[1], os.O_WRONLY)
        os.write(fd, b"0 1 %d\\n" % os.getpid())
        os.close(fd)

    interrupt._until_terminated(tell)
""")
LAUNCHER = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', sys.argv[1], "
            "sys.argv[2]], start_new_session=True).wait()")


def _gone(pid: int) -> bool:
    """Ended: no such process, or a zombie not yet reaped by whoever adopted it."""
    try:
        return "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("sig", ["KILL", "TERM"])
def test_ranks_in_sessions_of_their_own_are_gone_before_the_resume(tmp_path, monkeypatch, sig):
    monkeypatch.setenv("PYTHONPATH", SRC)  # the rank imports lrcheck
    pid_file, marker = tmp_path / "rank.pid", tmp_path / "resumed"
    # The resume writes whether the rank was gone when it started.
    resume = [sys.executable, "-c", f"from pathlib import Path; pid = Path({str(pid_file)!r})"
              f".read_text(); status = Path(f'/proc/{{pid}}/status'); open({str(marker)!r}, "
              f"'w').write('alive' if status.exists() and '\\nState:\\tZ' not in "
              "status.read_text() else 'gone')"]
    try:
        code = interrupt.main(["--at", "3", "--signal", sig, "--grace", str(HANG_S),
                               "--resume", shlex.join(resume), "--", sys.executable, "-c",
                               LAUNCHER, RANK, str(pid_file)])
    finally:  # a failing test leaves no rank paused
        if pid_file.exists() and not _gone(pid := int(pid_file.read_text())):
            os.kill(pid, signal.SIGKILL)
    assert code == 0 and marker.read_text() == "gone"
    assert _gone(int(pid_file.read_text()))


WAITER = textwrap.dedent("""
    import os, signal, sys
    from lrcheck.record import interrupt
    signal.signal(signal.SIGUSR1, lambda *a: print("usr1", flush=True))
    signal.signal(signal.SIGTERM, lambda *a: print("term", flush=True))  # returns: carries on
    interrupt._until_terminated(lambda: print("waiting", flush=True))
    print("done", flush=True)
""")


def test_a_rank_waits_for_sigterm_not_for_another_signal_a_handler_took():
    """A loader's SIGCHLD (here SIGUSR1) wakes ``signal.pause`` but not the wait; the user's
    SIGTERM handler runs, and as it returns, the process carries on."""
    proc = subprocess.Popen([sys.executable, "-c", WAITER], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": SRC})
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "waiting"
        proc.send_signal(signal.SIGUSR1)
        assert proc.stdout.readline().strip() == "usr1"
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=HANG_S)[0].split()
    finally:
        proc.kill()
        proc.wait()
    assert rest == ["term", "done"] and proc.returncode == 0
