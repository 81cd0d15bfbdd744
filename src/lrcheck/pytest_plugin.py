"""lrcheck's pytest plugin, found through the ``pytest11`` entry point ``lrcheck`` once lrcheck
is installed (``-p no:lrcheck`` leaves it out): the fixture ``lrcheck_runs``, which is
``lrcheck.testing.assert_runs_equivalent`` with a report folder per test, the option
``--lrcheck-reports DIR`` (where those folders go; default: under pytest's temporary folder),
and, on a failed test, its report folders in a section of pytest's report.

Loading it imports pytest and lrcheck's package only: no torch, no numpy (the test suite of any
project with lrcheck installed loads it); lrcheck's runs are imported when a test calls one."""

from __future__ import annotations

import re
from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import pytest

if TYPE_CHECKING:
    from lrcheck.result import Report
    from lrcheck.spec.run_options import Command, RunOptions

# The report folders a test's lrcheck_runs used, for the section of its report on failure.
FOLDERS = pytest.StashKey[list[Path]]()
# The reports root that was set before this session's, put back at its end.
EARLIER_ROOT = pytest.StashKey["Path | None"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lrcheck", "lrcheck: two training runs compared")
    group.addoption("--lrcheck-reports", metavar="DIR", default=None,
                    help="Where lrcheck_runs (and assert_runs_equivalent without out=) put their "
                         "reports: a folder per test. Default: under pytest's temporary "
                         "folder (--basetemp).")


def pytest_configure(config: pytest.Config) -> None:
    folder = config.getoption("lrcheck_reports", None)
    if folder:
        from lrcheck.testing import set_reports_root

        config.stash[EARLIER_ROOT] = set_reports_root(Path(folder).resolve())


def pytest_unconfigure(config: pytest.Config) -> None:
    if EARLIER_ROOT in config.stash:
        from lrcheck.testing import set_reports_root

        set_reports_root(config.stash[EARLIER_ROOT])


class RunsEquivalent:
    """``assert_runs_equivalent`` whose ``out`` defaults to the test's own folder: ``folder``
    on the first call, ``folder-2``, ``folder-3``, … on the next; every folder used is kept in
    ``used`` (the test's report shows them when it fails)."""

    def __init__(self, folder: Path, used: list[Path]) -> None:
        self.folder = folder
        self.used = used

    def __call__(self, reference: Command, candidate: Command,
                 options: RunOptions | None = None, *, out: str | Path | None = None,
                 echo: TextIO | None = None, **keywords: object) -> Report:
        """``assert_runs_equivalent(reference, candidate, options, out=…, echo=…,
        **keywords)``: every option of ``lrcheck run`` (``RunOptions``' fields)."""
        from lrcheck.testing import assert_runs_equivalent

        __tracebackhide__ = True
        if out is None:
            n = len(self.used) + 1
            out = self.folder if n == 1 else self.folder.with_name(f"{self.folder.name}-{n}")
        self.used.append(Path(out))
        return assert_runs_equivalent(reference, candidate, options, out=out, echo=echo,
                                      **keywords)


@pytest.fixture(scope="session")
def lrcheck_reports(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the session's lrcheck reports go under: ``--lrcheck-reports``, else
    ``lrcheck`` in pytest's temporary folder."""
    folder = request.config.getoption("lrcheck_reports", None)
    if folder:
        return Path(folder).resolve()
    return tmp_path_factory.mktemp("lrcheck", numbered=False)


@pytest.fixture
def lrcheck_runs(request: pytest.FixtureRequest, lrcheck_reports: Path) -> RunsEquivalent:
    """``lrcheck.testing.assert_runs_equivalent(reference, candidate, options, **keywords)``,
    every option of ``lrcheck run``, with the report in this test's own folder under
    ``lrcheck_reports`` (named after its node id)."""
    used = request.node.stash.setdefault(FOLDERS, [])
    return RunsEquivalent(lrcheck_reports / folder_name(request.node.nodeid), used)


def folder_name(nodeid: str) -> str:
    """A folder name for the test ``nodeid``: its path and name, every run of characters other
    than letters, digits, ``.``, ``_`` and ``-`` made one ``-``; 120 characters at most."""
    return re.sub(r"[^\w.-]+", "-", nodeid).strip("-")[-120:] or "test"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A failed test that used ``lrcheck_runs`` gets a section naming its report folders."""
    outcome = yield
    report = outcome.get_result()
    folders = item.stash.get(FOLDERS, [])
    if folders and report.failed:
        report.sections.append(("lrcheck reports", "\n".join(
            f"{folder} (report.html, report.md, result.json)" for folder in folders)))
