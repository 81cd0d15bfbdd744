"""``checks.continuation``: each later process of a rank in one command judged where it joined
the timeline: a resume carries on, a new training is a stage of its own."""

from dataclasses import replace

import numpy as np
import pytest

from lrcheck.checks.continuation import check_continuation, is_resume, lockstep_weights
from lrcheck.plan.windows import MicroBatch
from lrcheck.stepwise import Boundary

END = {"opt_step": 12.0, "sched_epoch": 12, "fingerprint": [1.0, 2.0]}  # the first process's end
FRESH = {"opt_step": 0.0, "sched_epoch": 0, "fingerprint": [3.0, 4.0]}  # a new model, optimizer


def _at(**start):
    return Boundary(12, 4242, 1, END, {**END, **start})


def test_a_resume_that_carried_everything_passes_and_says_what_carried():
    found = check_continuation("candidate", [_at()])
    assert found is not None and found.status == "pass"
    assert found.detail == (
        "rank 0's 2 processes joined into one timeline; at update 12 the second process (pid "
        "4242) resumed: the weights, the optimizer's state (step counter 12), the schedule "
        "(step 12) carried")


@pytest.mark.parametrize(("start", "words"), [
    ({"sched_epoch": 0}, "the second process (pid 4242) restarted the schedule at update 12: "
                         "its step counter was 0, the first process's ended at 12"),
    ({"sched_epoch": 5}, "set the schedule back at update 12: its step counter was 5"),
    ({"opt_step": 0.0}, "the second process (pid 4242) lost the optimizer's state at update 12: "
                        "its step counter was 0 (a fresh optimizer, or its state_dict not "
                        "loaded), the first process's ended at 12"),
    ({"fingerprint": [9.0, 2.0]}, "did not start update 12 from the weights the first process "
                                  "ended with")])
def test_a_resume_that_did_not_carry_one_thing_fails_at_the_first_update_after_it(start, words):
    found = check_continuation("candidate", [_at(**start)])
    assert found is not None and found.status == "fail" and found.first_divergence == 12
    assert words in found.detail
    assert found.detail.count("pid 4242") == 1  # only what was not carried is named


def test_the_resume_command_lrcheck_started_is_judged_as_a_resume_whatever_it_carried():
    """``lrcheck run --interrupt-at N --resume CMD``: CMD's processes are resumes by
    definition; one that carried nothing fails, naming what it lost, where another later
    process would pass as a new training."""
    boundary = Boundary(12, 7, 1, END, {**FRESH, "resumed": True})
    assert is_resume(boundary)
    found = check_continuation("candidate", [boundary])
    assert found is not None and found.status == "fail" and found.first_divergence == 12
    assert "restarted the schedule at update 12" in found.detail
    assert "lost the optimizer's state" in found.detail and "new training" not in found.detail


def test_a_fresh_optimizer_and_schedule_is_a_new_training_not_a_failed_resume():
    boundary = Boundary(12, 7, 1, END, FRESH)
    assert not is_resume(boundary)
    found = check_continuation("candidate", [boundary])
    assert found is not None and found.status == "pass"
    assert "at update 12 a new training began (the second process, pid 7" in found.detail
    # the same weights loaded (a fine-tuning of the first stage's model) is still a new stage
    assert not is_resume(Boundary(12, 7, 1, END, {**FRESH, "fingerprint": END["fingerprint"]}))


def test_without_optimizer_state_or_scheduler_the_weights_tell_a_resume():
    for plain in ({"opt_step": None, "sched_epoch": None, "fingerprint": [1.0, 2.0]},
                  {"opt_step": 0.0, "sched_epoch": None, "fingerprint": [1.0, 2.0]}):  # SGD
        assert is_resume(Boundary(5, 1, 1, plain, plain))
        assert not is_resume(Boundary(5, 1, 1, plain, {**plain, "fingerprint": [0.0, 2.0]}))
    sgd = {"opt_step": 0.0, "sched_epoch": 4, "fingerprint": [1.0, 2.0]}  # no step counter
    assert not is_resume(Boundary(4, 1, 1, sgd, {**sgd, "sched_epoch": 0}))


def test_a_later_process_of_a_lockstep_candidate_is_said_to_run_free():
    found = check_continuation("candidate", [Boundary(12, 1, 1, END, END, lockstep=True)])
    assert found is not None and "from update 12 the candidate ran free" in found.detail


def test_in_lockstep_the_weights_a_resume_began_with_are_held_to_the_references():
    # The first process's updates started from the reference's state, which lockstep loaded
    # into it after each update: its checkpoint of update 11 holds the reference's weights
    # after update 11, bit for bit (listed here in another order of the tensors).
    blind = {**END, "fingerprint": None}  # in lockstep its own fingerprint is not the weights
    reference = [{"fingerprint": None}] * 11 + [{"fingerprint": [5.0, 6.0, 1.0, 2.0]}]
    loaded = Boundary(12, 7, 1, blind, {**END, "fingerprint": [1.0, 2.0, 5.0, 6.0]},
                      lockstep=True)
    (carried,) = lockstep_weights([loaded], reference, 11, True)
    ok = check_continuation("candidate", [carried])
    assert ok.status == "pass" and "resumed: the weights, the optimizer's state" in ok.detail
    fresh = replace(loaded, after={**END, "fingerprint": [0.5, 2.0, 5.0, 6.0]})
    (lost,) = lockstep_weights([fresh], reference, 11, True)
    failed = check_continuation("candidate", [lost])
    assert failed.status == "fail" and failed.first_divergence == 12
    assert ("did not start update 12 from the weights the first process ended with (the "
            "model's state_dict not loaded") in failed.detail
    # Not where lockstep stopped before the resume, nor for parameters a load may round.
    assert lockstep_weights([fresh], reference, 8, True) == (fresh,)
    assert lockstep_weights([fresh], reference, 11, False) == (fresh,)

