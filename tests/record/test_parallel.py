"""Tensor parallel recorded unmodified: a user's torchtitan-style training of a tiny Llama
(tests/fixtures/user_tp.py) on a gloo ``(dp, tp)`` mesh, and HSDP (a ``(replicate, shard)``
mesh), its shards merged by placement (``record.placed``), against one process with the same
effective batch, free-running, the gradient per element too (``record.probes``); and
the gradient norm counted over the ranks with the tp-replicated parameters once per rank,
named by ``clip-norm`` at update 0; the run's own log of its gradient norm held against the
true global norm (``logs.shards``): rank 0's local norm logged is named. Slow: each run is a
fresh process group; the reference is recorded once for the module."""

import json
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.spec import Dtype, Tolerances
from tests.helpers import checks_by_name, merged_gaps

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_tp.py"
PY = sys.executable
F64 = Tolerances.for_dtype(Dtype.FLOAT64)


def _torchrun(ranks, *args):
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
            str(SCRIPT), *args]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp") / "reference"
    api.record([PY, str(SCRIPT), "--bs", "8"], out, fingerprint_every=1)
    return out


# (the 4 ranks' arguments, rank 3's placements of a sharded tensor, whether rank 3 feeds rows)
# Each the reference's 8 rows per update: dp 2 x 2 rows x 2 micro-batches; dp 4 x 1 x 2.
PAIRS = {"dp 2 x tp 2": (["--dp", "2", "--tp", "2", "--bs", "2"], ["S", "S"], False),  # colwise
         "hsdp (2, 2)": (["--dp", "4", "--hsdp", "--bs", "1"], ["R", "S"], True)}  # under FSDP2


@pytest.mark.parametrize("pair", PAIRS)
def test_4_ranks_on_a_2_d_mesh_match_one_process_their_shards_merged_by_placement(
        pair, reference, tmp_path):
    args, placements, feeds = PAIRS[pair]
    cand, log = tmp_path / "candidate", tmp_path / "history.csv"
    run = api.record(_torchrun(4, *args, "--accum", "2",
                               "--csv", str(log)), cand, fingerprint_every=1, logs=log)
    norm = next(f for f in run.logs if f.quantity.value == "grad_norm")
    assert norm.says.startswith("the logged grad norm is the pre-clip norm"), norm.says
    assert norm.says.endswith("the true global norm, merged from the 4 ranks' shards, each "
                              "once"), norm.says
    checks = checks_by_name(api.diff(reference, cand, tolerances=F64))
    for name in ("updates", "lr", "data", "weights", "params", "grad-norm", "ranks (candidate)",
                 "replicas (candidate)", "clip-norm (candidate)", "gradient (candidate)"):
        assert checks[name].status == "pass", (name, checks[name].detail)
    assert "shards (candidate)" not in checks  # every update's shards merged
    about = json.loads((cand / "rank3.json").read_text())["optimizers"][0]["layout"]
    assert about["meshes"][-1]["coord"] == [1, 1] and about["feeds"] is feeds
    assert about["data_world"] == (4 if feeds else 2)  # tp told by its placements too
    assert placements in [t[1:] for t in about["tensors"]]
    norms, sums, dots = merged_gaps(reference, cand)
    print(f"{pair} vs 1 process: merged gradient norm relative {norms:.3g}, parameters "
          f"|Δsum|/max|p| {sums:.3g}, per element |Δdot|/‖g‖ {dots:.3g}")
    assert norms <= 1e-12 and sums <= 1e-12 and dots <= 1e-12


def test_the_norm_summed_over_every_rank_and_the_local_norm_logged_are_named_at_update_0(
        reference, tmp_path):
    # Two bugs in one run (one recording): the clip's norm counts the replicated tensors
    # twice, and the log holds rank 0's local norm (miles_diffusion PR #35); each named apart.
    cand, log = tmp_path / "bug", tmp_path / "history.csv"
    run = api.record(_torchrun(2, "--tp", "2", "--bs", "8", "--bug", "replicated-norm",
                               "--bug", "local-norm-logged", "--csv", str(log)), cand,
                     fingerprint_every=1, logs=log)
    logged = next(f for f in run.logs if f.quantity.value == "grad_norm")
    assert (logged.status.value, logged.first_update) == ("differs", 0), logged
    assert logged.says.startswith("the logged grad norm is rank 0's local norm before clipping, "
                                  "of the shards it holds, not reduced over the 2 ranks"), \
        logged.says
    checks = checks_by_name(api.diff(reference, cand, tolerances=F64))
    norm = checks["clip-norm (candidate)"]
    assert norm.status == "fail" and norm.first_divergence == 0
    assert "replicated parameters counted 2 times" in norm.detail, norm.detail
    assert checks["params"].status == "fail" and checks["params"].first_divergence == 0
    assert checks["lr"].status == "pass" and checks["data"].status == "pass"
