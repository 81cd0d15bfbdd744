"""Expert parallel split by transformers itself, recorded unmodified: a tiny Mixtral
(tests/fixtures/user_tf_ep.py) loaded with ``DistributedConfig(tp_size=2, ep_size=2,
tp_plan={})`` on 2 gloo processes — its experts ``DTensor`` shards on the ``ep`` mesh, the
rest plain, both ranks feeding the batch the group shares; the load-balancing loss on —
merged by placement (``record.placed``: the experts grouped by their ``ep`` placement, the
router's terms rank 0's, the ranks sharing rows read off the model's own mesh,
``record.placements.shared_rows``) against one process holding the 4 experts, free-running;
an expert dispatch of the user's own that sends every token from every rank, the experts'
gradients 2×, named by ``experts (candidate)`` at update 0. Slow: each run is a fresh process
group and imports transformers; the reference is recorded once for the module."""

import json
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.record.folder import read_folder
from tests.helpers import merged_gaps, torchrun_checks

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_tf_ep.py"


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    pytest.importorskip("transformers.distributed")  # transformers 5's own parallel plans
    out = tmp_path_factory.mktemp("tf_ep") / "reference"
    api.record([sys.executable, str(SCRIPT)], out, fingerprint_every=1)
    return out


def test_transformers_ep_2_matches_one_process_merged_by_placement(reference, tmp_path):
    cand = tmp_path / "candidate"
    checks = torchrun_checks(SCRIPT, reference, cand)
    for name in ("updates", "lr", "data", "weights", "params", "grad-norm", "ranks (candidate)",
                 "replicas (candidate)", "experts (candidate)", "gradient (candidate)"):
        assert checks[name].status == "pass", (name, checks[name].detail)
    layouts = [json.loads((cand / f"rank{r}.json").read_text())["optimizers"][0]["layout"]
               for r in (0, 1)]
    assert [f["feeds"] for f in layouts] == [True, False]  # the TP group shares its batch
    experts = layouts[0]["names"].index("model.layers.0.mlp.experts.gate_up_proj")
    assert layouts[1]["tensors"][experts] == [0, "S"] and layouts[1]["tensors"][0] is None
    # the router's gradient term by term (the load-balancing loss on), rank 0's: the whole batch
    terms = [[r["router_terms"][t] for r in read_folder(f).records
              for t in ("routing", "auxiliary")] for f in (reference, cand)]
    assert all(v > 0 for v in terms[0]) and terms[1] == pytest.approx(terms[0], rel=1e-12)
    norms, sums, dots = merged_gaps(reference, cand)
    groups = checks["experts (candidate)"].max_abs_diff
    print(f"transformers ep 2 vs 1 process: merged gradient norm relative {norms:.3g}, "
          f"parameters |Δsum|/max|p| {sums:.3g}, the groups' norms relative {groups:.3g}, "
          f"per element |Δdot|/‖g‖ {dots:.3g}")
    assert norms <= 1e-12 and sums <= 1e-12 and dots <= 1e-12 and groups <= 1e-12


def test_every_rank_sending_every_token_doubles_the_experts_at_update_0_named(
        reference, tmp_path):
    checks = torchrun_checks(SCRIPT, reference, tmp_path / "bug", "--bug", "ep-double")
    experts = checks["experts (candidate)"]
    assert experts.status == "fail" and experts.first_divergence == 0
    assert experts.detail == ("at update 0: the experts' gradients 2× the reference's (expert "
                              "parallel: counted on each of the 2 ranks)"), experts.detail
    assert checks["grad-norm"].status == "fail" and checks["grad-norm"].first_divergence == 0
    for name in ("lr", "data", "weights", "replicas (candidate)"):
        assert checks[name].status == "pass", (name, checks[name].detail)
