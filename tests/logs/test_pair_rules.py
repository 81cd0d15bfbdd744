"""``logs.pairs``'s rules on logs built here (no file, no training): what is compared where
the runs logged different updates, param groups or quantities, and the float32 allowance."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lrcheck.checks.logs import aligned, log_checks
from lrcheck.logs.model import LogFormat, LoggedRun, Quantity, Series, StepMeaning
from lrcheck.logs.pairs import log_trace
from lrcheck.spec import FilePair, Tolerances

LR, LOSS = Quantity.LR, Quantity.LOSS


def run(lrs, steps=None, loss=None, dtype="float64", groups=(), every=1) -> LoggedRun:
    steps = tuple(range(len(lrs))) if steps is None else tuple(steps)
    series = {LR: Series(LR, "lr", steps, tuple(lrs), dtype)}
    if loss is not None:
        series[LOSS] = Series(LOSS, "loss", steps, tuple(loss), dtype)
    extra = tuple(Series(LR, f"lr-SGD/pg{n + 2}", steps, tuple(g), dtype)
                  for n, g in enumerate(groups))
    return LoggedRun(Path("log"), LogFormat.TENSORBOARD, series, StepMeaning(), (), every, (),
                     extra)


def checked(ref: LoggedRun, cand: LoggedRun) -> dict:
    found = log_checks(ref, cand, (log_trace(ref), log_trace(cand)),
                       Tolerances.for_dtype("float32"))
    return {c.name: c for c in found}


def test_only_the_updates_both_logged_are_compared():
    lrs = np.linspace(0.1, 0.0, 10)
    ref, cand = run(lrs), run(lrs[::3], steps=range(0, 10, 3), every=3)
    found = checked(ref, cand)
    assert found["updates"].status.value == "pass"
    assert "4 updates logged by both" in found["updates"].detail
    assert found["lr"].status.value == "pass"
    wrong = lrs[::3].copy()
    wrong[2] += 1e-3  # update 6
    lr = checked(ref, run(wrong, steps=range(0, 10, 3), every=3))["lr"]
    assert (lr.status.value, lr.first_divergence) == ("fail", 6)


def test_runs_of_other_lengths_fail_updates():
    found = checked(run([0.1] * 10), run([0.1] * 6))
    assert (found["updates"].status.value, found["updates"].first_divergence) == ("fail", 6)


def test_float32_gets_one_float32_step_and_float64_does_not():
    a = np.array([0.3, 0.2, 0.1])
    b = a * (1 + 2.0 ** -24)  # half a float32 step, far beyond 1e-12
    assert checked(run(a, dtype="float32"), run(b, dtype="float32"))["lr"].status.value == "pass"
    assert checked(run(a), run(b))["lr"].status.value == "fail"


def test_param_groups_and_a_quantity_only_one_run_logged():
    a = [0.2, 0.1]
    found = checked(run(a, groups=([0.02, 0.01],), loss=[1.0, 0.9]), run(a))
    assert found["lr"].status.value == "fail" and "2 param groups" in found["lr"].detail
    assert found["loss"].status.value == "skip"
    assert "only the reference logged it (loss)" in found["loss"].detail
    assert "only the reference logged loss, lr (2 param groups)" in found[
        "incomparable"].detail
    group = checked(run(a, groups=([0.02, 0.01],)), run(a, groups=([0.02, 0.011],)))["lr"]
    assert (group.first_divergence, "(param group 1)" in group.detail) == (1, True)


def test_samples_align_only_where_both_logged_them():
    lrs = [0.3, 0.2, 0.1]
    counted = run(lrs)
    counted.series[Quantity.SAMPLES] = Series(Quantity.SAMPLES, "samples", (0, 1, 2),
                                              (16.0, 32.0, 48.0))
    assert aligned(counted, run(lrs)) == ([(0, 0), (1, 1), (2, 2)], "by update index")
    assert aligned(counted, counted)[1] == "by samples seen"
    assert [u.samples_seen for u in log_trace(counted).updates] == [16, 32, 48]
    assert [u.samples_seen for u in log_trace(counted, samples=False).updates] == [1, 2, 3]


def test_a_pair_of_logs_named_by_their_folders_where_their_names_match():
    assert FilePair("runs/ref/tb", "runs/cand/tb").name == "cand-tb-vs-ref-tb"
    assert FilePair("ref.jsonl", "cand.jsonl").name == "cand-vs-ref"
    assert FilePair("run.jsonl", "run.jsonl").name == "run-vs-run"
