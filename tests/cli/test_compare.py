"""``lrcheck compare``: the happy path and every bad input."""

import json
import sys

import pytest
import torch

from tests.cli.helpers import FAST, invoke, one_error_line


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


def test_timeout_help_says_it_covers_multi_process_runs_only():
    # The docs' reference is generated from this help (tests/docs/test_site.py checks its row).
    help_text = " ".join(invoke("compare", "--help").stdout.split())
    assert "Multi-process runs only" in help_text and "A run in this process has no timeout" \
        in help_text


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
    assert message in one_error_line(result)
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
    assert message in one_error_line(result)
    assert list(tmp_path.iterdir()) == []  # "here" and "made" above it, both made for it
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("the user's")
    for out in ("mine", "mine/sub"):
        assert invoke(*argv, "--out", str(tmp_path / out)).exit_code == 2
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]




@pytest.mark.parametrize("flag, value, choices", [("--dtype", "float16", "float64, float32"),
                                                   ("--amp", "fp8", "off, fp16, bf16")])
def test_a_fixed_choice_that_is_none_of_its_values_is_told_as_the_library_tells_it(flag, value,
                                                                                      choices):
    result = invoke("compare", flag, value)
    assert result.exit_code == 2
    assert one_error_line(result).startswith(   # CliRunner names the program "root"
        f"{flag} {value!r} is not known; choose one of: {choices}; see '")


def test_the_library_gets_the_flags_as_compare_options_not_a_dict(monkeypatch):
    """``lrcheck compare``'s flags reach ``api.comparison_pair`` typed: ``CompareOptions``, the
    candidate a ``RunSpec`` (its world checked against torchrun's first), the tolerances
    ``ToleranceOverrides``, the reference's framework decided from the old ``--policy
    accelerate`` by the library's ``reference_framework``."""
    from lrcheck import api
    from lrcheck.errors import SpecError
    from lrcheck.spec import CompareOptions, ToleranceOverrides

    got = []

    def comparison_pair(options):
        got.append(options)
        raise SpecError("stopped here")

    monkeypatch.setattr(api, "comparison_pair", comparison_pair)
    assert invoke("compare", "--accum", "2", "--bs", "8", "--nproc", "2",
                  "--dtype", "float32", "--amp", "fp16", "--inject-overflow", "3,5",
                  "--tol-lr", "1e-3").exit_code == 2
    assert invoke("compare", "--policy", "accelerate").exit_code == 2
    options, old = got
    assert isinstance(options, CompareOptions)
    candidate = options.candidate
    assert (candidate.accum, candidate.bs, candidate.world, candidate.inject_overflow) == (
        2, 8, 2, (3, 5))
    assert options.tolerances == ToleranceOverrides(lr=1e-3) and options.ref_framework is None
    assert (old.candidate.framework, old.ref_framework) == ("accelerate", "plain")
