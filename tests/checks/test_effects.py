"""Causes exactly, effects against the training's own noise: the weights check, the params and
loss checks in lockstep, against a twin reference's drift, and (recorded runs) jump or drift —
on hand-made traces."""

import numpy as np
import pytest

from lrcheck.checks import (
    DECORRELATED,
    FLOOR_FACTOR,
    JUMP_FACTOR,
    check_loss,
    check_metrics,
    check_params,
    check_weights,
    needs_floor,
    recorded_checks,
    run_checks,
)
from lrcheck.plan.windows import MicroBatch, by_items
from lrcheck.spec import RunSpec, Tolerances
from lrcheck.trace import EpochMetrics, RunTrace, UpdateRecord

N = 60


def _trace(params, losses=None, windows=None, lockstep=None, spec=None):
    n = len(params)
    losses = np.ones(n) if losses is None else losses
    updates = [UpdateRecord(k, (0.1,), float(losses[k]), 32 * (k + 1), k, 0) for k in range(n)]
    return RunTrace(spec or RunSpec(bs=32, accum=1), updates, [], np.asarray(params), n, {},
                    windows=windows, lockstep=lockstep)


def _drifting(gap_at_0, rate, jump_at=None, jump=0.0):
    """Parameters of one tensor of 1.0s whose gap to the reference grows from ``gap_at_0`` by
    ``rate`` per update (drift), plus ``jump`` from update ``jump_at`` on."""
    gap = gap_at_0 * rate ** np.arange(N)
    if jump_at is not None:
        gap[jump_at:] += jump
    return 1.0 + gap[:, None] * np.ones((N, 3))


REF = np.ones((N, 3))


def test_drift_within_the_twin_references_own_passes_and_says_it_is_drift():
    ref, twin = _trace(REF), _trace(_drifting(1e-16, 1.6))
    cand = _trace(_drifting(3e-16, 1.6))  # 3x the twin's: drift, far beyond 1e-9 by the end
    result = check_params(ref, cand, 1e-9, None, twin)
    assert result.status == "pass", result.detail
    assert "numerical drift" in result.detail and "twin reference" in result.detail
    # The same gap without a floor is a failure of the fixed tolerance.
    assert check_params(ref, cand, 1e-9, None).status == "fail"


def test_a_jump_inside_a_drifting_run_fails_at_its_update():
    ref, twin = _trace(REF), _trace(_drifting(1e-16, 1.6))
    cand = _trace(_drifting(3e-16, 1.6, jump_at=25, jump=1e-7))
    result = check_params(ref, cand, 1e-9, None, twin)
    assert result.status == "fail" and result.first_divergence == 25, result.detail
    assert f"the most allowed is {FLOOR_FACTOR:g}×" in result.detail


def test_in_lockstep_the_tolerance_applies_to_each_update_and_the_detail_says_so():
    ref = _trace(REF)
    cand = _trace(1.0 + 1e-16 * np.ones((N, 3)), lockstep=N - 1)
    result = check_params(ref, cand, 1e-12, None)
    assert result.status == "pass" and result.detail.startswith("lockstep (")
    bad = _trace(_drifting(1e-16, 1.0, jump_at=7, jump=1e-9), lockstep=N - 1)
    result = check_params(ref, bad, 1e-12, None)
    assert result.status == "fail" and result.first_divergence == 7


def test_loss_against_the_floor_too():
    losses = np.linspace(2.0, 0.1, N)
    ref = _trace(REF, losses)
    twin = _trace(REF, losses * (1 + 1e-15 * 1.5 ** np.arange(N)))
    cand = _trace(REF, losses * (1 + 2e-15 * 1.5 ** np.arange(N)))
    assert check_loss(ref, cand, 1e-9, None, twin).status == "pass"
    jumped = losses * (1 + 2e-15 * 1.5 ** np.arange(N))
    jumped[30:] *= 1 + 1e-3
    assert check_loss(ref, _trace(REF, jumped), 1e-9, None, twin).first_divergence == 30


def _windows(weights):
    """One micro-batch of samples 0..3 per update with these per-sample weights."""
    return [(MicroBatch(0, np.arange(4), None, np.asarray(w, dtype=np.float64)),)
            for w in weights]


def test_weights_equal_pass_and_the_first_differing_update_names_the_sample():
    quarter = [[0.25] * 4] * 5
    ref = _trace(REF[:5], windows=_windows(quarter))
    assert check_weights(ref, _trace(REF[:5], windows=_windows(quarter))).status == "pass"
    skewed = [*quarter[:3], [0.25, 0.25, 0.3, 0.2], quarter[4]]
    result = check_weights(ref, _trace(REF[:5], windows=_windows(skewed)))
    assert result.status == "fail" and result.first_divergence == 3
    assert "sample 2" in result.detail and "0.3" in result.detail


