"""Two logs at different intervals, or whose losses mean different things (``logs.windows``),
and the ``evidence`` of two logs, on logs built here: a Trainer's window mean against a log of
every update is compared on the same windows; Lightning's micro-batch loss against an
update's is a warning that says so; two logs without an LR prove nothing of it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from lrcheck.checks.logs import log_checks
from lrcheck.logs.model import LogFormat, LoggedRun, LossIs, Quantity, Series, StepMeaning
from lrcheck.logs.pairs import log_trace
from lrcheck.spec import Tolerances

LR, LOSS = Quantity.LR, Quantity.LOSS
N = 30
LOSSES = 1.0 / np.arange(1, N + 1) + 0.01 * np.sin(np.arange(N))


def run(ks, loss=None, lr=None, every=1, loss_is=LossIs.UPDATE, accum=None) -> LoggedRun:
    ks = tuple(int(k) for k in ks)
    series = {}
    if loss is not None:
        series[LOSS] = Series(LOSS, "loss", ks, tuple(float(v) for v in loss))
    if lr is not None:
        series[LR] = Series(LR, "lr", ks, tuple(float(v) for v in lr))
    return LoggedRun(Path("log"), LogFormat.TRAINER_STATE, series, StepMeaning(), (), every,
                     (), (), loss_is, accum)


def checked(ref: LoggedRun, cand: LoggedRun) -> dict:
    found = log_checks(ref, cand, (log_trace(ref), log_trace(cand)),
                       Tolerances.for_dtype("float32"))
    return {c.name: c for c in found}


def window(every: int, losses: np.ndarray = LOSSES) -> LoggedRun:
    """A Trainer's log every ``every`` updates: each window's mean, at its last update."""
    ends = np.arange(every - 1, N, every)
    means = [losses[k - every + 1:k + 1].mean() for k in ends]
    return run(ends, means, every=every, loss_is=LossIs.WINDOW)


def test_a_window_mean_against_every_update_is_compared_on_the_windows():
    every_update, every_ten = run(range(N), LOSSES), window(10)
    loss = checked(every_update, every_ten)["loss"]
    assert loss.status.value == "pass", loss.detail
    assert loss.detail.startswith("the reference's loss averaged over the candidate's logging "
                                  "windows (10 updates")
    assert checked(every_ten, every_update)["loss"].status.value == "pass"
    changed = LOSSES.copy()
    changed[15:] *= 1.1  # a difference that entered at update 15: in the window ending at 19
    loss = checked(every_update, window(10, changed))["loss"]
    assert (loss.status.value, loss.first_divergence) == ("fail", 19)


def test_windows_of_other_lengths_or_updates_not_logged_are_a_limit():
    loss = checked(window(5), window(10))["loss"]
    assert loss.status.value == "skip" and "windows, of 5 and 10 updates" in loss.detail
    sparse = run(range(0, N, 2), LOSSES[::2], every=2)
    loss = checked(sparse, window(10))["loss"]
    assert loss.status.value == "skip" and "did not log every update of any one" in loss.detail


def test_a_micro_batchs_loss_against_an_updates_is_a_warning_that_says_so():
    lightning = run(range(N), LOSSES * 1.5, loss_is=LossIs.MICRO_BATCH, accum=2)
    loss = checked(run(range(N), LOSSES), lightning)["loss"]
    assert loss.status.value == "warn"
    assert loss.detail.startswith("the logged losses mean different things")
    assert "the candidate's: the last of 2 micro-batches" in loss.detail
    same = replace(lightning, accum=2)
    assert checked(same, lightning)["loss"].status.value == "pass"


def test_evidence_without_an_lr_logged():
    found = checked(run(range(N), LOSSES), run(range(N), LOSSES))["evidence"]
    assert found.status.value == "pass" and "neither run logged its LR" in found.detail
    flat = run(range(N), np.ones(N))
    found = checked(flat, flat)["evidence"]
    assert found.status.value == "warn" and "that either trained is not shown" in found.detail
    zero = run(range(N), LOSSES, lr=np.zeros(N))
    assert checked(zero, zero)["evidence"].status.value == "fail"
    one = run([0], [1.0], lr=[0.1])
    assert checked(one, one)["evidence"].status.value == "fail"


def test_steps_that_run_a_whole_number_of_times_as_far_are_said_to_be_micro_batches():
    per_micro = run(range(2 * N), np.repeat(LOSSES, 2))
    updates = checked(run(range(N), LOSSES), per_micro)["updates"]
    assert updates.status.value == "fail"
    assert updates.detail.endswith("the candidate's steps run 2× as far: they may count "
                                   "micro-batches or samples (assumed: steps count updates "
                                   "from 0); if so, say it: --log-steps micro-batches:2")
