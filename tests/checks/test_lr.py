"""The checks a trace runs, and how fast or slow a candidate's schedule runs."""

from __future__ import annotations

import numpy as np

from lrcheck.checks import lr_offset, offset_text, run_checks, schedule_pace
from lrcheck.spec import RunSpec, Tolerances
from lrcheck.trace import RunTrace, UpdateRecord


def warmup_cosine(n: int, speed: float, warmup: int = 100) -> np.ndarray:
    """A warmup-then-cosine LR over ``n`` updates, run ``speed`` times as fast."""
    t = (np.arange(n) + 1) * speed - 1  # scheduler steps made when update k reads its LR
    decay = 0.5 * (1 + np.cos(np.pi * np.clip((t - warmup) / (n - warmup), 0, 1)))
    return 0.1 * np.where(t < warmup, (t + 1) / (warmup + 1), decay)


def test_pace_reads_the_warmup_where_there_is_one():
    ref = warmup_cosine(1000, 1)
    assert "≈8× too fast" in schedule_pace(ref, warmup_cosine(1000, 8))
    assert "≈4× too slow" in schedule_pace(ref, warmup_cosine(1000, 0.25))
    assert schedule_pace(ref, ref) is None


def test_pace_reads_the_decay_without_warmup():
    ref = warmup_cosine(1000, 1, warmup=0)
    text = schedule_pace(ref, warmup_cosine(1000, 2, warmup=0))
    assert "falls below" in text and "≈2× too fast" in text
    never = schedule_pace(ref, np.full(1000, 0.1))
    assert "never does" in never and "at least 2× too slow" in never
    assert schedule_pace(np.full(10, 0.1), np.full(10, 0.2)) is None  # constant: cannot tell


def shifted_cosine(n: int, shift: float, warmup: int = 20) -> np.ndarray:
    """A warmup-then-cosine LR over ``n`` updates, read ``shift`` updates later (a schedule
    stepped per micro-batch with lengths × accum reads it half an update ahead at accum 2)."""
    t = np.arange(n) + shift
    decay = 0.5 * (1 + np.cos(np.pi * np.clip((t - warmup) / (n - warmup), 0, 1)))
    return 0.1 * np.where(t < warmup, t / warmup, decay)


def test_an_offset_of_half_an_update_is_found():
    ref = shifted_cosine(225, 0)
    assert lr_offset(ref, shifted_cosine(225, 0.5)) == 0.5
    assert lr_offset(ref, shifted_cosine(225, -0.25)) == -0.25
    assert lr_offset(ref, shifted_cosine(225, 1)) == 1
    assert offset_text(0.5) == ("the candidate's LR at update k is the reference's at k + 1/2 "
                                "(interpolated between updates): its schedule runs half an "
                                "update ahead")
    assert offset_text(-0.25).endswith("k − 1/4 (interpolated between updates): its schedule "
                                       "runs 1/4 of an update behind")


def test_no_offset_for_a_schedule_running_at_another_pace_or_the_same():
    ref = warmup_cosine(1000, 1)
    assert lr_offset(ref, warmup_cosine(1000, 2)) is None
    assert lr_offset(ref, warmup_cosine(1000, 0.5)) is None
    assert lr_offset(ref, ref) is None
    spiked = ref.copy()
    spiked[500] *= 2  # one wrong update: no constant offset explains it
    assert lr_offset(ref, spiked) is None


def test_the_compare_lr_detail_names_the_offset_or_the_pace():
    def traced(lrs):
        n = len(lrs)
        updates = [UpdateRecord(k, (float(lr),), 1.0, 32 * (k + 1), k, 0)
                   for k, lr in enumerate(lrs)]
        return RunTrace(RunSpec(), updates, [], np.ones((n, 2)), n, None)

    ref = traced(shifted_cosine(225, 0))
    found = {c.name: c for c in run_checks(ref, traced(shifted_cosine(225, 0.5)), Tolerances())}
    assert found["lr"].status == "fail"
    assert found["lr"].detail.endswith("its schedule runs half an update ahead")
    fast = run_checks(traced(warmup_cosine(1000, 1)), traced(warmup_cosine(1000, 2)),
                      Tolerances())
    assert "its schedule runs ≈2× too fast" in fast[3].detail and fast[3].name == "lr"
