"""The command line through typer's CliRunner: help, the happy path, and every bad input."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from lrcheck.cli import app
from tests.helpers import HANG_S, wait_for

runner = CliRunner()
FAST = ["--epochs", "1"]


def invoke(*args: str):
    result = runner.invoke(app, list(args))
    print("exit", result.exit_code, "\nstdout:\n", result.stdout, "\nstderr:\n", result.stderr)
    return result


def test_help_lists_commands_and_flags():
    result = invoke("--help")
    assert result.exit_code == 0 and "compare" in result.stdout and "list" in result.stdout
    flags = invoke("compare", "--help").stdout
    for flag in ("--accum", "--bs", "--ref-bs", "--epochs", "--task", "--scheduler", "--warmup",
                 "--lr", "--optimizer", "--policy", "--tail", "--loss-norm", "--seed", "--dtype",
                 "--device", "--out", "--json", "--quiet", "--tol-lr", "--tol-params",
                 "--tol-loss", "--tol-metrics", "--samples"):
        assert flag in flags


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["compare", "--help"], ["list"], ["--version"]])
def test_help_and_list_do_not_import_torch(argv):
    code = (f"import sys; sys.argv = ['lrcheck', *{argv!r}]\n"
            "from lrcheck.cli import app\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'sklearn', 'matplotlib', 'accelerate')\n"
            "         if m in sys.modules]\n"
            "print('HEAVY', heavy, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=HANG_S)
    assert "HEAVY []" in done.stderr, done.stderr


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


def test_list_shows_every_registry_entry():
    from lrcheck.experiments.schedulers import SCHEDULERS
    from lrcheck.experiments.tasks import TASKS
    from lrcheck.plan.policies import POLICIES

    out = invoke("list").stdout
    for name in [*TASKS, *SCHEDULERS, *POLICIES]:
        assert name in out


@pytest.mark.slow
def test_happy_path_prints_the_tables_and_writes_the_report(tmp_path):
    result = invoke("compare", "--accum", "2", "--bs", "16", "--ref-bs", "32", *FAST,
                    "--out", str(tmp_path / "r"))
    assert result.exit_code == 0
    for name in ("updates", "lr", "params", "loss", "metrics", "accuracy", "macro-F1",
                 "verdict: PASS"):
        assert name in result.stdout
    assert str(tmp_path / "r") in result.stderr
    for name in ("result.json", "report.md", "lr.png", "loss.png", "metrics.png"):
        assert (tmp_path / "r" / name).stat().st_size > 0


@pytest.mark.slow
def test_json_prints_result_json_only(tmp_path):
    result = invoke("compare", "--json", *FAST, "--out", str(tmp_path))
    data = json.loads(result.stdout)
    assert data["schema_version"] == 1 and data["verdict"] == "pass"
    assert result.exit_code == 0


@pytest.mark.slow
def test_failing_check_exits_1_and_names_the_first_divergence(tmp_path):
    result = invoke("compare", "--policy", "per-micro-batch", *FAST, "--out", str(tmp_path))
    assert result.exit_code == 1
    assert "verdict: FAIL" in result.stdout and "first differs at update 0" in result.stdout


@pytest.mark.slow
def test_quiet_prints_only_the_verdict(tmp_path):
    result = invoke("compare", "--quiet", *FAST, "--out", str(tmp_path))
    assert result.exit_code == 0 and result.stdout.strip() == "verdict: PASS"


def _bad_inputs(tmp_path, schedules_file):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases = [
        (["--accum", "0"], "--accum must be a whole number >= 1, got 0"),
        (["--bs", "0"], "--bs must be a whole number >= 1, got 0"),
        (["--bs", "16", "--accum", "2", "--ref-bs", "30"], "set --ref-bs 32"),
        (["--task", "mnist"], "choose one of: digits, digits-bn, breast-cancer, wine, synthetic"),
        (["--scheduler", "cosin"], "choose one of: constant, linear, cosine"),
        (["--policy", "often"], "choose one of: per-update, per-micro-batch"),
        (["--scheduler", "no_such_pkg.sched:make"], "cannot import 'no_such_pkg.sched'"),
        (["--scheduler", f"{schedules_file}:not_a_scheduler"], "returned int, not a torch"),
        (["--task", "wine", "--bs", "100", "--accum", "2"], "fewer than one effective batch"),
        (["--out", str(a_file)], "is an existing file"),
        (["--warmup", "1"], "--warmup must be a fraction of the run in [0, 1), got 1.0"),
        (["--warmup", "-0.5"], "in [0, 1), got -0.5"),
    ]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "CUDA is not available"))
    return cases


@pytest.mark.slow
def test_every_bad_input_exits_2_with_one_line(tmp_path, schedules_file):
    for argv, needle in _bad_inputs(tmp_path, schedules_file):
        result = invoke("compare", *argv, *FAST, "--out", str(tmp_path / "out"))
        if "--out" in argv:
            result = invoke("compare", *argv, *FAST)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2, argv
        assert len(lines) == 1 and needle in lines[0], (argv, result.stderr)
        assert "Traceback" not in result.output


@pytest.mark.slow
def test_a_crash_inside_training_exits_3_with_the_error(monkeypatch, tmp_path):
    import lrcheck.runner.recording as recording

    def broken(*args, **kwargs):
        raise RuntimeError("the GPU caught fire")

    monkeypatch.setattr(recording, "evaluate", broken)
    result = invoke("compare", *FAST, "--out", str(tmp_path))
    assert result.exit_code == 3
    assert result.stderr.strip().splitlines() == [
        "lrcheck: error: the reference run crashed: RuntimeError: the GPU caught fire"]


@pytest.mark.slow
def test_accelerate_policy_without_the_extra_exits_2_before_training(monkeypatch, tmp_path):
    import lrcheck.runner.plain as plain

    def trained(*args, **kwargs):
        raise AssertionError("trained before checking for the accelerate extra")

    monkeypatch.setitem(sys.modules, "accelerate", None)  # `import accelerate` raises ImportError
    monkeypatch.setattr(plain, "train", trained)
    result = invoke("compare", "--policy", "accelerate", *FAST, "--out", str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "lrcheck: note: --policy accelerate is now --framework accelerate --ref-framework plain",
        "lrcheck: error: --framework accelerate trains through accelerate, which is not "
        "installed; install it with: pip install 'lrcheck[accelerate]'"]


@pytest.mark.parametrize("argv", [
    ["compare", *FAST, "--out", ""],
    ["compare", *FAST, "--out=  "],
    ["trace", "--samples", "1000", "--out", ""],
    ["diff", "a.jsonl", "b.jsonl", "--out", ""],
])
def test_an_empty_out_is_bad_input_before_anything_runs(argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where an empty --out would have written
    result = invoke(*argv)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1
    assert lines[0].startswith("lrcheck: error:") and "--out" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_prepare_out_refuses_an_empty_name():
    from lrcheck.errors import SpecError
    from lrcheck.reports.files import prepare_out

    with pytest.raises(SpecError, match="--out '' names no folder"):
        prepare_out("")


@pytest.mark.parametrize("argv, needle", [
    (["compare", "--nproc", "0"], "--nproc must be a whole number >= 1, got 0"),
    (["trace", "--samples", "1000", "--nproc", "0"], "--nproc must be a whole number >= 1, got 0"),
    (["compare", "--bs", "8", "--accum", "2", "--nproc", "2", "--ref-bs", "30"],
     "bs 8 · accum 2 · nproc 2 = 32; set --ref-bs 32"),
])
def test_messages_name_the_flags_the_user_typed(argv, needle, tmp_path):
    result = invoke(*argv, "--out", str(tmp_path))
    assert result.exit_code == 2 and needle in result.stderr
    assert "world" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("argv, largest", [
    (["compare", "--scheduler", "onecycle", "--warmup", "0.99", *FAST], "0.988"),  # 44 updates
    (["trace", "--samples", "100", "--scheduler", "onecycle", "--warmup", "0.99"], "0.958"),  # 12
])
def test_a_warmup_that_leaves_onecycle_no_room_is_bad_input_before_training(
        argv, largest, monkeypatch, tmp_path):
    import lrcheck.runner.plain as plain
    import lrcheck.runner.simulate as simulate

    def trained(*args, **kwargs):
        raise AssertionError("trained before checking the warmup")

    monkeypatch.setattr(plain, "train", trained)
    monkeypatch.setattr(simulate, "simulate", trained)
    result = invoke(*argv, "--out", str(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1
    assert lines[0].startswith("lrcheck: error: --warmup 0.99 ")
    assert f"the largest --warmup that works here is {largest}" in lines[0]


@pytest.mark.slow
def test_a_comparison_whose_recording_cannot_fit_in_memory_is_refused_before_training(
        monkeypatch, tmp_path):
    import lrcheck.runner.plain as plain

    def trained(*args, **kwargs):
        raise AssertionError("trained before checking the memory the recording needs")

    monkeypatch.setattr(plain, "train", trained)
    # 1437 training samples / 32 = 44 updates per epoch, 4,810 float64 parameters, two runs,
    # and the reference's momentum buffers (a float64 per parameter) for the lockstep.
    result = invoke("compare", "--epochs", "1000000", "--out", str(tmp_path))
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, result.stderr
    assert "needs about 5.08 TB of memory" in lines[0] and "is available" in lines[0]
    assert "--epochs" in lines[0]


@pytest.mark.slow
def test_the_memory_check_uses_what_is_available(monkeypatch, tmp_path):
    from lrcheck.runner import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 1_000_000)
    result = invoke("compare", *FAST, "--quiet", "--out", str(tmp_path / "c"))
    assert result.exit_code == 2 and "and 1 MB is available" in result.stderr
    # trace: about 100 bytes per update and run; 20,000 updates each need 4 MB
    result = invoke("trace", "--samples", "20000", "--bs", "1", "--quiet",
                    "--out", str(tmp_path / "t"))
    assert result.exit_code == 2 and "needs about 4 MB of memory, and 1 MB is available" \
        in result.stderr and "--samples" in result.stderr


@pytest.mark.slow
def test_ctrl_c_in_trace_saves_what_was_simulated_and_exits_130(tmp_path, schedules_file):
    result = invoke("trace", "--samples", "1000", "--scheduler",
                    f"{schedules_file}:interrupted_at_step_50", "--out", str(tmp_path))
    assert result.exit_code == 130
    assert str(tmp_path / "result.json") in result.stderr and "Traceback" not in result.output
    data = json.loads((tmp_path / "result.json").read_text())
    assert data["verdict"] == "incomplete" and data["checks"] == []
    assert "interrupted (Ctrl-C) while simulating the reference schedule" in data["incomplete"]
    reference, candidate = data["runs"]["reference"], data["runs"]["candidate"]
    assert [u["step"] for u in reference["updates"]] == list(range(50))
    assert reference["stopped"] == "interrupted after 50 of 125 updates"
    assert candidate["updates"] == []
    assert candidate["stopped"] == "interrupted before its first update"


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


def test_timeout_help_and_readme_say_it_covers_multi_process_runs_only():
    from pathlib import Path

    help_text = " ".join(invoke("compare", "--help").stdout.split())
    assert "Multi-process runs only" in help_text and "A run in this process has no timeout" \
        in help_text
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    row = next(line for line in readme.splitlines() if line.startswith("| `--timeout S`"))
    assert "multi-process runs only" in row and "a single-process run has no timeout" in row


def test_list_has_no_empty_column():
    lines = [line.rstrip() for line in invoke("list").stdout.splitlines()]
    title = lines.index("schedulers (--scheduler)")
    header = lines[title + 2]  # the title, the top border, then the header
    assert header.count("┃") == 3 and "name" in header and "what" in header  # two columns
    for line in lines:
        assert "┃  ┃" not in line and "│  │" not in line


@pytest.mark.slow
def test_a_line_comes_before_the_first_progress_bar(monkeypatch, tmp_path):
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # stderr counts as a terminal: progress is shown
    result = invoke("compare", "--task", "wine", *FAST, "--out", str(tmp_path))
    assert result.exit_code == 0
    first = result.stderr.index("lrcheck: loading wine and building the runs")
    assert first < result.stderr.index("reference updates")
    quiet = invoke("compare", "--task", "wine", *FAST, "--quiet", "--out", str(tmp_path))
    assert "loading" not in quiet.stderr


def _one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lrcheck: error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0].removeprefix("lrcheck: error: ")


@pytest.mark.parametrize("argv, message", [
    (["--task", "synthetic", "--samples", "10"],
     "--samples must be a whole number >= 16 for --task synthetic: its test split, a fifth of "
     "the samples, holds each class; got 10"),
    (["--task", "synthetic", "--samples", "15"], "--samples must be a whole number >= 16"),
    (["--task", "wine", "--samples", "500"],
     "--samples 500 does not apply to --task wine, which has a fixed size (178 samples); "
     "--samples sizes --task synthetic or tokens"),
    (["--task", "digits", "--samples", "2000"], "--task digits, which has a fixed size (1797"),
    (["--task", "wine", "--accum", "100", "--bs", "16"],
     "the training set of --task wine has 142 samples, fewer than one effective batch "
     "(bs 16 · accum 100 · nproc 1 = 1600); lower --bs or --accum"),
])
def test_a_data_set_too_small_or_samples_that_would_be_ignored_are_bad_input_before_training(
        argv, message, monkeypatch, tmp_path):
    import lrcheck.runner.plain as plain

    def trained(*args, **kwargs):
        raise AssertionError("trained before checking --samples")

    monkeypatch.setattr(plain, "train", trained)
    monkeypatch.chdir(tmp_path)  # where the default report folder would be made
    result = invoke("compare", *argv, *FAST)
    assert result.exit_code == 2
    assert message in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["compare", "--task", "wine", "--bs", "8", "--epochs", "1", "--resume-at", "50"],
     "--resume-at 50: the run has 8 updates"),  # found once the data is loaded
    (["trace", "--samples", "100", "--bs", "50", "--accum", "4"],
     "the training set has 100 samples, fewer than one effective batch (bs 50 · accum 4 · "
     "nproc 1 = 200)"),
])
def test_bad_input_found_after_the_report_folder_was_made_leaves_no_folder_behind(
        argv, message, tmp_path):
    result = invoke(*argv, "--out", str(tmp_path / "made" / "here"))
    assert result.exit_code == 2
    assert message in _one_error_line(result)
    assert list(tmp_path.iterdir()) == []  # "here" and "made" above it, both made for it
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    for out in ("mine", "mine/sub"):
        assert invoke(*argv, "--out", str(tmp_path / out)).exit_code == 2
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


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


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")
def test_a_sighup_to_the_process_group_ends_compare_cleanly_and_leaves_no_process(tmp_path):
    """Closing the terminal sends SIGHUP to every process of its group: lrcheck, its plot
    helper and multiprocessing's resource tracker. lrcheck stops as on SIGTERM (128 + 1),
    saves what was recorded, and no traceback of the tracker's follows."""
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
        assert len(group) >= (3 if second_cpu() else 1), group  # lrcheck, helper, tracker
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
