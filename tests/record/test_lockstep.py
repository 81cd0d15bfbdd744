"""``lrcheck run`` in lockstep, for real: two commands of a user's script side by side, the
candidate loading the reference's state after every update. Correct pairs pass at the rounding
level; each effect-only bug fails at the update where it acts, its tensor named; a pass that
compared nothing fails; dropout is named; a command that dies or hangs leaves nothing
waiting."""

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.errors import RunError, SpecError
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_lockstep.py"


def _line(*args: str) -> str:
    return shlex.join([sys.executable, str(SCRIPT), *args])


def _run(tmp_path, ref_args, cand_args, **options):
    report = api.run_commands(_line(*ref_args), _line(*cand_args), tmp_path / "out",
                                  **options)
    checks = checks_by_name(report)
    return report, checks


def _left_running(tmp_path: Path) -> list[str]:
    """This test's processes of the script still running: those recording into its folder
    (another test file's, which make test's second worker may run at the same time, aside)."""
    found = subprocess.run(["pgrep", "-f", str(SCRIPT)], capture_output=True, text=True)
    mine = f"PYTHON_LRCHECK_RECORD_DIR={tmp_path}".encode()
    return [pid for pid in found.stdout.split() if mine in _environ(pid)]


def _environ(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone since pgrep saw it, or not ours to read: not this test's
        return b""


@pytest.mark.parametrize(("dtype", "opt", "cand"), [
    ("float32", "adamw", ["--bs", "1", "--accum", "16"]),
    ("float64", "sgd", ["--bs", "4", "--accum", "4"]),
])
def test_a_correct_pair_passes_at_the_rounding_level_from_a_warmup_at_lr_0(
        tmp_path, dtype, opt, cand):
    report, checks = _run(tmp_path, ["--dtype", dtype, "--opt", opt],
                          [*cand, "--dtype", dtype, "--opt", opt])
    assert report.ok
    assert checks["grads"].status == "pass" and checks["params"].status == "pass"
    assert "lockstep (11 updates started from the reference's state)" in checks["grads"].detail
    bound = 1e-4 if dtype == "float32" else 1e-9
    assert checks["grads"].max_rel_diff < bound / 10, "within a tenth of the bound"
    assert checks["evidence"].status == "pass"
    assert dtype in checks["grads"].detail
    # The causes, seen in the forwards and the loss: the same 16 samples behind each update,
    # each weighted 1/16 in both.
    assert checks["data"].status == "pass", checks["data"].detail
    assert "the same samples behind all 12 updates" in checks["data"].detail
    assert checks["weights"].status == "pass", checks["weights"].detail
    # The warmup starts at LR 0: update 0 moves nothing, and that is no jump.
    assert checks["params"].max_rel_diff is not None


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_gradient_scaled_by_1e_3_at_one_update_fails_there(tmp_path, dtype):
    report, checks = _run(tmp_path, ["--dtype", dtype],
                          ["--bs", "4", "--accum", "4", "--dtype", dtype, "--scale-grad-at", "7"])
    assert not report.ok
    assert checks["lr"].status == "pass"
    grads = checks["grads"]
    assert grads.status == "fail" and grads.first_divergence == 7
    assert "at update 7, from the same state" in grads.detail and "most in " in grads.detail
    assert 9e-4 < float(grads.detail.split("‖Δg‖/‖g‖")[1].split(") ")[1].split()[0]) < 1.1e-3


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_weight_decay_on_every_micro_batch_fails_at_the_first_update_that_moves(tmp_path, dtype):
    report, checks = _run(tmp_path, ["--dtype", dtype, "--wd-per-micro"],
                          ["--bs", "4", "--accum", "4", "--dtype", dtype, "--wd-per-micro"])
    params = checks["params"]
    assert not report.ok and params.status == "fail"
    assert params.first_divergence == 1  # LR 0 at update 0: no decay there
    assert "most in 0.weight" in params.detail or "most in 3.weight" in params.detail


def test_weight_decay_by_hand_before_the_first_step_is_not_called_another_seed(tmp_path):
    _, checks = _run(tmp_path, ["--wd-per-micro", "--warmup", "0"],
                     ["--bs", "4", "--accum", "4", "--wd-per-micro", "--warmup", "0"])
    params = checks["params"]
    assert params.status == "fail" and params.first_divergence == 0
    assert "changed them in place before its first step" in params.detail
    assert "seed" not in params.detail


def test_clipping_every_micro_batch_and_a_skipped_zero_grad_fail_where_they_act(tmp_path):
    _, clipped = _run(tmp_path, ["--clip"], ["--bs", "4", "--accum", "4", "--clip",
                                             "--clip-per-micro"])
    assert clipped["grads"].status == "fail" and clipped["grads"].first_divergence == 0
    _, skipped = _run(tmp_path, [], ["--bs", "8", "--accum", "2", "--skip-zero-grad-at", "5"])
    assert skipped["grads"].status == "fail" and skipped["grads"].first_divergence == 5


def test_the_causes_of_a_user_s_script_are_named_at_update_0(tmp_path):
    """Three bugs no effect check can name: a loss not divided by the accumulation steps, a
    zero_grad before every micro-batch, another data order. Each fails its cause at update 0."""
    _, undivided = _run(tmp_path / "a", [], ["--bs", "4", "--accum", "4", "--no-divide"])
    weights = undivided["weights"]
    assert weights.status == "fail" and weights.first_divergence == 0, weights.detail
    assert "each micro-batch's mean weighted 1 instead of by its samples" in weights.detail
    assert "sum to 4 in the candidate, 1 in the reference (4×)" in weights.detail
    assert undivided["data"].status == "pass"
    _, zeroed = _run(tmp_path / "b", [], ["--bs", "8", "--accum", "2", "--zero-grad-per-micro"])
    assert zeroed["weights"].status == "fail" and zeroed["weights"].first_divergence == 0
    assert "micro-batch means weighted 0 and 1/2" in zeroed["weights"].detail
    assert zeroed["cadence"].status == "fail" and zeroed["cadence"].first_divergence == 0
    _, shuffled = _run(tmp_path / "c", [], ["--bs", "8", "--accum", "2", "--order-seed", "1"])
    data = shuffled["data"]
    assert data.status == "fail" and data.first_divergence == 0, data.detail
    assert "only in the candidate" in data.detail and "only in the reference" in data.detail
    assert "see data" in shuffled["weights"].detail


def test_two_runs_at_lr_0_do_not_pass(tmp_path):
    report, checks = _run(tmp_path, ["--lr", "0"], ["--bs", "8", "--accum", "2", "--lr", "0"])
    assert not report.ok
    assert checks["evidence"].status == "fail"
    assert "this pass would prove nothing" in checks["evidence"].detail


def test_dropout_is_named_and_the_effects_are_not_judged(tmp_path):
    report, checks = _run(tmp_path, ["--dropout", "0.1"],
                          ["--bs", "8", "--accum", "2", "--dropout", "0.1"])
    for name in ("grads", "params"):
        assert checks[name].status == "warn"
        assert "dropout p=0.1 active in 1 module" in checks[name].detail
        assert "set it to 0 for the check" in checks[name].detail
    assert report.ok  # the causes were judged; the effects are named, neither passed nor failed


def test_runs_from_different_initial_weights_are_said_to(tmp_path):
    report, checks = _run(tmp_path, [], ["--bs", "8", "--accum", "2", "--seed-offset", "1"])
    assert not report.ok and checks["params"].first_divergence == 0
    assert "seed the model's initialisation" in checks["params"].detail


def test_a_candidate_that_crashes_stops_the_reference_and_is_named(tmp_path):
    # The reference, free once the candidate is gone, is stopped long before its 4000 updates
    # (a hundred or so on the loaded 2-core machine): a count, not the time the run took.
    with pytest.raises(RunError) as caught:
        _run(tmp_path, ["--updates", "4000"], ["--bs", "8", "--accum", "2", "--updates", "4000",
                                               "--crash-at", "3"])
    print(caught.value)
    assert "the candidate command" in str(caught.value) and "exit code 7" in str(caught.value)
    recorded = (tmp_path / "out" / "reference" / "rank0.jsonl").read_text().splitlines()
    assert 3 <= len(recorded) < 4000
    assert not _left_running(tmp_path)


def test_a_hung_command_is_stopped_after_the_timeout(tmp_path):
    # 10 s: far beyond any stall of a loaded machine between two updates of this tiny script
    # (a stall as long would stop the pair before the hang, naming the wrong command).
    with pytest.raises(RunError) as caught:
        _run(tmp_path, [], ["--bs", "8", "--accum", "2", "--hang-at", "4"], timeout=10)
    print(caught.value)
    assert "no update in either command for 10 s" in str(caught.value)
    recorded = (tmp_path / "out" / "candidate" / "rank0.jsonl").read_text().splitlines()
    assert len(recorded) == 4  # stopped in the hang, not before it
    assert "the candidate command" in str(caught.value)
    assert not _left_running(tmp_path)


def test_a_candidate_that_never_steps_leaves_the_reference_free(tmp_path):
    # A reference kept waiting for the candidate's first update would make no progress: the
    # run's own watch would stop both after 30 s without an update (a RunError, not this
    # SpecError), whatever the machine's load before the first update.
    with pytest.raises(SpecError) as caught:
        _run(tmp_path, ["--updates", "30"], ["--bs", "8", "--accum", "2", "--no-step"],
             timeout=30)
    assert "made no optimizer update" in str(caught.value)
    recorded = (tmp_path / "out" / "reference" / "rank0.jsonl").read_text().splitlines()
    assert len(recorded) == 30  # free to its end
    assert not _left_running(tmp_path)


def test_free_running_effects_beyond_the_tolerance_are_judged_against_a_twin(tmp_path):
    """Free-running when asked (``free``): one run after the other, no lockstep, and said;
    the scaled gradient's jump is judged against the twin's drift."""
    report, checks = _run(tmp_path, ["--dtype", "float64", "--updates", "20"],
                          ["--dtype", "float64", "--updates", "20", "--bs", "4", "--accum", "4",
                           "--scale-grad-at", "7"], free=True, fingerprint_every=1)
    assert "grads" not in checks and checks["evidence"].status == "pass"
    assert not (tmp_path / "out" / "candidate" / "lockstep-rank0.jsonl").exists()
    assert "free-running (the runs were recorded one after the other" in checks["params"].detail
    assert (tmp_path / "out" / "twin" / "run.json").exists()
    for name in ("params", "grad-norm"):
        assert checks[name].status == "fail" and checks[name].first_divergence == 7
        assert "the twin reference's own drift" in checks[name].detail
        assert "nudged by one unit in the last place" in checks[name].detail
    assert "judged against the twin's drift" in checks["params"].detail
    assert not report.ok


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            str(SCRIPT)]


def test_a_rank_that_crashes_is_named(tmp_path):
    with pytest.raises(RunError) as caught:
        api.run_commands(_line("--updates", "200"),
                         shlex.join([*TORCHRUN, "--bs", "4", "--accum", "2", "--updates", "200",
                                     "--crash-at", "3", "--crash-rank", "1"]), tmp_path / "out")
    print(caught.value)
    assert "the candidate command" in str(caught.value)
    assert "rank 1 failed first" in str(caught.value)
    assert not _left_running(tmp_path)


def test_two_ddp_ranks_follow_one_reference(tmp_path):
    report = api.run_commands(_line(), shlex.join([*TORCHRUN, "--bs", "4", "--accum", "2"]),
                              tmp_path / "out")
    checks = checks_by_name(report)
    assert report.ok and checks["grads"].status == "pass"
    assert checks["data"].status == "pass" and checks["weights"].status == "pass"
    assert (tmp_path / "out" / "candidate" / "lockstep-rank1.jsonl").exists()
    assert checks["replicas (candidate)"].status == "pass"
