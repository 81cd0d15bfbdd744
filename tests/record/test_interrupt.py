"""Ctrl-C during ``lrcheck run`` keeps what was recorded: the command gets the SIGINT, the
record folder keeps its updates and says it was interrupted, and lrcheck exits 130. Slow: a
real ``lrcheck run`` in another process."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.procs.marks import alive
from tests.helpers import HANG_S, session, wait_for

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_train.py"


def _updates(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def test_ctrl_c_during_run_keeps_the_records_and_exits_130(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(api.__file__).parents[1])}
    py = sys.executable
    ref = f"{py} {SCRIPT} --bs 32 --epochs 1"
    endless = f"{py} {SCRIPT} --bs 16 --accum 2 --epochs 100000"
    argv = [py, "-m", "lrcheck", "run", "--quiet", "--fingerprint-every", "1", "--out",
            str(tmp_path), ref, endless]
    records = tmp_path / "candidate" / "rank0.jsonl"
    # SIGINT's default in lrcheck and the commands it starts (session), which a background
    # shell would leave ignored; the endless training is killed with the session's group if
    # the test fails. Output to files: a command left running would hold a pipe open.
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr, \
            session(argv, env=env, stdout=stdout, stderr=stderr) as proc:
        wait_for(lambda: _updates(records) >= 5, HANG_S, "5 candidate updates", proc=proc)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=HANG_S)
    out, err = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    print(out, err)
    assert proc.returncode == 130
    about = json.loads((tmp_path / "candidate" / "run.json").read_text())
    kept = _updates(records)
    assert about["interrupted"] and kept >= 5 and about["updates"]["rank0.jsonl"] == kept
    # In lockstep the reference runs beside the candidate, at most one line behind it (the
    # candidate writes update k's line after its step, before it waits for the reference's
    # state after update k; its step k started from the reference's state after update k - 1,
    # written after the reference's line k - 1): its records are kept too, up to where Ctrl-C
    # found it (its 16 updates, if it had ended).
    reference = json.loads((tmp_path / "reference" / "run.json").read_text())
    done = _updates(tmp_path / "reference" / "rank0.jsonl")
    assert min(kept - 1, 16) <= done <= 16 and reference["updates"]["rank0.jsonl"] == done
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err
    # And the run's result.json, as compare writes one (docs/report.md): verdict incomplete.
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["verdict"] == "incomplete" and result["checks"] == []
    assert result["incomplete"].startswith("interrupted (Ctrl-C) while the commands ran")


WRAPPER = """\
trap '' TERM
echo $$ > "$1.tmp" && mv "$1.tmp" "$1"
"$2" -c '
import os, sys, time
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(3600)
' "$3"
"""


def test_stopping_record_stops_a_wrapper_that_ignores_sigterm_and_its_child(tmp_path):
    """``bash train.sh`` that ignores SIGTERM (and so does the Python it starts, which inherits
    the ignored signal): SIGTERM to ``lrcheck record`` still ends both, with SIGKILL."""
    (tmp_path / "train.sh").write_text(WRAPPER)
    env = {**os.environ, "PYTHONPATH": str(Path(api.__file__).parents[1])}
    shell, child = tmp_path / "shell.pid", tmp_path / "child.pid"
    argv = [sys.executable, "-m", "lrcheck", "record", "--out", str(tmp_path / "r"), "--",
            "bash", str(tmp_path / "train.sh"), str(shell), sys.executable, str(child)]
    # Its output to a file: a process left running would hold a pipe open.
    with (tmp_path / "output").open("w") as output, session(
            argv, env=env, stdout=output, stderr=subprocess.STDOUT) as proc:
        pids = [int(wait_for(lambda p=p: p.exists() and p.read_text(), HANG_S, f"{p.name}",
                             proc=proc)) for p in (shell, child)]
        assert all(alive(pid) for pid in pids)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=HANG_S)
        left = [pid for pid in pids if alive(pid)]
    err = (tmp_path / "output").read_text()
    print(err)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err
    assert not left, f"still running after lrcheck record ended: {left} of {pids}"
    assert json.loads((tmp_path / "r" / "run.json").read_text())["interrupted"]
