"""Pipeline parallel recorded unmodified: a user's torchtitan-style training of a tiny Llama
split into 2 stages (tests/fixtures/user_pp.py, ``torch.distributed.pipelining`` on gloo),
data parallel beside it (a ``(dp, pp)`` mesh of 4 ranks), its stages stitched into the whole
model (``record.staged``), against one process with the same effective batch, free-running,
the gradient per element too (``record.probes``); and the loss divided by the micro-batches on
top of the schedule's ``scale_grads``, named by ``stages (candidate)`` at update 0. Slow: each
run is a fresh process group; the reference is recorded once for the module."""

import json
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.spec import Dtype, Tolerances
from tests.helpers import checks_by_name, merged_gaps

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_pp.py"
PY = sys.executable
F64 = Tolerances.for_dtype(Dtype.FLOAT64)


def _torchrun(*args, ranks=2):
    """``user_pp.py`` on ``ranks`` processes: 2 stages, times the data-parallel ranks."""
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
            str(SCRIPT), *args]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("pp") / "reference"
    api.record([PY, str(SCRIPT)], out, fingerprint_every=1)
    return out


def test_dp_2_by_gpipe_over_2_stages_matches_one_process_its_stages_stitched(reference, tmp_path):
    # A (dp, pp) mesh of 4 ranks, each dp rank 1 row of each of 2 micro-batches per stage: the
    # stages stitched and each stage's second rank a replica of its first (the 2-rank pipeline
    # alone, ``--accum 4``, passes as well: run by hand, docs/parallel.md).
    cand = tmp_path / "candidate"
    api.record(_torchrun("--accum", "2", "--dp", "2", ranks=4), cand, fingerprint_every=1)
    checks = checks_by_name(api.diff(reference, cand, tolerances=F64))
    for name in ("updates", "lr", "data", "params", "grad-norm", "ranks (candidate)",
                 "stages (candidate)", "cadence", "gradient (candidate)", "replicas (candidate)"):
        assert checks[name].status == "pass", (name, checks[name].detail)
    assert checks["weights"].status == "skip"  # the loss is on stage 1, its rows activations
    assert "shards (candidate)" not in checks  # every update's stages stitched
    assert "held by several stages" not in checks["stages (candidate)"].detail  # paths kept
    assert "a pipeline stage: the loss is computed on the last stage" in checks["weights"].detail
    about = [json.loads((cand / f"rank{r}.json").read_text())["optimizers"][0]["layout"]
             for r in (0, 1)]
    assert [a["stage"] + [a["feeds"]] for a in about] == [[0, 2, True], [1, 2, False]]
    assert about[1]["names"][-1] == "lm_head.weight" and "model.layers.1" in about[1]["names"][0]
    norms, sums, dots = merged_gaps(reference, cand)
    print(f"dp 2 x pp 2 (GPipe, 2 micro-batches) vs 1 process: stitched gradient norm "
          f"relative {norms:.3g}, parameters "
          f"|Δsum|/max|p| {sums:.3g}, per element |Δdot|/‖g‖ {dots:.3g}")
    assert norms <= 1e-12 and sums <= 1e-12 and dots <= 1e-12


def test_the_loss_divided_by_the_micro_batches_again_fails_at_update_0_naming_the_stages(
        reference, tmp_path):
    cand = tmp_path / "bug"
    api.record(_torchrun("--accum", "4", "--schedule", "1f1b", "--bug", "double-scale"), cand,
               fingerprint_every=1)
    checks = checks_by_name(api.diff(reference, cand, tolerances=F64))
    stages = checks["stages (candidate)"]
    assert stages.status == "fail" and stages.first_divergence == 0
    for s in (0, 1):
        assert f"stage {s}'s gradients scaled by 1/4 twice" in stages.detail, stages.detail
    assert checks["grad-norm"].status == "fail" and checks["grad-norm"].first_divergence == 0
    assert checks["lr"].status == "pass" and checks["data"].status == "pass"
