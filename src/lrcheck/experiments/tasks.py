"""Tasks: a data set that ships inside a package (or is generated) and a small model for it.

The registry is plain data, importable without torch or scikit-learn; ``lrcheck list``, the CLI's
choices, the generated docs table (docs/reference/registries.md) and the tests all iterate
``TASKS``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import numpy as np
    import torch

TEST_FRACTION = 0.2
IGNORE_INDEX = -100  # label of padding positions in token tasks (torch's cross_entropy default)
VOCAB, TOKEN_CLASSES, MIN_LEN, MAX_LEN = 32, 8, 4, 32
SYNTHETIC_CLASSES = 4
# Samples a generated task makes when not told (--samples); the fewest any task accepts.
GENERATED_SAMPLES, MIN_SAMPLES = 2000, 10


@dataclass(frozen=True)
class Dataset:
    """Standardised features and integer labels, split once and deterministically."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    vocab: int = 0

    @property
    def num_features(self) -> int:
        return int(self.x_train.shape[1])

    def items_per_sample(self) -> np.ndarray:
        """Loss items per training sample: 1, or its number of (non-padding) tokens."""
        counts = (self.y_train != IGNORE_INDEX).reshape(len(self.y_train), -1).sum(axis=1)
        return cast("np.ndarray", counts)


def stratified_minimum(classes: int) -> int:
    """The fewest samples of ``classes`` balanced classes that a stratified split (``Task.load``)
    can cut, each class in both parts: scikit-learn rounds the test part up."""
    n = max(MIN_SAMPLES, 2 * classes)
    while min(math.ceil(TEST_FRACTION * n), n - math.ceil(TEST_FRACTION * n)) < classes:
        n += 1
    return n


@dataclass(frozen=True)
class Task:
    """What is trained. ``size``: the samples of a data set that ships with its package; None
    for a generated one, whose size is ``--samples`` (at least ``min_samples``)."""

    name: str
    description: str
    source: str
    load_xy: Callable[[int, int], tuple[np.ndarray, np.ndarray]]
    hidden: int = 64
    batch_norm: bool = False
    tokens: bool = False
    size: int | None = None
    min_samples: int = MIN_SAMPLES

    @property
    def generated(self) -> bool:
        """Whether ``--samples`` sizes the data set."""
        return self.size is None

    def train_size(self, samples: int | None = None) -> int:
        """The samples of ``load``'s training split (``samples``: a generated set's size), known
        without loading it: scikit-learn rounds the test part up."""
        n = self.size or (GENERATED_SAMPLES if samples is None else samples)
        return n - math.ceil(TEST_FRACTION * n)

    def load(self, seed: int, samples: int | None = None) -> Dataset:
        """The data set, split 80/20 (seeded by ``seed``); ``samples`` sizes a generated one
        (default ``GENERATED_SAMPLES``). Tabular sets are split stratified and standardised with
        the training split's mean and deviation; token sets keep their ids."""
        import numpy as np
        from sklearn.model_selection import train_test_split

        x, y = self.load_xy(seed, GENERATED_SAMPLES if samples is None else samples)
        x_train, x_test, y_train, y_test = train_test_split(
            x, y, test_size=TEST_FRACTION, random_state=seed,
            stratify=None if self.tokens else y)
        if self.tokens:
            return Dataset(x_train, y_train, x_test, y_test, TOKEN_CLASSES, vocab=VOCAB)
        from sklearn.preprocessing import StandardScaler

        scaler = StandardScaler().fit(x_train)
        return Dataset(scaler.transform(x_train), y_train.astype(np.int64),
                       scaler.transform(x_test), y_test.astype(np.int64), int(y.max()) + 1)

    def build_model(self, data: Dataset) -> torch.nn.Module:
        """An MLP with one hidden layer (and BatchNorm after it for ``batch_norm`` tasks), or for
        token tasks a per-token tagger. The caller seeds torch's generator first, so both runs
        start from the same weights."""
        from torch import nn

        if self.tokens:
            return _token_tagger(data.vocab, self.hidden, data.num_classes)
        layers: list[Any] = [nn.Linear(data.num_features, self.hidden)]
        if self.batch_norm:
            layers.append(nn.BatchNorm1d(self.hidden))
        layers += [nn.ReLU(), nn.Linear(self.hidden, data.num_classes)]
        return nn.Sequential(*layers)


def _bundled(loader_name: str) -> Callable[[int, int], tuple[np.ndarray, np.ndarray]]:
    def load(seed: int, samples: int) -> tuple[np.ndarray, np.ndarray]:
        import sklearn.datasets

        data = getattr(sklearn.datasets, loader_name)(return_X_y=True)
        return cast("tuple[np.ndarray, np.ndarray]", data)

    return load


def _synthetic(seed: int, samples: int) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import make_classification

    data = make_classification(n_samples=samples, n_features=20, n_informative=10,
                               n_redundant=4, n_classes=SYNTHETIC_CLASSES,
                               random_state=seed)
    return cast("tuple[np.ndarray, np.ndarray]", data)


def _tokens(seed: int, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of 4 to 32 token ids (0 pads), each token labelled ``(x_t + x_{t-1}) mod 8``;
    padding positions carry ``IGNORE_INDEX``. Token counts differ from sample to sample, which is
    what makes a per-micro-batch mean differ from the mean over the whole effective batch."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = np.zeros((samples, MAX_LEN), dtype=np.int64)
    y = np.full((samples, MAX_LEN), IGNORE_INDEX, dtype=np.int64)
    for i, length in enumerate(rng.integers(MIN_LEN, MAX_LEN + 1, samples)):
        ids = rng.integers(1, VOCAB, length)
        x[i, :length] = ids
        y[i, :length] = (ids + np.concatenate([[0], ids[:-1]])) % TOKEN_CLASSES
    return x, y


def _token_tagger(vocab: int, hidden: int, classes: int) -> torch.nn.Module:
    """Embeds each token and its predecessor and classifies the pair: (n, L) ids → (n, L, C)."""
    import torch
    from torch import nn

    class TokenTagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, 16, padding_idx=0)
            self.mlp = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Linear(hidden, classes))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            here = self.embed(ids)
            before = torch.nn.functional.pad(here, (0, 0, 1, 0))[:, :-1]
            logits: torch.Tensor = self.mlp(torch.cat([here, before], dim=-1))
            return logits

    return TokenTagger()


_TASKS = [
    Task("digits", "8x8 handwritten digits, 10 classes; MLP 64-64-10 (the default)",
         "sklearn load_digits (1797 samples)", _bundled("load_digits"), size=1797),
    Task("digits-bn", "digits with BatchNorm after the hidden layer: not comparable across bs",
         "sklearn load_digits (1797 samples)", _bundled("load_digits"), batch_norm=True,
         size=1797),
    Task("breast-cancer", "breast cancer diagnosis, 2 classes; MLP 30-32-2",
         "sklearn load_breast_cancer (569 samples)", _bundled("load_breast_cancer"), hidden=32,
         size=569),
    Task("wine", "wine cultivars, 3 classes; MLP 13-16-3",
         "sklearn load_wine (178 samples)", _bundled("load_wine"), hidden=16, size=178),
    Task("synthetic", "make_classification, 20 features, 4 classes, size set by --samples",
         "sklearn make_classification (generated)", _synthetic,
         min_samples=stratified_minimum(SYNTHETIC_CLASSES)),
    Task("tokens", "variable-length sequences (4-32 tokens, padded), per-token loss; "
         "size set by --samples", "generated", _tokens, tokens=True),
]

TASKS: dict[str, Task] = {t.name: t for t in _TASKS}
