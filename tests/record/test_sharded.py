"""Sharded training recorded unmodified: FSDP2 (tests/fixtures/user_fsdp.py) on 2 ranks under
torchrun against one unsharded process, and DeepSpeed (tests/fixtures/user_deepspeed.py, float32
on the CPU) under torchrun and its own launcher. Each correct configuration passes ``lrcheck
run`` against its big-batch reference; each known bug fails at the update it acts on. Slow:
every run is a fresh process group."""

import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from lrcheck import api
from lrcheck.record.folder import read_folder
from lrcheck.recorder import read_records
from lrcheck.spec import Dtype, Tolerances
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parents[1] / "fixtures"
PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def _checks(report):
    return checks_by_name(report)


def _line(argv):
    return shlex.join(str(a) for a in argv)


def test_fsdp2_on_2_ranks_matches_one_unsharded_process_to_float64_rounding(tmp_path):
    # Interrupted before update 10's step and resumed from its distributed checkpoint of
    # update 7 (torch.distributed.checkpoint: dcp.save / dcp.load through get_state_dict /
    # set_state_dict) on another world size: the 2 ranks' shards loaded into one unsharded
    # process (dcp.load reshards), accumulating 4 micro-batches of 8 for the same 32 samples an
    # update; each rank's two processes joined into one timeline.
    script = FIXTURES / "user_fsdp.py"
    ref = [PY, script, "--bs", "32"]
    cand = [*TORCHRUN, script, "--bs", "8", "--accum", "2", "--save-every", "4",
            "--ckpt", tmp_path / "dcp"]
    f64 = Tolerances.for_dtype(Dtype.FLOAT64)
    good = _checks(api.run_commands(_line(ref), _line(cand), tmp_path / "good",
                                    fingerprint_every=1, tolerances=f64, interrupt_at=10,
                                    resume=[PY, script, "--bs", "8", "--accum", "4",
                                            "--save-every", "4", "--ckpt", tmp_path / "dcp",
                                            "--resume", tmp_path / "dcp"]))
    assert all(good[n].status == "pass" for n in ("updates", "lr", "params", "grad-norm",
                                                  "data", "weights", "ranks (candidate)"))
    assert "shards (candidate)" not in good  # every update's shards merged
    assert ("updates 8-9 were trained twice: the resume restored the checkpoint of update 7"
            in good["continuation (candidate)"].detail)
    assert ("resumed on 1 process (2 before it): the optimizer's state (step counter 8), the "
            "schedule (step 8) carried" in good["continuation (candidate)"].detail)
    ranks = [json.loads((tmp_path / "good" / "candidate" / f"rank{r}.json").read_text())
             for r in (0, 1)]
    assert all(p["optimizers"][0]["sharded"] and p["world"] == 2 for p in ranks)
    # The two ranks' shard fingerprints merged (sums add, maxima max) against the unsharded
    # run's, tensor by tensor, at every update.
    whole = read_records(tmp_path / "good" / "reference" / "rank0.jsonl")
    merged = read_folder(tmp_path / "good" / "candidate").records
    assert len(whole) == len(merged) == 32
    a = np.array([r["fingerprint"] for r in whole]).reshape(32, -1, 2)
    b = np.array([r["fingerprint"] for r in merged]).reshape(32, -1, 2)
    scale = a[:, :, 1].max(axis=1)
    sums = (np.abs(b[:, :, 0] - a[:, :, 0]).max(axis=1) / scale).max()
    peaks = (np.abs(b[:, :, 1] - a[:, :, 1]).max(axis=1) / scale).max()
    print(f"FSDP2 2 ranks vs 1 process, 32 updates, 4 tensors: |Δsum|/max|p| {sums:.3g}, "
          f"|Δmax|p||/max|p| {peaks:.3g}")
    assert a.shape == b.shape == (32, 4, 2) and sums < 1e-13 and peaks < 1e-13
    cand_bug = [*TORCHRUN, script, "--bs", "8", "--accum", "2", "--bug", "forget-accum"]
    api.record([str(a) for a in cand_bug], tmp_path / "bug", fingerprint_every=1)
    bug = _checks(api.diff(tmp_path / "good" / "reference", tmp_path / "bug", tolerances=f64))
    assert bug["lr"].status == "fail" and bug["lr"].first_divergence == 0


