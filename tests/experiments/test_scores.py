"""Accuracy and macro-F1 in NumPy are scikit-learn's, bit for bit, on predictions of every
kind: labels missing from the prediction, labels only the prediction has, one class, all
right, all wrong."""

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score

from lrcheck.experiments.scores import accuracy, macro_f1


def _cases():
    rng = np.random.default_rng(0)
    for n, classes in [(1, 1), (5, 2), (37, 3), (360, 10), (1000, 8)]:
        y = rng.integers(0, classes, n)
        yield y, rng.integers(0, classes, n)  # any prediction
        yield y, y.copy()  # all right
        yield y, (y + 1) % (classes + 1)  # all wrong, a label y never has
        yield y, np.zeros_like(y)  # one class predicted
        near = y.copy()
        near[rng.random(n) < 0.1] = classes + 2  # mostly right, an unknown label
        yield y, near


@pytest.mark.parametrize(("y", "pred"), list(_cases()))
def test_accuracy_and_macro_f1_are_scikit_learn_s_to_the_bit(y, pred):
    assert accuracy(y, pred) == float(accuracy_score(y, pred))
    assert macro_f1(y, pred) == float(f1_score(y, pred, average="macro"))