def test_weights_summing_to_another_total_say_whether_that_is_a_scale_alone():
    """A loss not divided by the accumulation steps is every weight × 4; a token mean per
    micro-batch not divided either is × 4 in sum but shared out differently (transformers'
    compute_loss returning outputs.loss)."""
    ref = _trace(REF[:1], windows=_windows([[0.1, 0.2, 0.3, 0.4]]))
    undivided = check_weights(ref, _trace(REF[:1], windows=_windows([[0.4, 0.8, 1.2, 1.6]])))
    assert undivided.detail.endswith(
        "sum to 4 in the candidate, 1 in the reference (4×): its loss is scaled as a whole, as "
        "a loss not divided by the accumulation steps (or divided twice) is"), undivided.detail
    reshared = check_weights(ref, _trace(REF[:1], windows=_windows([[1.0, 1.0, 1.0, 1.0]])))
    assert reshared.status == "fail" and reshared.first_divergence == 0
    assert reshared.detail.endswith(
        "sum to 4 in the candidate, 1 in the reference (4×), and shared out differently: not "
        "a scale of the whole loss alone"), reshared.detail


def test_weights_compare_per_sample_over_differently_cut_micro_batches():
    """The reference's one batch of 4 against two micro-batches of 2, by sample id."""
    ref = _trace(REF[:1], windows=_windows([[0.25] * 4]))
    split = [(MicroBatch(0, np.array([2, 0]), None, np.array([0.25, 0.25])),
              MicroBatch(0, np.array([3, 1]), None, np.array([0.25, 0.25 + 1e-17])))]
    assert check_weights(ref, _trace(REF[:1], windows=split)).status == "pass"


def test_weights_tolerance_follows_the_dtype():
    """float32 measures weights to ~1e-7; float64 must agree to 1e-12."""
    ref64 = _trace(REF[:1], windows=_windows([[0.25] * 4]))
    near = _windows([[0.25 * (1 + 1e-8)] * 4])
    assert check_weights(ref64, _trace(REF[:1], windows=near)).status == "fail"
    f32 = RunSpec(bs=32, accum=1, dtype="float32")
    ref32 = _trace(REF[:1], windows=_windows([[0.25] * 4]), spec=f32)
    assert check_weights(ref32, _trace(REF[:1], windows=near, spec=f32)).status == "pass"


def test_an_effect_after_an_earlier_cause_is_put_down_to_that_cause():
    ref = _trace(REF[:5], windows=_windows([[0.25] * 4] * 5))
    bad = [[0.25] * 4] * 2 + [[0.4, 0.2, 0.2, 0.2]] * 3
    moved = np.ones((5, 3))
    moved[4] += 1e-3  # the effect shows only at update 4
    checks = {c.name: c for c in run_checks(ref, _trace(moved, windows=_windows(bad)),
                                            Tolerances())}
    assert checks["weights"].first_divergence == 2
    assert checks["params"].first_divergence == 4
    assert "already parted at update 2, where weights first differs" in checks["params"].detail


def _recorded(losses):
    updates = [UpdateRecord(k, (0.1,), float(v), 8 * (k + 1), None, None)
               for k, v in enumerate(losses)]
    return RunTrace(None, updates, [], np.empty((0, 0)), len(updates), None, source="f.jsonl")


@pytest.mark.parametrize("rate", [1.3, 2.0])
def test_recorded_runs_that_drift_smoothly_warn_and_say_it_is_drift(rate):
    losses = np.linspace(2.0, 0.5, N)
    drift = losses * (1 + np.minimum(1e-7 * rate ** np.arange(N), 0.1))
    loss = {c.name: c for c in recorded_checks(_recorded(losses), _recorded(drift),
                                               Tolerances.for_dtype("float32"))}["loss"]
    assert loss.status == "warn" and "numerical drift" in loss.detail, loss.detail


def test_recorded_runs_whose_gap_jumps_fail_where_it_jumped():
    losses = np.linspace(2.0, 0.5, N)
    jumped = losses * (1 + 1e-9)
    jumped[17:] *= 1 + JUMP_FACTOR * 1e-3
    loss = {c.name: c for c in recorded_checks(_recorded(losses), _recorded(jumped),
                                               Tolerances.for_dtype("float32"))}["loss"]
    assert loss.status == "fail" and loss.first_divergence == 17
    assert "jumped at update 17" in loss.detail


def test_the_twin_is_needed_only_where_an_effect_beyond_tolerance_has_no_earlier_cause():
    quarter = _windows([[0.25] * 4] * N)
    ref = _trace(REF, windows=quarter)
    tol = Tolerances()
    assert not needs_floor(ref, _trace(1.0 + 1e-12 * np.ones((N, 3)), windows=quarter), tol)
    drifting = _drifting(1e-16, 1.6)  # beyond 1e-9 from about update 44 on: drift to judge
    assert needs_floor(_trace(REF, windows=quarter), _trace(drifting, windows=quarter), tol)
    early = [[0.25] * 4] * 3 + [[0.4, 0.2, 0.2, 0.2]] * (N - 3)  # weights differ at 3
    assert not needs_floor(ref, _trace(drifting, windows=_windows(early)), tol)


