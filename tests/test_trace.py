"""Compact per-update storage for long traces."""

from __future__ import annotations

import numpy as np
import pytest

from lrcheck.spec import RunSpec
from lrcheck.trace import (
    METRICS,
    EpochMetrics,
    Metrics,
    RunTrace,
    UpdateColumns,
    metric_values,
    thin_indices,
)


def test_thin_indices_keeps_ends_and_the_pinned_neighbourhood():
    assert thin_indices(5, 10).tolist() == [0, 1, 2, 3, 4]
    picked = thin_indices(1_000_000, 100, pinned=[12_345])
    assert picked[0] == 0 and picked[-1] == 999_999 and len(picked) <= 105
    assert {12_343, 12_344, 12_345, 12_346, 12_347} <= set(picked.tolist())


def test_update_columns_read_like_a_list_of_records():
    cols = UpdateColumns(np.array([[0.1, 0.1], [0.2, 0.2], [0.3, 0.3]]), np.array([8, 16, 24]),
                         np.array([0, 2, 4]), np.array([0, 0, 1]))
    assert len(cols) == 3
    last = cols[-1]
    assert (last.step, last.lr, last.samples_seen, last.scheduler_steps, last.epoch) == (
        2, (0.3, 0.3), 24, 4, 1)
    assert [u.step for u in cols] == [0, 1, 2] and [u.step for u in cols[1:]] == [1, 2]
    with pytest.raises(IndexError):
        cols[3]


def test_a_run_s_metrics_are_its_last_epoch_s_and_read_by_key():
    spec = RunSpec(task="wine")
    epochs = [EpochMetrics(0, 3, 0.5, 0.4), EpochMetrics(1, 7, 0.75, 0.7)]
    trace = RunTrace(spec=spec, updates=[], epochs=epochs, params=np.zeros((1, 1)),
                     planned_updates=0, context=None)
    assert trace.metrics == Metrics(accuracy=0.75, f1_macro=0.7)
    assert trace.to_dict()["metrics"] == {"accuracy": 0.75, "f1_macro": 0.7}
    assert [key for key, _ in METRICS] == list(trace.metrics.to_dict())
    assert metric_values(None) == {}
