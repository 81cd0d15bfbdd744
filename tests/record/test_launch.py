"""``record.launch``: the command's checks, its environment, and a user's own sitecustomize
still running under the injection."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lrcheck.errors import SpecError
from lrcheck.record.launch import (
    BOOT,
    check_command,
    environment,
    prepare_folder,
    record_command,
)
from tests import schema_files


@pytest.mark.parametrize(("command", "words"), [
    ([], "nothing to record"),
    (["no-such-program-lrcheck"], "command not found: 'no-such-program-lrcheck'"),
    ([sys.executable, "-I", "train.py"], "-I (isolated mode"),
    ([sys.executable, "-sE", "train.py"], "-E (ignores PYTHON*"),
    ([sys.executable, "-S", "-m", "pkg"], "-S (does not import site"),
])
def test_bad_commands_are_refused_in_one_line(command, words):
    with pytest.raises(SpecError, match=None) as caught:
        check_command(command)
    print(caught.value)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_flags_after_the_script_are_the_scripts():
    assert check_command([sys.executable, "-u", "train.py", "-I"])[1:] == ["-u", "train.py", "-I"]


def test_the_environment_puts_boot_first_and_keeps_the_users_path(tmp_path):
    env = environment(tmp_path, 32, 5, base={"PYTHONPATH": "/users/own"})
    assert env["PYTHONPATH"].split(":") == [str(BOOT), "/users/own"]
    assert env["PYTHON_LRCHECK_RECORD_SAMPLES"] == "32"
    assert env["PYTHON_LRCHECK_RECORD_EVERY"] == "5"
    assert env["PYTHON_LRCHECK_RECORD_DIR"] == str(tmp_path.resolve())
    # DeepSpeed's multi-node runner passes on PYTHON* variables only (launcher/runner.py,
    # EXPORT_ENVS): every setting the recording needs must be one.
    added = {k for k in env if k != "PYTHONPATH"}
    assert added and all(k.startswith("PYTHON") for k in added)


def test_an_unwritable_out_is_bad_input(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SpecError, match="cannot be written"):
        prepare_folder(blocker / "sub")


def test_a_previous_recordings_files_are_removed_and_others_kept(tmp_path):
    for name in ("rank0.jsonl", "rank1-opt1.jsonl", "run.json", "notes.txt"):
        (tmp_path / name).write_text("x")
    prepare_folder(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_users_own_sitecustomize_still_runs(tmp_path):
    (tmp_path / "sitecustomize.py").write_text("print('users own sitecustomize ran')\n")
    env = environment(tmp_path, None, 0, base={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin"})
    out = subprocess.run([sys.executable, "-c", "print('script')"], env=env,
                         capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["users own sitecustomize ran", "script"], out.stderr


@pytest.mark.slow
def test_the_torch_markers_are_counted_into_run_json_and_removed(tmp_path):
    run = record_command([sys.executable, "-c", "import torch"], tmp_path / "r")
    assert run.torch_processes == 1 and "1 Python process(es) imported torch" in (
        run.nothing_recorded())
    assert json.loads((tmp_path / "r" / "run.json").read_text())["torch_processes"] == 1
    assert schema_files.problems(tmp_path / "r" / "run.json") == []  # as lrcheck record wrote it
    left = sorted(p.name for p in (tmp_path / "r").iterdir())
    assert left == ["run.json"], left


@pytest.mark.slow
def test_a_program_that_asks_whether_torch_is_there_before_importing_it_is_recorded(tmp_path):
    """Transformers calls ``importlib.util.find_spec("torch")`` before it imports torch: that
    question must not use up the watch for torch's import."""
    script = ("import importlib.util; assert importlib.util.find_spec('torch'); import torch; "
              "p = torch.nn.Parameter(torch.ones(1)); o = torch.optim.SGD([p], lr=0.1); "
              "p.sum().backward(); o.step()")
    run = record_command([sys.executable, "-c", script], tmp_path / "r")
    assert run.exit_code == 0 and run.updates == {"rank0.jsonl": 1}


@pytest.mark.slow
def test_another_environments_python_keeps_its_sys_path_and_is_recorded(tmp_path, monkeypatch):
    """A Python of a second environment, which has torch (through a .pth) but not lrcheck:
    recorded, its ``sys.path`` is the one it has unrecorded (with boot/ first, as PYTHONPATH
    says), no folder of lrcheck's added, and its update is recorded."""
    import torch

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True)
    (Path(purelib.stdout.strip()) / "torch.pth").write_text(
        f"{Path(torch.__file__).parents[1]}\n")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    script = ("import json, sys\n"
              "import torch\n"
              "p = torch.nn.Parameter(torch.zeros(1))\n"
              "p.grad = torch.ones(1)\n"
              "torch.optim.SGD([p], lr=0.1).step()\n"
              "print(json.dumps(sys.path))\n")
    alone = subprocess.run([python, "-c", "import lrcheck"], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(BOOT)})
    assert alone.returncode != 0 and "No module named 'lrcheck'" in alone.stderr, (
        "the premise: lrcheck is not importable in the second environment")
    plain = subprocess.run([python, "-c", script], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONPATH": str(BOOT)})
    run = record_command([python, "-c", script], tmp_path / "r", capture=True)
    print(run.tail)
    assert run.exit_code == 0 and run.updates == {"rank0.jsonl": 1}, run.tail
    assert json.loads(run.tail[-1]) == json.loads(plain.stdout)
