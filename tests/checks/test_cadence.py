"""``checks.cadence`` on hand-made records: the calls per update of two runs compared update by
update, the candidate's micro-batches told and not judged; and ``checks.commands.check_skips``
(``scaler-skips``), the GradScaler's skips before each update."""

import pytest

from lrcheck.checks.cadence import check_cadence
from lrcheck.checks.recorded import align
from lrcheck.checks.status import FAIL, PASS, SKIP
from lrcheck.trace import RunTrace


def _trace(updates=4, micro=1, *, zero_each=False, clip=1, ema=1, max_norm=1.0, step=None,
           skips=None):
    """Records of ``updates`` updates of ``micro`` micro-batches each, zero_grad after each step
    (or before every micro-batch), ``clip`` clip_grad_norm_ calls and ``ema`` EMA updates per
    update (the EMA after the step: counted from update 1)."""
    records = []
    for k in range(updates):
        r = {"step": k, "samples_seen": 32 * (k + 1), "lr": [0.1], "loss": None,
             "scheduler_steps": 1, "skipped": 0 if skips is None else skips[k],
             "backward": micro, "reached": 1 if zero_each else micro,
             "zero_grad": micro + (k > 0) if zero_each else int(k > 0),
             "clip_grad_norm": clip, "clip_grad_value": 0, "scaler_update": 0,
             "ema_update": ema if k else 0, "opt_step": float(k + 1 if step is None else step[k])}
        if clip:
            r["max_norm"] = max_norm
            r["clip_norm"] = 2.0
        records.append(r)
    return RunTrace.from_records(records, "test")


def _check(ref, cand, lockstep=False):
    return check_cadence(ref, cand, align(ref, cand), lockstep)


def test_a_correct_accumulation_passes_its_micro_batches_told():
    found = _check(_trace(), _trace(micro=4))
    assert found.status == PASS, found.detail
    assert "backward ran 4 times per update in the candidate against 1" in found.detail
    assert "clip_grad_norm_ as often (1 per update)" in found.detail


def test_clipping_after_every_backward_fails_at_update_0():
    found = _check(_trace(), _trace(micro=4, clip=4))
    assert (found.status, found.first_divergence) == (FAIL, 0)
    assert found.detail.startswith(
        "clip_grad_norm_ ran 4 times per update in the candidate against 1 in the reference "
        "(from update 0): clipping after every backward, not once per update")


def test_zero_grad_before_every_micro_batch_fails_naming_it():
    found = _check(_trace(), _trace(micro=4, zero_each=True))
    assert (found.status, found.first_divergence) == (FAIL, 0)
    assert found.detail.startswith("zero_grad ran before every micro-batch of the candidate: "
                                   "only the last of 4 micro-batches reached the update "
                                   "(from update 0)")


def test_a_missing_zero_grad_lets_the_previous_updates_gradients_in():
    cand = _trace(micro=2)
    for u in range(2, 4):  # the gradients were never zeroed after update 1
        cand.cadence[u]["reached"] = 2 * (u + 1) - 2
        cand.cadence[u]["zero_grad"] = 0
    found = _check(_trace(), cand)
    assert (found.status, found.first_divergence) == (FAIL, 2)
    assert found.detail.startswith("zero_grad did not run before the candidate's update 2: 2 "
                                   "backward passes before its previous update reached it too, "
                                   "beside its own 2 (from update 2)")


def test_an_ema_per_micro_batch_fails_from_update_1_only_where_it_differs():
    found = _check(_trace(), _trace(micro=4, ema=4))
    assert (found.status, found.first_divergence) == (FAIL, 1)
    assert found.detail.startswith(
        "the EMA (AveragedModel.update_parameters) was updated 4 times per update in the "
        "candidate against 1 in the reference (from update 1): on every micro-batch")


def test_another_max_norm_and_a_reset_step_counter_are_named():
    found = _check(_trace(), _trace(micro=2, max_norm=0.5))
    assert found.status == FAIL and "max_norm is 0.5 in the candidate against 1" in found.detail
    found = _check(_trace(), _trace(micro=2, step=[1, 2, 1, 2]))
    assert (found.status, found.first_divergence) == (FAIL, 2)
    assert "step counter is 1 after update 2 in the candidate, 3 in the reference" in found.detail
    assert "(from update 2; its state was not the reference's" in found.detail
    lockstep = _check(_trace(), _trace(micro=2, step=[1, 2, 4, 4]), lockstep=True)
    assert "at 1 of 4 updates, first update 2" in lockstep.detail
    assert "the candidate's own step moved it by 2 instead of 1" in lockstep.detail


def test_all_that_differs_at_the_first_update_is_named():
    found = _check(_trace(), _trace(micro=4, clip=4, zero_each=True))
    assert found.first_divergence == 0
    assert "zero_grad ran before every micro-batch" in found.detail
    assert "clip_grad_norm_ ran 4 times" in found.detail


def test_a_window_with_a_skipped_step_is_counted_per_step():
    skips = [0, 1, 0, 0]
    ref, cand = _trace(skips=skips), _trace(micro=4, skips=skips)
    for trace in (ref, cand):
        trace.cadence[1]["clip_grad_norm"] = 2  # the skipped step clipped too
    assert _check(ref, cand).status == PASS


@pytest.mark.parametrize("which", ["reference", "candidate"])
def test_one_run_without_a_cadence_is_not_recorded(which):
    plain = RunTrace.from_records([{"step": 0, "samples_seen": 1, "lr": [0.1], "loss": None}],
                                  "plain")
    ref, cand = (plain, _trace(1)) if which == "reference" else (_trace(1), plain)
    found = _check(ref, cand)
    assert found.status == SKIP and "only the" in found.detail
    assert _check(plain, plain) is None


def test_the_ema_is_named_by_its_call_and_later_counts_are_told():
    """An EMA updated after each step counts from update 1 on: against one updated on every
    micro-batch, the counts of update 0 and those after it are both told."""
    ref, cand = _trace(), _trace(micro=4, ema=4)
    for r in cand.cadence:
        r["ema_update"] = 4  # per micro-batch: from update 0
    found = check_cadence(ref, cand, align(ref, cand), False, "timm's ModelEmaV3.update")
    assert (found.status, found.first_divergence) == (FAIL, 0)
    assert found.detail.startswith(
        "the EMA (timm's ModelEmaV3.update) was updated 4 times per update in the candidate "
        "against 0 in the reference (from update 0), 4 against 1 from update 1: on every "
        "micro-batch, not once per update")


def test_scaler_skips_compares_the_skips_before_each_update_not_lrcheck_s_skipped_steps():
    from lrcheck.checks.commands import check_skips

    same = check_skips(_trace(skips=[0, 1, 0, 0]), _trace(skips=[0, 1, 0, 0]),
                       align(_trace(), _trace()))
    assert (same.name, same.status) == ("scaler-skips", PASS), same.detail
    apart = check_skips(_trace(skips=[0, 1, 0, 0]), _trace(skips=[0, 0, 2, 0]),
                        align(_trace(), _trace()))
    assert (apart.status, apart.first_divergence) == (FAIL, 1), apart.detail
    none = check_skips(_trace(), _trace(), align(_trace(), _trace()))
    assert (none.name, none.status) == ("scaler-skips", SKIP)
