"""What a command shows: the line before the first progress bar, JSON on stdout alone."""

import json
import subprocess
import sys

import pytest

from tests.cli.helpers import FAST, invoke
from tests.helpers import HANG_S

NOISY_FACTORY = '''
import ctypes, os
from torch.optim.lr_scheduler import LambdaLR

def make(optimizer, ctx):
    os.write(1, b"fd 1: a library's banner\\n")  # as C code or a subprocess writes
    print("print: a framework's line")
    ctypes.CDLL(None).printf(b"printf: held in C's buffer\\n")
    return LambdaLR(optimizer, lambda step: 1.0)
'''



@pytest.mark.slow
def test_a_line_comes_before_the_first_progress_bar(monkeypatch, tmp_path):
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stderr counts as a terminal: progress is shown
    result = invoke("compare", "--task", "wine", *FAST, "--out", str(tmp_path))
    assert result.exit_code == 0
    first = result.stderr.index("lrcheck: loading wine and building the runs")
    assert first < result.stderr.index("reference updates")
    quiet = invoke("compare", "--task", "wine", *FAST, "--quiet", "--out", str(tmp_path))
    assert "loading" not in quiet.stderr


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="printf through ctypes")
@pytest.mark.parametrize("argv", [
    ["compare", "--task", "wine", "--bs", "8", "--accum", "2", *FAST],
    ["trace", "--samples", "100"],
])
def test_json_stdout_is_the_json_alone_whatever_the_run_prints(argv, tmp_path):
    """A framework or a library that prints while the runs train (Ludwig's bitsandbytes line)
    writes to stderr: with --json, stdout is result.json and nothing else."""
    factory = tmp_path / "noisy.py"
    factory.write_text(NOISY_FACTORY)
    done = subprocess.run([sys.executable, "-m", "lrcheck", *argv, "--json", "--scheduler",
                           f"{factory}:make", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=HANG_S)
    print("stdout:\n", done.stdout, "\nstderr:\n", done.stderr)
    assert done.returncode == 0
    assert json.loads(done.stdout)["verdict"] == "pass"
    assert done.stdout == (tmp_path / "out" / "result.json").read_text()
    for line in ("fd 1: a library's banner", "print: a framework's line",
                 "printf: held in C's buffer"):
        assert line in done.stderr


