"""Ctrl-C during ``lrcheck run`` keeps what was recorded: the command gets the SIGINT, the
record folder keeps its updates and says it was interrupted, and lrcheck exits 130. Slow: a
real ``lrcheck run`` in another process."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lrcheck import api

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
    proc = subprocess.Popen([py, "-m", "lrcheck", "run", "--quiet", "--fingerprint-every", "1",
                             "--out", str(tmp_path), ref, endless], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = tmp_path / "candidate" / "rank0.jsonl"
    deadline = time.monotonic() + 120
    while _updates(records) < 5 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    print(out, err)
    assert proc.returncode == 130
    about = json.loads((tmp_path / "candidate" / "run.json").read_text())
    kept = _updates(records)
    assert about["interrupted"] and kept >= 5 and about["updates"]["rank0.jsonl"] == kept
    # In lockstep the reference runs beside the candidate, never behind it: its records are
    # kept too, up to where Ctrl-C found it (its 16 updates, if it had ended).
    reference = json.loads((tmp_path / "reference" / "run.json").read_text())
    done = _updates(tmp_path / "reference" / "rank0.jsonl")
    assert min(kept, 16) <= done <= 16 and reference["updates"]["rank0.jsonl"] == done
    assert "interrupted (Ctrl-C)" in err and "Traceback" not in err
