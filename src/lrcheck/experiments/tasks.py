"""Tasks: a data set that ships inside a package (or is generated) and a small model for it.

The registry is plain data, importable without torch or scikit-learn; ``lrcheck list``, the CLI's
choices, the README table and the tests all iterate ``TASKS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import torch

TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Dataset:
    """Standardised features and integer labels, split once and deterministically."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int

    @property
    def num_features(self) -> int:
        return int(self.x_train.shape[1])


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    source: str
    load_xy: Callable[[int, int], tuple[np.ndarray, np.ndarray]]
    hidden: int = 64
    batch_norm: bool = False

    def load(self, seed: int, samples: int) -> Dataset:
        """The data set, split 80/20 (stratified, seeded by ``seed``) and standardised with the
        training split's mean and deviation."""
        import numpy as np
        from sklearn.model_selection import train_test_split
        from sklearn.preprocessing import StandardScaler

        x, y = self.load_xy(seed, samples)
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y)
        scaler = StandardScaler().fit(x_train)
        return Dataset(scaler.transform(x_train), y_train.astype(np.int64),
                       scaler.transform(x_test), y_test.astype(np.int64), int(y.max()) + 1)

    def build_model(self, num_features: int, num_classes: int) -> torch.nn.Module:
        """An MLP with one hidden layer (and BatchNorm after it for ``batch_norm`` tasks). The
        caller seeds torch's generator first, so both runs start from the same weights."""
        from torch import nn

        layers: list[Any] = [nn.Linear(num_features, self.hidden)]
        if self.batch_norm:
            layers.append(nn.BatchNorm1d(self.hidden))
        layers += [nn.ReLU(), nn.Linear(self.hidden, num_classes)]
        return nn.Sequential(*layers)


def _bundled(loader_name: str) -> Callable[[int, int], tuple[np.ndarray, np.ndarray]]:
    def load(seed: int, samples: int) -> tuple[np.ndarray, np.ndarray]:
        import sklearn.datasets

        return getattr(sklearn.datasets, loader_name)(return_X_y=True)

    return load


def _synthetic(seed: int, samples: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_classification

    return make_classification(n_samples=samples, n_features=20, n_informative=10,
                               n_redundant=4, n_classes=4, random_state=seed)


_TASKS = [
    Task("digits", "8x8 handwritten digits, 10 classes; MLP 64-64-10 (the default)",
         "sklearn load_digits (1797 samples)", _bundled("load_digits")),
    Task("digits-bn", "digits with BatchNorm after the hidden layer: not comparable across bs",
         "sklearn load_digits (1797 samples)", _bundled("load_digits"), batch_norm=True),
    Task("breast-cancer", "breast cancer diagnosis, 2 classes; MLP 30-32-2",
         "sklearn load_breast_cancer (569 samples)", _bundled("load_breast_cancer"), hidden=32),
    Task("wine", "wine cultivars, 3 classes; MLP 13-16-3",
         "sklearn load_wine (178 samples)", _bundled("load_wine"), hidden=16),
    Task("synthetic", "make_classification, 20 features, 4 classes, size set by --samples",
         "sklearn make_classification (generated)", _synthetic),
]

TASKS: dict[str, Task] = {t.name: t for t in _TASKS}
