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


@pytest.mark.invalid_files  # an earlier run's result.json, a stub of one key
def test_a_second_run_of_the_same_script_gets_a_new_folder_and_says_so(tmp_path, monkeypatch):
    """The default folder, lrcheck-reports/run-<candidate program>, is never replaced: a second
    run goes into run-train-2 (a third into run-train-3) and a note says so; --out reuses the
    folder given. The commands fail at once (exit 5, no torch), so nothing trains."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("import sys\nsys.exit(5)\n")
    first = tmp_path / "lrcheck-reports" / "run-train"
    first.mkdir(parents=True)
    (first / "result.json").write_text('{"verdict": "pass"}')
    line = f"{sys.executable} train.py"
    for n in (2, 3):
        result = invoke("run", "--quiet", line, line)
        assert result.exit_code == 3 and "exit code 5" in result.stderr
        assert (f"lrcheck-reports/run-train holds an earlier run: this one goes into "
                f"lrcheck-reports/run-train-{n}") in result.stderr
        assert (tmp_path / "lrcheck-reports" / f"run-train-{n}" / "reference").is_dir()
    assert (first / "result.json").read_text() == '{"verdict": "pass"}'
    assert sorted(p.name for p in first.iterdir()) == ["result.json"]
    again = invoke("run", "--quiet", "--out", str(first), line, line)
    assert again.exit_code == 3 and "earlier run" not in again.stderr
    assert (first / "reference").is_dir()
    assert not (tmp_path / "lrcheck-reports" / "run-train-4").exists()


@pytest.mark.parametrize(("options", "words"), [
    (["--interrupt-at", "3"], "--interrupt-at and --resume go together"),
    (["--interrupt-at", "0", "--resume", "python b.py"],
     "--interrupt-at must be a number of updates >= 1, got 0"),
    (["--interrupt-at", "3", "--resume", "python b.py", "--interrupt-signal", "HUP"],
     "--interrupt-signal must be one of TERM, KILL, got 'HUP'"),
])
def test_a_bad_interrupt_is_bad_input_before_anything_runs(tmp_path, monkeypatch, options,
                                                           words):
    monkeypatch.chdir(tmp_path)
    ran = f"{sys.executable} -c \"open('ran', 'w')\""
    result = invoke("run", "--out", str(tmp_path / "r"), *options, ran, ran)
    assert result.exit_code == 2
    assert one_error_line(result).startswith(words)
    assert not (tmp_path / "ran").exists() and not (tmp_path / "r").exists()
