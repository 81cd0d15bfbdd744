"""A run's warnings (``runner.local.guarded``): what the run raised is kept; what a module raised
while it was being imported is not, as only the first import in a process raises it."""

from __future__ import annotations

import importlib
import sys
import warnings

import numpy as np
import pytest

from lrcheck.errors import RunError
from lrcheck.runner.local import guarded
from lrcheck.trace import RunTrace


def empty_trace() -> RunTrace:
    return RunTrace(spec=None, updates=[], epochs=[], params=np.empty((0, 1)),
                    planned_updates=0, context=None)


def test_warnings_raised_by_importing_a_module_are_not_the_runs(tmp_path, monkeypatch):
    (tmp_path / "noisy_at_import.py").write_text(
        "import warnings\nwarnings.warn('old API', DeprecationWarning)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "noisy_at_import", raising=False)

    def run() -> RunTrace:
        importlib.import_module("noisy_at_import")  # its first import in this process
        for _ in range(2):  # told once
            warnings.warn("scheduler stepped before the optimizer", UserWarning, stacklevel=1)
        return empty_trace()

    assert guarded("the run", run).warnings == (
        "UserWarning: scheduler stepped before the optimizer",)
    # Imported before the run or during it: the run's warnings are the same.
    assert guarded("the run", run).warnings == (
        "UserWarning: scheduler stepped before the optimizer",)


def test_the_filters_and_the_hook_are_the_callers_again_after_a_run():
    before = (warnings.showwarning, list(warnings.filters))

    def crash() -> RunTrace:
        warnings.warn("about to fail", stacklevel=1)
        raise ValueError("boom")

    with pytest.raises(RunError, match=r"^the run crashed: ValueError: boom$"):
        guarded("the run", crash)
    assert (warnings.showwarning, list(warnings.filters)) == before


def test_a_run_that_itself_runs_under_an_import_keeps_its_warnings(tmp_path, monkeypatch):
    (tmp_path / "trains_at_import.py").write_text(
        "import warnings\n"
        "from lrcheck.runner.local import guarded\n"
        "from tests.runner.test_warnings import empty_trace\n"
        "def run():\n"
        "    warnings.warn('raised by the run', UserWarning, stacklevel=1)\n"
        "    return empty_trace()\n"
        "WARNINGS = guarded('the run', run).warnings\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "trains_at_import", raising=False)
    module = importlib.import_module("trains_at_import")
    assert module.WARNINGS == ("UserWarning: raised by the run",)
