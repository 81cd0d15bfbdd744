"""Every test file is collected: pytest's default ``norecursedirs`` leaves out folders named
``dist`` (a build's output), which silently skipped the tests of ``runner/dist/`` until it was
named ``runner/ranks/``; a folder of tests named so again fails here. Where this session
collected the whole suite (``make test``) its own collection is the one checked (the files
``tests/conftest.py`` saw collected); run alone, a fresh ``pytest --collect-only`` is."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import COLLECTED_FILES
from tests.helpers import HANG_S

TESTS = Path(__file__).resolve().parent


@pytest.mark.slow
def test_every_test_file_under_tests_is_collected(request):
    files = {path.relative_to(TESTS.parent).as_posix() for path in TESTS.rglob("test_*.py")}
    collected = _collected(request.config)
    assert "tests/runner/ranks/test_launch.py" in files
    if importlib.util.find_spec("ludwig") is None:
        # Left out here (tests/conftest.py), run in Ludwig's own environment by make test.
        ludwig = {f for f in files if f.startswith("tests/ludwig/")}
        assert ludwig and collected & ludwig == set()
        files -= ludwig
        makefile = (TESTS.parent / "Makefile").read_text()
        assert "pytest -q tests/ludwig" in _recipe(makefile, "test-ludwig")
        assert re.search(r"\$\(MAKE\)[^\n]* test-ludwig\b", _recipe(makefile, "test"))
    assert files - collected == set()


def _recipe(makefile: str, target: str) -> str:
    """The rule of ``target`` in the Makefile: its line and its recipe, to the next blank line."""
    return makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]


def _collected(config: pytest.Config) -> set[str]:
    """The test files pytest collects with no arguments: this session's, where it was started
    so (from the repository, no paths given), else those of a fresh ``--collect-only``."""
    whole = (config.args_source is pytest.Config.ArgsSource.TESTPATHS
             and config.invocation_params.dir == TESTS.parent)
    if whole and COLLECTED_FILES in config.stash:
        return config.stash[COLLECTED_FILES]
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                             "-p", "no:cacheprovider"], cwd=TESTS.parent, capture_output=True,
                            text=True, timeout=HANG_S).stdout
    return {line.split("::")[0] for line in listed.splitlines() if "::" in line}
