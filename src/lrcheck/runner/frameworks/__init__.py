"""Real trainers run for real: one small adapter per framework (``plan/frameworks.py`` lists
them), which says what its framework does — how its trainer is built for a ``RunSpec``, how it
trains — on the scaffold every framework run shares (``common.py``: plan, schedule context,
``Recording``, data order, processes). Each module has a ``train`` with ``plain.train``'s
contract (``Adapter``), and imports its framework only when it trains."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Protocol, cast

from lrcheck.experiments.tasks import Dataset
from lrcheck.spec import RunSpec
from lrcheck.trace import OnUpdate, RunTrace


class Adapter(Protocol):
    """``train(spec, data, *, device, rank, on_update, on_start)`` of an adapter module."""

    def __call__(self, spec: RunSpec, data: Dataset, *, device: str, rank: int = 0,
                 on_update: OnUpdate | None = None,
                 on_start: Callable[[], None] | None = None) -> RunTrace: ...


def adapter(framework: str) -> Adapter:
    """The ``train`` of ``framework``'s adapter (``runner/frameworks/<framework>.py``)."""
    module = importlib.import_module(f"lrcheck.runner.frameworks.{framework}")
    return cast(Adapter, module.train)
