import numpy as np
import pytest
import torch

from lrcheck.experiments.tasks import TASKS


@pytest.mark.parametrize("name", list(TASKS))
def test_split_is_deterministic_standardised_and_stratified(name):
    task = TASKS[name]
    a, b = task.load(0, 400), task.load(0, 400)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert abs(len(a.y_test) / (len(a.y_test) + len(a.y_train)) - 0.2) < 0.01
    assert np.allclose(a.x_train.mean(axis=0), 0, atol=1e-9)
    assert set(np.unique(a.y_test)) == set(range(a.num_classes))
    model = task.build_model(a.num_features, a.num_classes)
    assert model(torch.zeros(2, a.num_features)).shape == (2, a.num_classes)


def test_synthetic_size_follows_samples():
    data = TASKS["synthetic"].load(1, 500)
    assert len(data.y_train) + len(data.y_test) == 500


def test_only_digits_bn_has_batchnorm():
    with_bn = [name for name, t in TASKS.items()
               if any(isinstance(m, torch.nn.BatchNorm1d) for m in t.build_model(4, 2).modules())]
    assert with_bn == ["digits-bn"]