def test_one_process_per_rank_is_not_judged():
    assert check_continuation("reference", []) is None


def test_a_gradscaler_whose_scale_was_not_carried_fails_at_the_first_resumed_update():
    scaled = {**END, "scale": 1024.0}
    found = check_continuation("candidate", [Boundary(12, 7, 1, scaled, {**scaled,
                                                                          "scale": 65536.0})])
    assert found.status == "fail" and found.first_divergence == 12
    assert ("the second process (pid 7) started update 12 with the GradScaler's loss scale at "
            "65536 (its state_dict not loaded: a fresh scaler), the first process's ended at "
            "1024") in found.detail
    ok = check_continuation("candidate", [Boundary(12, 7, 1, scaled, scaled)])
    assert ok.status == "pass" and "the GradScaler's loss scale (1024.0) carried" in ok.detail


def _window(micro: int, rank_one: int = 0):
    return tuple(MicroBatch(rank, np.arange(2), None, None)
                 for rank in [0] * micro + [1] * rank_one)


def test_a_resume_with_another_accumulation_is_said_where_it_joined():
    windows = [_window(2, 2)] * 12 + [_window(4, 4)] * 4  # rank 0's micro-batches: 2, then 4
    found = check_continuation("candidate", [_at()], windows=windows)
    assert found is not None and found.status == "pass"
    assert ("at update 12 the second process (pid 4242) resumed with another accumulation: 4 "
            "micro-batches per update from update 12, 2 before it (a schedule sized for the "
            "old accumulation shows in lr): the weights") in found.detail
    short = [_window(2, 2)] * 11 + [_window(1, 1)] + [_window(2, 2)] * 4
    for same in ([_window(2, 2)] * 16, short):  # an epoch's short last window before the resume
        assert "another accumulation" not in check_continuation(
            "candidate", [_at()], windows=same).detail


def _fed(*micro):
    return tuple(MicroBatch(0, np.asarray(ids), None, None) for ids in micro)


CUT = {**END, "cut": {"update": 12, "backward": 2, "fed": [[1, 0], [2, 3]]}}  # 2 of 4 made
WINDOWS = [_fed([9])] * 12 + [_fed([0, 1], [2, 3], [4, 5], [6, 7])] * 4


def test_a_window_cut_whose_gradients_were_carried_and_fed_again_fails_named():
    twice = Boundary(12, 4242, 1, CUT, {**END, "carried_gradients": 4})
    found = check_continuation("candidate", [twice], windows=WINDOWS)
    assert found is not None and found.status == "fail" and found.first_divergence == 12
    assert found.detail.startswith(
        "update 12's window was fed twice: micro-batches 0-1 counted twice (6 of 4 backward "
        "passes): the second process (pid 4242) began with the gradients of the 2 backward "
        "passes the first process had made into it (4 tensors' .grad, carried by the "
        "checkpoint) and fed the window again from its start")


@pytest.mark.parametrize("start", [{"carried_gradients": 0}, {}])
def test_a_window_cut_and_restarted_without_its_gradients_passes(start):
    restarted = Boundary(12, 4242, 1, CUT, {**END, **start})
    assert check_continuation("candidate", [restarted], windows=WINDOWS).status == "pass"


def test_a_resume_on_another_world_size_says_it_and_fails_where_the_batch_changed_with_it():
    two_ranks = [_window(2, 2)] * 12  # 2 ranks × 2 micro-batches of 2 samples: 8 per update
    resized = Boundary(12, 4242, 1, END, END, worlds=(2, 1))
    found = check_continuation("candidate", [resized], windows=two_ranks + [_window(4)] * 4)
    assert found is not None and found.status == "pass"
    assert ("at update 12 the second process (pid 4242) resumed on 1 process (2 before it): "
            "the weights") in found.detail and "another accumulation" not in found.detail
    halved = check_continuation("candidate", [resized], windows=two_ranks + [_window(2)] * 4)
    assert halved is not None and halved.status == "fail" and halved.first_divergence == 12
    assert ("the second process (pid 4242) resumed on 1 process (2 before it) with 4 samples "
            "per update from update 12, 8 before it: the effective batch changed with the "
            "world size (the accumulation not rescaled for it)") in halved.detail
    grown = Boundary(12, 4242, 1, END, END, worlds=(1, 2))
    found = check_continuation("candidate", [grown], windows=[_window(4)] * 12 + two_ranks)
    assert found is not None and "resumed on 2 processes (1 before it)" in found.detail