deepspeed = pytest.mark.deepspeed


@deepspeed
def test_deepspeed_zero3_resumed_under_torchrun_and_its_own_launcher_pass_and_a_ported_loop_fails(
        tmp_path):
    pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed: "
                                            "pip install 'lrcheck[deepspeed]'")
    script = FIXTURES / "user_deepspeed.py"
    ref = _line([PY, script, "--bs", "32"])
    # ZeRO 3 (the parameters partitioned too) interrupted before update 6's step and resumed
    # from its checkpoint of update 3 (engine.save_checkpoint every 4 updates, load_checkpoint
    # of the latest: weights, optimizer's partitions, schedule), each rank's two processes
    # joined into one timeline, the two ranks' partitions merged.
    zero3 = [*TORCHRUN, script, "--bs", "8", "--accum", "2", "--zero", "3",
             "--save-every", "4", "--ckpt", tmp_path / "ckpt"]
    good = _checks(api.run_commands(ref, _line(zero3), tmp_path / "zero3", fingerprint_every=1,
                                    interrupt_at=6,
                                    resume=_line([*zero3, "--resume", tmp_path / "ckpt"])))
    assert all(good[n].status == "pass" for n in ("updates", "lr", "params", "grad-norm",
                                                  "data", "weights", "cadence",
                                                  "ranks (candidate)"))
    joined = good["continuation (candidate)"]
    assert joined.status == "pass" and (
        "updates 4-5 were trained twice: the resume restored the checkpoint of update 3"
        in joined.detail)
    assert ("resumed: the optimizer's state (step counter 4), the schedule (step 4) carried"
            in joined.detail)
    # DeepSpeed clips by default (gradient_clipping 1.0): its engine's clip_grad_norm_ in the
    # reference, ZeRO 3's clipping of its partitions in the candidate, once per update, in both
    # of its processes.
    assert "clip_grad_norm_ as often (1 per update)" in good["cadence"].detail
    described = sorted((tmp_path / "zero3" / "candidate").glob("rank1*.json"))
    assert len(described) == 2  # the interrupted process and the resume
    for about in (json.loads(f.read_text())["optimizers"] for f in described):
        assert about[0]["partitioned"] and about[0]["wrapper"].endswith(
            ".DeepSpeedZeroOptimizer_Stage3")
    reference = tmp_path / "zero3" / "reference"
    launcher = Path(PY).with_name("deepspeed")
    api.record([str(launcher), "--num_gpus", "2", str(script), "--bs", "8", "--accum", "2"],
               tmp_path / "launcher", fingerprint_every=1)
    own = _checks(api.diff(reference, tmp_path / "launcher"))
    assert all(own[n].status == "pass" for n in ("updates", "lr", "params", "replicas (candidate)"))
    # Two bugs of a loop ported to DeepSpeed: it also steps the scheduler the engine steps, and
    # clips by hand after every engine.backward instead of the engine's clipping.
    api.record([PY, str(script), "--bs", "16", "--accum", "2", "--bug", "scheduler-stepped-too",
                "--clip", "1.0", "--clip-by-hand"], tmp_path / "bug", fingerprint_every=1)
    bug = _checks(api.diff(reference, tmp_path / "bug"))
    assert bug["lr"].status == "fail" and bug["lr"].first_divergence == 0
    assert "3 steps per update against 1" in bug["lr"].detail
    assert (bug["cadence"].status, bug["cadence"].first_divergence) == ("fail", 0)
    assert bug["cadence"].detail.startswith(
        "clip_grad_norm_ ran 2 times per update in the candidate against 1 in the reference "
        "(from update 0): clipping after every backward, not once per update")