def test_a_framework_mean_s_weight_is_shared_by_its_samples_tokens():
    """by_items: a micro-batch mean weighted 1/2 over samples of 3 and 1 tokens gives them 3/8
    and 1/8; the measured ones stay as they are."""
    items = np.array([3, 1, 2, 2])
    window = (MicroBatch(0, np.array([0, 1]), 0.5), MicroBatch(0, np.array([2, 3]), 0.5,
                                                               np.array([0.2, 0.3])))
    (out,) = by_items([window], items)
    np.testing.assert_allclose(out[0].sample_weights, [0.375, 0.125])
    np.testing.assert_array_equal(out[1].sample_weights, [0.2, 0.3])


def test_once_the_twin_has_decorrelated_later_gaps_are_not_judged_and_say_so():
    ref = _trace(REF)
    twin = _trace(1.0 + np.minimum(1e-16 * 2.5 ** np.arange(N), 0.5)[:, None] * np.ones((N, 3)))
    cand = _trace(1.0 + np.minimum(3e-16 * 2.5 ** np.arange(N), 0.9)[:, None] * np.ones((N, 3)))
    result = check_params(ref, cand, 1e-9, None, twin)
    first = int(np.argmax(1e-16 * 2.5 ** np.arange(N) >= DECORRELATED))
    assert result.status == "warn" and result.first_divergence == first, result.detail
    assert "decorrelated" in result.detail


def test_metrics_against_the_twin_reference_s_own_gap():
    def with_metrics(trace, acc):
        trace.epochs = [EpochMetrics(0, N - 1, acc, acc)]
        return trace

    ref = with_metrics(_trace(REF), 0.90)
    near_twin = with_metrics(_trace(_drifting(1e-16, 1.6)), 0.89)
    cand = with_metrics(_trace(_drifting(3e-16, 1.6)), 0.87)  # 0.03 off: beyond 0.01
    assert check_metrics(ref, cand, 0.01, None).status == "fail"
    assert check_metrics(ref, cand, 0.01, None, near_twin).status == "pass"  # 3x the twin's
    same_twin = with_metrics(_trace(_drifting(1e-16, 1.6)), 0.90)
    assert check_metrics(ref, cand, 0.01, None, same_twin).status == "fail"  # twin's params close
    far_twin = with_metrics(_trace(np.full((N, 3), 1.5)), 0.90)  # its parameters 50 % apart
    result = check_metrics(ref, cand, 0.01, None, far_twin)
    assert result.status == "warn" and "decorrelated" in result.detail


def test_an_effect_without_a_twin_because_a_cause_explains_it_says_so_not_fast():
    """A framework's run cannot run in lockstep; where a cause (here the weights, at update 2)
    already differs at or before the effect, no twin is trained: the detail says that, not
    '--fast, or a framework that orders its data itself'."""
    spec = RunSpec(framework="transformers", bs=32, accum=1)
    ref = _trace(REF[:5], windows=_windows([[0.25] * 4] * 5), spec=spec)
    bad = [[0.25] * 4] * 2 + [[0.4, 0.2, 0.2, 0.2]] * 3
    moved = np.ones((5, 3))
    moved[2:] += 1e-3  # the effect from update 2 on, where the weights part
    cand = _trace(moved, windows=_windows(bad), spec=spec)
    assert not needs_floor(ref, cand, Tolerances())  # so runner.pair trains no twin
    params = {c.name: c for c in run_checks(ref, cand, Tolerances())}["params"]
    print(params.detail)
    assert params.status == "fail" and params.first_divergence == 2
    assert "--fast" not in params.detail and "orders its data" not in params.detail
    assert ("no noise floor measured, none being needed: weights already differs at update 2"
            in params.detail)
    # With no cause to explain it, the twin was left out by --fast (or a framework's own order).
    alone = {c.name: c for c in run_checks(ref, _trace(moved, windows=ref.windows, spec=spec),
                                           Tolerances())}["params"]
    assert "no noise floor measured (--fast, or a framework" in alone.detail


def test_a_drift_where_the_twin_had_none_says_so_not_a_ratio_against_zero():
    ref, twin = _trace(REF), _trace(REF)  # the twin did not drift at all
    cand = _trace(_drifting(1e-16, 1.6, jump_at=25, jump=1e-7))
    result = check_params(ref, cand, 1e-9, None, twin)
    assert result.status == "fail" and result.first_divergence == 25, result.detail
    assert "drift where the twin reference had none" in result.detail
    assert "e+" not in result.detail.split("there")[0], result.detail
