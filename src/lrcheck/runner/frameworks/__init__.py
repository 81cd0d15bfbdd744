"""Real trainers run for real: one small adapter per framework (``plan/frameworks.py`` lists
them), which builds the framework's objects for a ``RunSpec``, attaches the ``Recording`` and
runs. Each module has ``train(spec, data, *, device, rank, on_update, on_start) -> RunTrace``
with ``plain.train``'s contract, and imports its framework only when it trains."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from lrcheck.trace import RunTrace


def adapter(framework: str) -> Callable[..., RunTrace]:
    """The ``train`` of ``framework``'s adapter (``runner/frameworks/<framework>.py``)."""
    module = importlib.import_module(f"lrcheck.runner.frameworks.{framework}")
    train: Callable[..., Any] = module.train
    return train
