"""Accuracy and macro-F1 of a prediction, in NumPy, as scikit-learn computes them
(``accuracy_score``; ``f1_score(average="macro")``: per label of either array, ``2 tp / (true +
predicted)``, then their mean), without importing scikit-learn's metrics, which cost every rank
that evaluates 1.5 s of CPU. ``tests/experiments/test_scores.py`` holds both to scikit-learn's,
bit for bit."""

from __future__ import annotations

import numpy as np


def accuracy(y: np.ndarray, pred: np.ndarray) -> float:
    """The share of ``pred`` equal to ``y``."""
    return float(np.mean(y == pred))


def macro_f1(y: np.ndarray, pred: np.ndarray) -> float:
    """The unweighted mean over the labels found in ``y`` or ``pred`` of each label's F1."""
    labels = np.union1d(y, pred)
    true = (y[:, None] == labels).sum(axis=0).astype(np.float64)
    predicted = (pred[:, None] == labels).sum(axis=0).astype(np.float64)
    hits = ((y == pred)[:, None] & (y[:, None] == labels)).sum(axis=0).astype(np.float64)
    return float(np.nanmean(2.0 * hits / (1.0 * true + predicted)))
