"""lrcheck's pytest plugin as a user's test suite meets it, through ``pytester`` (pytest's own
fixture for testing plugins): the ``lrcheck_runs`` fixture, ``--lrcheck-reports``
and the report folders shown on failure; and its ``pytest11`` entry point, declared and
installed. The runs themselves are ``lrcheck run``'s, of ``tests/fixtures/user_tiny.py`` (torch
only: a pair of it recorded in 10-11 s of CPU here, of ``user_train.py`` in 13-15)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

import pytest

# Imported here, before any inner session: pytester drops from sys.modules what an in-process
# session imported first, which would leave the package's attributes on modules no longer there.
import lrcheck
import lrcheck.api  # noqa: F401
import lrcheck.testing  # noqa: F401
from lrcheck.pytest_plugin import folder_name
from tests.helpers import HANG_S

pytest_plugins = ["pytester"]

HOME = os.environ.get("HOME", "")
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "fixtures" / "user_tiny.py"
# The plugin loaded by name, and nothing else of this environment's plugins: the same inner
# session whether or not the installed lrcheck declares the entry point yet.
# (Imported already, it cannot be assertion-rewritten: pytest's warning of it left out.)
PLUGIN = ("-p", "lrcheck.pytest_plugin", "-W", "ignore::pytest.PytestAssertRewriteWarning")


@pytest.fixture
def inner(pytester, monkeypatch):
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("HOME", HOME)
    # A pytest process of its own imports the lrcheck this one did (PYTHONPATH may be relative).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(Path(lrcheck.__file__).parents[1]), os.environ.get("PYTHONPATH")])))
    return pytester


def test_the_entry_point_is_declared_in_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert project["project"]["entry-points"]["pytest11"] == {"lrcheck": "lrcheck.pytest_plugin"}


def test_the_installed_lrcheck_declares_the_entry_point():
    """Passes once the environment's lrcheck is installed from this tree (pip install -e .)."""
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="pytest11")}
    assert found.get("lrcheck") == "lrcheck.pytest_plugin", (
        f"pytest11 entry points installed: {found}; reinstall lrcheck (pip install -e .)")


def test_a_folder_per_test_is_named_after_its_node_id():
    assert folder_name("tests/test_x.py::test_a[bs=16 accum/2]") == (
        "tests-test_x.py-test_a-bs-16-accum-2")
    assert len(folder_name("t.py::" + "x" * 300)) == 120


def test_the_option_is_in_pytest_s_help_under_its_group(inner):
    result = inner.runpytest_inprocess(*PLUGIN, "--help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["lrcheck: two training runs compared:",
                                 "*--lrcheck-reports=DIR*"])


def test_a_failing_test_shows_its_report_folders_and_an_unknown_keyword_is_named(inner):
    """No training: the first test's run fails before anything is recorded (a bad keyword), the
    second raises on its own after asking for two folders."""
    inner.makepyfile(test_user="""
        def test_unknown(lrcheck_runs):
            lrcheck_runs("python a.py", "python b.py", sample=32)

        def test_folders(lrcheck_runs):
            lrcheck_runs.used.extend([lrcheck_runs.folder, lrcheck_runs.folder])
            assert False, "the user's own assertion"
    """)
    reports = inner.path / "reports"
    result = inner.runpytest_inprocess(*PLUGIN, f"--lrcheck-reports={reports}")
    result.assert_outcomes(failed=2)
    output = result.stdout.str()
    print(output)
    assert ("lrcheck.testing.assert_runs_equivalent: unknown keyword 'sample' (did you mean "
            "'samples'?)") in output
    own = reports / "test_user.py-test_folders"
    result.stdout.fnmatch_lines(["*- lrcheck reports -*",
                                 f"{own} (report.html, report.md, result.json)"])
    section = output.split("test_folders", 1)[1]
    assert section.count(f"{own} (report.html") == 2


@pytest.mark.slow
def test_loading_the_plugin_imports_no_torch_nor_numpy():
    code = ("import sys, lrcheck.pytest_plugin; "
            "print(sorted(m for m in ('torch', 'numpy', 'rich') if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=HANG_S, check=True).stdout.strip()
    assert found == "[]"


USER_TESTS = """
    import shlex
    import sys

    SCRIPT = {script!r}
    REF = [sys.executable, SCRIPT, "--bs", "16"]
    CAND = [sys.executable, SCRIPT, "--bs", "8", "--accum", "2"]

    def test_correct_pair(lrcheck_runs, tmp_path):
        # lrcheck run's options reach the run through the fixture: --deterministic's settings
        # in effect, and each side's own log (one that says nothing) held against its record.
        (tmp_path / "ref.csv").write_text("step,lr\\n")
        (tmp_path / "cand.csv").write_text("nonsense\\n")
        report = lrcheck_runs(REF, CAND, deterministic=True, ref_logs=tmp_path / "ref.csv",
                              logs=tmp_path / "cand.csv", tags=["lr=lr"])
        assert report.ok
        assert report.environment.deterministic["torch.use_deterministic_algorithms"] is True
        assert [(f.side, f.status.value, str(tmp_path / name) in f.says)
                for f, name in zip(report.logs, ["ref.csv", "cand.csv"])] == [
            ("reference", "unknown", True), ("candidate", "unknown", True)]

    def test_scheduler_per_micro_batch(lrcheck_runs):
        lrcheck_runs(shlex.join(REF), shlex.join([*CAND, "--bug", "per-micro-batch"]))
"""


@pytest.mark.slow
def test_a_correct_pair_passes_and_a_scheduler_stepped_per_micro_batch_fails_naming_lr(inner):
    """In a pytest process of its own, as a user's suite runs (an in-process session would
    import torch, numpy and matplotlib's modules into this one, then drop them). The correct
    pair runs with ``deterministic``, ``ref_logs`` and ``logs``, and checks they took effect."""
    script = inner.path / "user_tiny.py"  # its own path: what is left running is ours
    shutil.copy(SCRIPT, script)
    inner.makepyfile(test_user=USER_TESTS.format(script=str(script)))
    try:
        result = inner.runpytest_subprocess(*PLUGIN, f"--basetemp={inner.path / 'tmp'}",
                                            timeout=HANG_S)
        output = result.stdout.str()
        print(output)
        result.assert_outcomes(passed=1, failed=1)
        folder = inner.path / "tmp" / "lrcheck" / "test_user.py-test_scheduler_per_micro_batch"
        assert "lrcheck run: the candidate does not train like the reference" in output
        result.stdout.fnmatch_lines(["*  lr: FAIL at update 0: first differs at update 0: "
                                     "reference 0.1, candidate 0.075*",
                                     f"*report: {folder} (report.html, report.md, result.json)",
                                     "*- lrcheck reports -*", f"{folder} (report.html*"])
        assert (folder / "result.json").is_file() and (folder / "report.md").is_file()
        good = folder.with_name("test_user.py-test_correct_pair")
        assert '"verdict": "pass"' in (good / "result.json").read_text()
    finally:
        left = subprocess.run(["pgrep", "-f", str(script)], capture_output=True, text=True)
        assert not left.stdout.split(), f"left running: {left.stdout}"
