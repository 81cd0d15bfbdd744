"""Lockstep's bounds from the run's own arithmetic, for real (``lrcheck run``): a user's loop
under CPU bf16 autocast, float32 parameters (tests/fixtures/user_autocast.py), bs 32 against
8 × 4. The correct pair passes against bf16's bound, which the verdict says autocast set; the
same candidate with every update 1.001× fails at update 0 on the update's scale, far under
bf16's rounding of the gradient (2e-3)."""

import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_autocast.py"


def _line(*args: str) -> str:
    return shlex.join([sys.executable, str(SCRIPT), "--updates", "4", *args])


@pytest.fixture(scope="module")
def pairs(tmp_path_factory):
    """The correct candidate's and the overshooting one's checks, by name."""
    out = {}
    for name, extra in (("correct", []), ("scaled", ["--update-scale", "1.001"])):
        report = api.run_commands(_line("--bs", "32"), _line("--bs", "8", "--accum", "4", *extra),
                                  tmp_path_factory.mktemp(name) / "out")
        out[name] = checks_by_name(report)
    return out


def test_the_correct_pair_passes_against_the_bound_autocast_set(pairs):
    grads, params = pairs["correct"]["grads"], pairs["correct"]["params"]
    assert grads.status == "pass" and params.status == "pass"
    assert "(the bound for bf16 autocast on cpu)" in grads.detail
    assert "(the bound for bf16 autocast on cpu)" in params.detail
    # bf16's rounding: far beyond float32's bound of 1e-4, within bf16's of 5e-2.
    assert 1e-4 < grads.max_rel_diff < 5e-3


def test_an_update_1_001_times_too_large_fails_at_update_0_on_its_scale(pairs):
    params = pairs["scaled"]["params"]
    assert params.status == "fail" and params.first_divergence == 0
    assert "the update is 1.00" in params.detail and "× the reference's at update 0: a scale" \
        in params.detail
    assert pairs["scaled"]["grads"].status == "pass"
