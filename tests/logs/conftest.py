"""The logs the real libraries write, once per test session (tests/fixtures/logs_*.py run in
this process, into the session's temporary folders): a plain loop's TensorBoard events and
MLflow file store, the Transformers Trainer's and Lightning's."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

# name -> the fixture's arguments; accumulation 1 against 2 at the same effective batch (8).
PLAIN = {"ref": ["--accum", "1", "--mlflow"], "cand": ["--accum", "2", "--mlflow"],
         "micro": ["--accum", "2", "--sched-per-microbatch"],
         "every": ["--accum", "2", "--every", "3"]}


def _write(module, out: Path, argv: list[str]) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module.train(module.arguments(["--out", str(out), *argv]))
    return out


@pytest.fixture(scope="session")
def plain_logs(tmp_path_factory) -> dict[str, Path]:
    from tests.fixtures import logs_plain

    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    top = tmp_path_factory.mktemp("plain")
    return {name: _write(logs_plain, top / name, argv) for name, argv in PLAIN.items()}


@pytest.fixture(scope="session")
def trainer_logs(tmp_path_factory) -> Path:
    from tests.fixtures import logs_trainer

    return _write(logs_trainer, tmp_path_factory.mktemp("trainer"), ["--accum", "2"])


@pytest.fixture(scope="session")
def lightning_logs(tmp_path_factory) -> Path:
    from tests.fixtures import logs_lightning

    top = tmp_path_factory.mktemp("lightning")
    _write(logs_lightning, top / "ref", ["--accum", "1"])
    return _write(logs_lightning, top / "cand", ["--accum", "2"])
