"""tests/fixtures/stored_digits.py: the digits the user scripts train on are scikit-learn's,
value for value and type for type."""

import numpy as np
import pytest

from tests.fixtures.stored_digits import load_digits


def test_the_stored_digits_are_scikit_learn_s():
    datasets = pytest.importorskip("sklearn.datasets")
    theirs, ours = datasets.load_digits(), load_digits()
    for name in ("data", "target"):
        assert getattr(ours, name).dtype == getattr(theirs, name).dtype
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name))
