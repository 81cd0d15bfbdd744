"""One real subprocess: the installed console script, end to end."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import schema_files
from tests.helpers import HANG_S

pytestmark = pytest.mark.slow  # each test starts the console script


def test_console_script_compare_exits_0_and_writes_result_json(tmp_path):
    exe = shutil.which("lrcheck", path=str(Path(sys.executable).parent))
    assert exe, "the lrcheck console script is not installed next to this Python"
    done = subprocess.run([exe, "compare", "--accum", "2", "--bs", "16", "--ref-bs", "32",
                           "--epochs", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "verdict: PASS" in done.stdout
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["verdict"] == "pass"
    assert schema_files.problems(tmp_path / "result.json") == []  # a compare's, trained


def test_python_dash_m_bad_input_exits_2_without_traceback():
    done = subprocess.run([sys.executable, "-m", "lrcheck", "compare", "--accum", "0"],
                          capture_output=True, text=True, timeout=HANG_S)
    assert done.returncode == 2
    assert done.stderr.strip() == "lrcheck: error: --accum must be a whole number >= 1, got 0"
