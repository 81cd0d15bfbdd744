"""``lrcheck run`` through typer's CliRunner: what it says of its two command lines before it
records anything."""

import sys

import pytest

from tests.cli.helpers import invoke, one_error_line


@pytest.mark.parametrize(("reference", "candidate", "side"), [
    ("", "", "reference"),
    ("  ", "python train.py", "reference"),
    (f"{sys.executable} -c \"open('ran', 'w')\"", "", "candidate"),
])
def test_an_empty_command_line_is_run_s_own_error_before_anything_runs(
        tmp_path, monkeypatch, reference, candidate, side):
    monkeypatch.chdir(tmp_path)
    result = invoke("run", "--out", str(tmp_path / "r"), reference, candidate)
    assert result.exit_code == 2
    line = one_error_line(result)
    assert line.startswith(f"the {side} command line is empty"), line
    assert "'--'" not in line and "lrcheck record" not in line
    assert "lrcheck run 'python train.py --bs 32'" in line
    assert not (tmp_path / "ran").exists() and not (tmp_path / "r").exists()
