"""The checks a trace runs, and how fast or slow a candidate's schedule runs."""

from __future__ import annotations

import numpy as np

from lrcheck.checks import schedule_pace


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
