import numpy as np
import pytest
import torch

from lrcheck.experiments.tasks import IGNORE_INDEX, TASKS


@pytest.mark.parametrize("name", list(TASKS))
def test_split_is_deterministic_standardised_and_stratified(name):
    task = TASKS[name]
    a, b = task.load(0, 400), task.load(0, 400)
    assert np.array_equal(a.x_train, b.x_train) and np.array_equal(a.y_test, b.y_test)
    assert abs(len(a.y_test) / (len(a.y_test) + len(a.y_train)) - 0.2) < 0.01
    labels = a.y_test[a.y_test != IGNORE_INDEX]
    assert set(np.unique(labels)) == set(range(a.num_classes))
    model = task.build_model(a)
    out = model(torch.as_tensor(a.x_train[:2]) if task.tokens else torch.zeros(2, a.num_features))
    assert out.shape[0] == 2 and out.shape[-1] == a.num_classes
    if not task.tokens:
        assert np.allclose(a.x_train.mean(axis=0), 0, atol=1e-9)


def test_synthetic_size_follows_samples():
    data = TASKS["synthetic"].load(1, 500)
    assert len(data.y_train) + len(data.y_test) == 500


def test_only_digits_bn_has_batchnorm():
    with_bn = [name for name, t in TASKS.items()
               if any(isinstance(m, torch.nn.BatchNorm1d)
                      for m in t.build_model(t.load(0, 200)).modules())]
    assert with_bn == ["digits-bn"]


def test_token_sequences_vary_in_length_and_pad_with_the_ignore_index():
    data = TASKS["tokens"].load(0, 300)
    lengths = (data.y_train != IGNORE_INDEX).sum(axis=1)
    assert lengths.min() >= 4 and lengths.max() <= 32 and len(set(lengths.tolist())) > 10
    assert ((data.x_train == 0) == (data.y_train == IGNORE_INDEX)).all()


@pytest.mark.parametrize("name", list(TASKS))
def test_train_size_is_the_training_split_load_makes(name):
    task = TASKS[name]
    assert task.train_size(400) == len(task.load(0, 400).y_train)


def test_the_fewest_samples_a_generated_task_accepts_is_the_fewest_its_split_can_cut():
    from lrcheck.experiments.tasks import MIN_SAMPLES

    synthetic = TASKS["synthetic"]
    assert synthetic.min_samples == 16
    for seed in range(5):
        data = synthetic.load(seed, 16)
        assert set(data.y_test) == set(data.y_train) == set(range(4))
    with pytest.raises(ValueError, match="should be greater or equal to the number of classes"):
        synthetic.load(0, 15)
    assert TASKS["tokens"].min_samples == MIN_SAMPLES  # not stratified: any size splits
    assert len(TASKS["tokens"].load(0, MIN_SAMPLES).y_test) == 2
