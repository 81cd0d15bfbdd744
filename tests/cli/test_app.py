"""The app through typer's CliRunner and as the console script: help, usage errors,
--version, Ctrl-C and signals."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from tests.cli.helpers import FAST, invoke, one_error_line
from tests.helpers import HANG_S, wait_for

MARKING_FACTORY = '''
from pathlib import Path
from torch.optim.lr_scheduler import LambdaLR

def make(optimizer, ctx):
    def constant(step):
        if step == 3:  # stepped after three updates: the run trains
            Path({marker!r}).touch()
        return 1.0
    return LambdaLR(optimizer, constant)
'''


def _in_session(sid: int) -> list[str]:
    """The processes, zombies aside, of session ``sid`` (Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry.name.isdigit() and state[3] == str(sid) and state[0] != "Z":
            found.append(f"{entry.name}: {cmdline}")
    return found



def test_help_lists_every_command():
    result = invoke("--help")
    assert result.exit_code == 0
    from lrcheck.cli import app

    names = list(typer.main.get_command(app).commands)
    assert {"compare", "trace", "diff", "suite", "list"} <= set(names)
    assert [name for name in names if name not in result.stdout] == []


@pytest.mark.parametrize("command", ["compare", "trace", "diff", "suite", "suite-merge"])
def test_help_lists_every_flag_of_the_command(command):
    from lrcheck.cli import app

    params = typer.main.get_command(app).commands[command].params
    flags = [opt for param in params for opt in (*param.opts, *param.secondary_opts)
             if opt.startswith("--")]
    text = invoke(command, "--help").stdout
    assert len(flags) >= 2 and [flag for flag in flags if flag not in text] == []


HELP_COMMANDS = [["--help"], ["compare", "--help"], ["suite", "--help"], ["list"], ["--version"]]


@pytest.mark.slow
def test_help_and_list_do_not_import_torch():
    """One fresh process runs each command in turn (a Python start with lrcheck's CLI costs
    seconds): after each, none of the heavy modules is loaded."""
    code = ("import sys\nfrom lrcheck.cli import app\n"
            f"for argv in {HELP_COMMANDS!r}:\n"
            "    sys.argv = ['lrcheck', *argv]\n"
            "    try:\n        app()\n    except SystemExit:\n        pass\n"
            "    heavy = [m for m in ('torch', 'sklearn', 'matplotlib', 'accelerate')\n"
            "             if m in sys.modules]\n"
            "    print('HEAVY', argv, heavy, file=sys.stderr)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=HANG_S)
    told = [line for line in done.stderr.splitlines() if line.startswith("HEAVY")]
    assert told == [f"HEAVY {argv!r} []" for argv in HELP_COMMANDS], done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("argv, code, stream, text", [
    (["list"], 0, "stdout", "per-micro-batch-scaled"),  # the last rows, flushed into a pipe
    (["compare", "--bs", "0"], 2, "stderr", "lrcheck: error:"),
    (["nonsense"], 2, "stderr", "No such command"),
    (["compare", "--bs", "abc"], 2, "stderr", "lrcheck: error: Invalid value for '--bs'"),
    (["--version"], 0, "stdout", "lrcheck 0.1.0"),
])
def test_the_console_script_leaves_with_the_command_s_code_and_all_its_output(
        argv, code, stream, text):
    # main() skips the interpreter's teardown (os._exit): nothing may be lost on the way out.
    done = subprocess.run([sys.executable, "-m", "lrcheck", *argv], capture_output=True,
                          text=True, timeout=HANG_S)
    assert done.returncode == code
    assert text in getattr(done, stream)


@pytest.mark.parametrize("argv, needle", [
    (["compare", "--bs", "abc"], "Invalid value for '--bs'"),
    (["trace", "--samples", "1000", "--warmup", "lots"], "Invalid value for '--warmup'"),
    (["compare", "--nope"], "No such option: --nope"),
    (["list", "extra"], "unexpected extra argument"),
    (["nonsense"], "No such command 'nonsense'"),
    (["trace"], "Missing option '--samples'"),
    (["diff", "only-one.jsonl"], "Missing argument 'candidate'"),
])
def test_usage_errors_are_one_line_on_stderr_and_exit_2(argv, needle):
    result = invoke(*argv)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("lrcheck: error: ") and needle in lines[0]
    assert "--help" in lines[0]  # where to read more
    assert result.stdout == ""


def test_help_still_works_and_no_arguments_still_show_it():
    for argv in (["--help"], ["compare", "--help"], ["trace", "--help"]):
        result = invoke(*argv)
        assert result.exit_code == 0 and "Usage:" in result.stdout and "--help" in result.stdout
    bare = invoke()
    assert "Usage:" in bare.output and "compare" in bare.output and "trace" in bare.output
    assert "lrcheck: error" not in bare.output


def test_version_prints_the_installed_version():
    from importlib.metadata import version

    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout == f"lrcheck {version('lrcheck')}\n"


def test_ctrl_c_in_any_command_is_told_in_one_line_and_exits_130(monkeypatch, tmp_path):
    # typer alone would exit 130 without a word.
    from lrcheck import api

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(api, "diff", stopped)
    result = invoke("diff", "ref.jsonl", "cand.jsonl", "--out", str(tmp_path))
    assert result.exit_code == 130
    assert result.stderr.strip() == "lrcheck: interrupted (Ctrl-C)" and result.stdout == ""


@pytest.mark.slow
def test_a_schedule_that_raises_in_both_runs_says_both_stopped_with_the_code_help_promises(
        tmp_path, schedules_file):
    help_text = " ".join(invoke("compare", "--help").stdout.split())
    assert "1 a check failed (a scheduler.step() that raises stops its run" in help_text
    result = invoke("compare", "--task", "wine", "--bs", "8", *FAST, "--scheduler",
                    f"{schedules_file}:raises_at_step_3", "--out", str(tmp_path))
    assert result.exit_code == 1
    updates = json.loads((tmp_path / "result.json").read_text())["checks"][0]
    assert updates["name"] == "updates" and updates["status"] == "fail"
    assert updates["detail"].startswith("both runs stopped, the reference after 3 of 8 updates "
                                        "and the candidate after 3 of 8:")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")
def test_a_sighup_to_the_process_group_ends_compare_cleanly_and_leaves_no_process(tmp_path):
    """Closing the terminal sends SIGHUP to every process of its group: lrcheck and its plot
    helper. lrcheck stops as on SIGTERM (128 + 1), saves what was recorded, and no traceback
    follows (a resource tracker of multiprocessing's, which the helper used to start, printed
    one)."""
    from lrcheck.reports.render import second_cpu

    marker = tmp_path / "training"
    factory = tmp_path / "marking.py"
    factory.write_text(MARKING_FACTORY.format(marker=str(marker)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "lrcheck", "compare", "--epochs", "200", "--scheduler",
         f"{factory}:make", "--out", str(tmp_path / "out")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(marker.exists, HANG_S, "the reference to train", proc=proc)
        group = _in_session(proc.pid)
        assert len(group) >= (2 if second_cpu() else 1), group  # lrcheck, its plot helper
        os.killpg(proc.pid, signal.SIGHUP)
        out, err = proc.communicate(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    print("exit", proc.returncode, "\nstdout:\n", out, "\nstderr:\n", err)
    left = _in_session(proc.pid)
    assert proc.returncode == 128 + signal.SIGHUP
    assert "Traceback" not in err and "resource_tracker" not in err
    assert err.strip().splitlines()[-1].startswith(
        "lrcheck: terminated (SIGHUP) during the reference run; reference interrupted after ")
    assert json.loads((tmp_path / "out" / "result.json").read_text())["verdict"] == "incomplete"
    assert left == [], "processes left running"


def test_schema_prints_each_files_schema_and_an_unknown_name_is_bad_input():
    from lrcheck import schemas

    for name in schemas.NAMES:
        result = invoke("schema", name)
        assert result.exit_code == 0
        assert json.loads(result.stdout) == schemas.load(name)
    result = invoke("schema", "report")
    assert result.exit_code == 2
    assert "'report' is not known; choose one of: result, suite, run" in one_error_line(result)


@pytest.mark.parametrize("command", ["compare", "run", "record", "suite"])
def test_every_command_that_trains_has_the_deterministic_switch(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0 and "--deterministic" in result.stdout
