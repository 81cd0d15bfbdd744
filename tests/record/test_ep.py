"""Expert parallel recorded unmodified: a user's hand-written EP=2 training of a tiny mixture
of experts (tests/fixtures/user_ep.py: each rank its 2 of the 4 experts, the router and the
rest replicated, gloo), its ranks merged by parameter name (``record.experts``), against one
process holding the 4 experts with the same effective batch, free-running; the experts'
gradients not divided by the ranks, and the auxiliary loss divided by the ranks once more (the
router's gradient from that term measured on its own: ``record.router``), each named by
``experts (candidate)`` at update 0. Slow: each run is a fresh process group; the reference is
recorded once for the module."""

import json
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.record.folder import read_folder
from tests.helpers import merged_gaps, torchrun_checks

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_ep.py"
PY = sys.executable


def _checks(reference, out, *args):
    """The checks of EP = 2 (``user_ep.py`` with ``args``), recorded into ``out``, against the
    reference."""
    return torchrun_checks(SCRIPT, reference, out, *args)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("ep") / "reference"
    api.record([PY, str(SCRIPT)], out, fingerprint_every=1)
    return out


def test_ep_2_matches_one_process_holding_every_expert_merged_by_name(reference, tmp_path):
    cand = tmp_path / "candidate"
    checks = _checks(reference, cand)
    for name in ("updates", "lr", "data", "params", "grad-norm", "ranks (candidate)",
                 "replicas (candidate)", "experts (candidate)", "gradient (candidate)"):
        assert checks[name].status == "pass", (name, checks[name].detail)
    names = [json.loads((cand / f"rank{r}.json").read_text())["optimizers"][0]["layout"]
             ["names"] for r in (0, 1)]
    assert "moe.experts.2.w1.weight" in names[1] and "moe.experts.2.w1.weight" not in names[0]
    # the router's gradient term by term, the ranks' merged, as one process's
    terms = [[r["router_terms"][t] for r in read_folder(f).records
              for t in ("routing", "auxiliary")] for f in (reference, cand)]
    assert all(v > 0 for v in terms[0]) and terms[1] == pytest.approx(terms[0], rel=1e-12)
    norms, sums, dots = merged_gaps(reference, cand)
    groups = checks["experts (candidate)"].max_abs_diff
    print(f"ep 2 vs 1 process: merged gradient norm relative {norms:.3g}, parameters "
          f"|Δsum|/max|p| {sums:.3g}, the groups' norms relative {groups:.3g}, per element "
          f"|Δdot|/‖g‖ {dots:.3g}")
    assert norms <= 1e-12 and sums <= 1e-12 and dots <= 1e-12


def test_the_experts_gradients_summed_over_the_ranks_fail_at_update_0_named(reference, tmp_path):
    checks = _checks(reference, tmp_path / "bug", "--bug", "ep-double")
    experts = checks["experts (candidate)"]
    assert experts.status == "fail" and experts.first_divergence == 0
    assert experts.detail == ("at update 0: the experts' gradients 2× the reference's (expert "
                              "parallel: counted on each of the 2 ranks)"), experts.detail
    assert checks["grad-norm"].status == "fail" and checks["grad-norm"].first_divergence == 0
    assert checks["lr"].status == "pass" and checks["data"].status == "pass"


def test_the_auxiliary_loss_divided_by_the_ranks_again_is_named_apart_at_update_0(
        reference, tmp_path):
    checks = _checks(reference, tmp_path / "aux", "--bug", "aux-dp")
    experts = checks["experts (candidate)"]
    assert experts.status == "fail" and experts.first_divergence == 0
    assert ("the router's gradient from the auxiliary term (the router's scores read besides "
            "the top-k: the load-balancing loss) scaled by 1/2 (divided by the 2 data-parallel "
            "ranks once more: Megatron-LM PR #3769)") in experts.detail, experts.detail
    assert "routing term" not in experts.detail and "experts'" not in experts.detail
    assert checks["lr"].status == "pass" and checks["data"].status == "pass"
