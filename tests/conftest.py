"""Shared fixtures: the user-schedule fixtures file, reports built by hand (no training) for the
unit tests of suites and their writers, and every result.json, suite.json and run.json a test
writes validated against its schema (tests/schema_files.py)."""

from __future__ import annotations

import importlib.util
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lrcheck.checks import run_checks
from lrcheck.environment import Environment
from lrcheck.experiments.cache import CACHE_ENV
from lrcheck.plan.order import micro_batches, rank_share
from lrcheck.plan.windows import MicroBatch, Window
from lrcheck.result import Report
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.trace import EpochMetrics, RunTrace, UpdateRecord
from tests import schema_files

FIXTURES = Path(__file__).parent / "fixtures"

# The data sets every process a test starts loads, kept beside the test run's other caches
# rather than in the user's home (experiments/cache.py); the processes inherit the setting.
os.environ.setdefault(CACHE_ENV, str(Path(__file__).parents[1] / ".pytest_cache" / "lrcheck-data"))

# tests/ludwig/ trains through Ludwig, installed only in its own environment (make venv-ludwig;
# make test-ludwig runs it there): an environment without Ludwig leaves the folder out rather
# than skipping its tests (tests/test_collection.py checks that the Makefile runs it).
collect_ignore = [] if importlib.util.find_spec("ludwig") else ["ludwig"]


# The tmp folders validated after their test, or left out by its marker: the end of the
# session validates the rest of pytest's temporary folder.
_SEEN: list[Path] = []


@pytest.fixture(autouse=True)
def _valid_files(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test that has a ``tmp_path``, the files with a schema in it validated (not
    for a test marked ``invalid_files``, which writes them broken on purpose)."""
    tmp = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if tmp is None:
        return
    _SEEN.append(tmp)
    if request.node.get_closest_marker(schema_files.MARKER) is None:
        found = schema_files.report(schema_files.files_under([tmp]))
        if found:
            pytest.fail(found, pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _valid_shared_files(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of the session, the files with a schema in pytest's temporary folder that no
    test's own check saw (a shared fixture's ``tmp_path_factory.mktemp``) validated."""
    yield
    base = tmp_path_factory.getbasetemp()
    found = schema_files.report(schema_files.files_under([base], skip=_SEEN))
    if found:
        pytest.fail("files written under a shared fixture's folder:\n" + found, pytrace=False)


@pytest.fixture
def schedules_file() -> Path:
    return FIXTURES / "schedules.py"


def fake_windows(spec: RunSpec, n: int) -> list[Window]:
    """``n`` updates of samples in order, ``spec.effective_batch`` each, cut as lrcheck's own
    loop cuts them, each micro-batch weighted by its samples."""
    size = spec.effective_batch
    return [tuple(MicroBatch(r, rank_share(m, r, spec.world), len(m) / spec.world / size)
                  for m in micro_batches(np.arange(k * size, (k + 1) * size), spec.bs,
                                         spec.world)
                  for r in range(spec.world))
            for k in range(n)]


def fake_trace(spec: RunSpec, lrs: list[float], accuracy: float = 0.9,
               f1: float = 0.88) -> RunTrace:
    """A run that made ``len(lrs)`` updates at these LRs, with a loss and parameters that depend
    only on the update, the samples of ``fake_windows``, and these final metrics."""
    updates = [UpdateRecord(k, (lr, lr), 1.0 / (k + 1), (k + 1) * spec.effective_batch, k, 0)
               for k, lr in enumerate(lrs)]
    params = np.arange(len(lrs), dtype=np.float64)[:, None] + 1.0
    return RunTrace(spec, updates, [EpochMetrics(0, len(lrs) - 1, accuracy, f1)], params,
                    len(lrs), None, windows=fake_windows(spec, len(lrs)))


def fake_report(lr_shift: float = 0.0, accuracy: float = 0.9, f1: float = 0.88,
                scheduler: str = "cosine", n: int = 5) -> Report:
    """A pair (bs 8 x accum 2 vs bs 16) whose candidate's LR is off by ``lr_shift`` from update
    2 on, with the candidate's final ``accuracy`` and ``f1`` (the reference has 0.9 / 0.88)."""
    pair = PairSpec.build(RunSpec(task="wine", bs=8, accum=2, scheduler=scheduler), ref_bs=16)
    lrs = [0.1 / (k + 1) for k in range(n)]
    ref = fake_trace(pair.reference, lrs)
    cand = fake_trace(pair.candidate, [lr + (lr_shift if k >= 2 else 0.0)
                                       for k, lr in enumerate(lrs)], accuracy, f1)
    checks = run_checks(ref, cand, pair.tolerances)
    return Report(pair, ref, cand, checks, Environment(lrcheck="test", torch="test", device="cpu"))


@pytest.fixture
def make_report():
    return fake_report


def pytest_itemcollected(item: pytest.Item) -> None:
    """The test files this session collected, before ``-m``/``-k`` deselect any
    (tests/test_collection.py reads them where the session collected the whole suite)."""
    files = item.config.stash.setdefault(COLLECTED_FILES, set())
    files.add(item.path.relative_to(item.config.rootpath).as_posix())


COLLECTED_FILES = pytest.StashKey[set[str]]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The test files with the most slow tests first, those with none last, each file's tests
    in their order: make test's workers take a file at a time as they free up, in this order
    (the Makefile's --no-loadscope-reorder), and the many short files at the end keep both
    busy until the last long one ends."""
    slow = Counter(item.path for item in items if item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: -slow[item.path])  # stable: a file's tests stay together


@pytest.fixture(autouse=True)
def _plots_drawn_here_in_fast_tests(request: pytest.FixtureRequest,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked slow starts no process: where a command would start its plot helper
    (``cli.output.plots``, on a machine with a second CPU) it draws its plots here instead. The
    helper is tested by the slow tests (tests/reports/test_render.py, the commands' end to end)."""
    if request.node.get_closest_marker("slow") is None:
        import lrcheck.reports.render as render

        monkeypatch.setattr(render, "second_cpu", lambda: False)
