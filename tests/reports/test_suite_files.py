"""The suite's report files: junit.xml parsed back and checked, summary.md, suite.json and
matrix.png written together."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from lrcheck.reports.files import write_suite
from lrcheck.reports.junit import junit_xml
from lrcheck.reports.summary import suite_markdown
from lrcheck.suite.outcome import PairOutcome, Regression, SuiteResult
from lrcheck.suite.spec import Suite, SuiteEntry


@pytest.fixture
def result(make_report) -> SuiteResult:
    """Five pairs: passed, caught (expected fail), escaped (expected fail but passed), regressed
    against the baseline, crashed."""
    def o(name, report, expect="pass", **kw):
        return PairOutcome(SuiteEntry(name, report.pair, expect, f"[[pair]] {name}"),
                           report=report, seconds=1.5, **kw)

    good, bad = make_report(), make_report(lr_shift=0.01)
    outcomes = [
        o("passed", good, baseline="compared"),
        o("caught", bad, "fail", baseline="compared"),
        o("escaped", good, "fail", baseline="new"),
        o("regressed", good, baseline="compared",
          regressions=[Regression("lr", "the candidate's LR trace changed | a <pipe>")]),
        PairOutcome(SuiteEntry("crashed", good.pair, "pass", "[[pair]] crashed"),
                    error="the candidate run crashed: RuntimeError: boom", error_code=3),
    ]
    suite = Suite("ci.toml", tuple(x.entry for x in outcomes))
    return SuiteResult(suite, outcomes, seconds=9.0, baseline_path="base.json",
                       baseline_missing=["gone"])


def test_junit_has_a_testsuite_per_pair_and_a_testcase_per_check(result):
    root = ET.fromstring(junit_xml(result))
    assert root.tag == "testsuites"
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    assert list(suites) == ["passed", "caught", "escaped", "regressed", "crashed"]

    def cases(name):
        return {c.get("name"): c for c in suites[name].findall("testcase")}

    assert list(cases("passed")) == ["updates", "data", "weights", "lr", "params", "loss",
                                     "metrics", "baseline"]
    assert all(len(c) == 0 for c in cases("passed").values())  # all passed

    # Expected to fail and did: checks do not fail; the expectation case passes.
    caught = cases("caught")
    assert caught["lr"].find("failure") is None
    assert "expected to fail" in caught["lr"].find("system-out").text
    assert caught["expectation"].find("failure") is None

    escaped = cases("escaped")["expectation"].find("failure")
    assert escaped.get("message").startswith("expected fail but passed")

    regressed = cases("regressed")["baseline"].find("failure")
    assert "LR trace changed | a <pipe>" in regressed.text

    crashed = cases("crashed")["run"].find("error")
    assert "RuntimeError: boom" in crashed.get("message")

    # Counts agree with the elements, per suite and in total, as CI readers expect.
    for element in [root, *suites.values()]:
        for attribute in ("tests", "failures", "errors", "skipped", "time"):
            assert element.get(attribute) is not None, (element.get("name"), attribute)
    assert suites["escaped"].get("failures") == "1"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("35", "2", "1")
    assert float(root.get("time")) == 9.0


def test_summary_markdown_lists_pairs_checks_deltas_plots_and_problems(result):
    text = suite_markdown(result)
    lines = text.splitlines()
    assert lines[0] == "## ❌ lrcheck suite `ci.toml`: FAIL"
    header = next(line for line in lines if line.startswith("| pair |"))
    assert header.count("|") - header.count("\\|") == 16
    assert "max \\|ΔLR\\|" in header and "Δ accuracy" in header
    rows = [line for line in lines if line.startswith("| `")]
    assert len(rows) == 5 and all(row.count("|") - row.count("\\|") == 16 for row in rows)
    assert "[lr](passed/lr.png) · [loss](passed/loss.png)" in rows[0]
    assert ("| `caught` | fail | ❌ fail | ✅ ok | ✅ pass | ✅ pass | ✅ pass | ❌ fail |"
            in rows[1])
    assert "| 0.01 |" in rows[1]  # max |ΔLR|
    assert "💥 error" in rows[4]
    assert "- **`escaped`** (❌ unexpected): expected fail but passed" in text
    assert "a <pipe>" in text and "changed \\| a" in text
    assert "in the baseline but not in this suite: `gone`" in text
    assert "<details><summary>Failed checks</summary>" in text


def test_write_suite_writes_the_five_files(tmp_path, result):
    write_suite(result, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.html", "junit.xml", "matrix.png",
                                                          "suite.json", "summary.md"]
    data = json.loads((tmp_path / "suite.json").read_text())
    assert data["exit_code"] == 3 and [p["status"] for p in data["pairs"]] == [
        "ok", "ok", "unexpected", "regression", "error"]
    assert (tmp_path / "matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def interrupted(make_report) -> SuiteResult:
    """Ctrl-C during the second of three pairs: one finished, one incomplete, one not run."""
    report = make_report()
    entries = tuple(SuiteEntry(name, report.pair, "pass", f"[[pair]] {name}")
                    for name in ("done", "stopped", "later"))
    outcomes = [
        PairOutcome(entries[0], report=report, seconds=1.5),
        PairOutcome(entries[1], interrupted="interrupted (Ctrl-C) during the candidate run; "
                    "reference finished, candidate interrupted after 2 of 8 updates",
                    partial_saved=True, seconds=0.5),
        PairOutcome(entries[2], not_run=True),
    ]
    return SuiteResult(Suite("ci.toml", entries), outcomes, seconds=2.0,
                       interrupted="interrupted (Ctrl-C) during pair 2 of 3 ('stopped')")


def test_an_interrupted_suite_lists_the_incomplete_pair_and_those_not_run(tmp_path, interrupted):
    from lrcheck.reports.suite_table import verdict_lines

    write_suite(interrupted, tmp_path)
    data = json.loads((tmp_path / "suite.json").read_text())
    assert (data["verdict"], data["exit_code"], data["interrupted"]) == (
        "incomplete", 130, "interrupted (Ctrl-C) during pair 2 of 3 ('stopped')")
    assert [(p["status"], p["verdict"], p["folder"]) for p in data["pairs"]] == [
        ("ok", "pass", "done"), ("incomplete", "incomplete", "stopped"),
        ("not_run", "not_run", None)]
    assert data["pairs"][2]["reason"] == "not run: interrupted"
    assert (data["counts"]["incomplete"], data["counts"]["not_run"]) == (1, 1)

    suites = {s.get("name"): s for s in ET.parse(tmp_path / "junit.xml").getroot()}
    assert suites["done"].find("testcase/skipped") is None
    stopped, later = (suites[n].find("testcase[@name='run']/skipped") for n in ("stopped", "later"))
    assert stopped.get("message").startswith("interrupted (Ctrl-C) during the candidate run")
    assert later.get("message") == "not run: interrupted"
    assert (suites["later"].get("skipped"), suites["later"].get("errors")) == ("1", "0")

    text = (tmp_path / "summary.md").read_text()
    assert text.splitlines()[0] == "## ⏹️ lrcheck suite `ci.toml`: INCOMPLETE"
    assert "**interrupted (Ctrl-C) during pair 2 of 3 ('stopped')**; 1 not run." in text
    assert "| `later` | pass | ➖ not run | ➖ not run |" in text
    assert "- **`later`** (➖ not run): not run: interrupted" in text

    lines = [line.plain for line in verdict_lines(interrupted)]
    assert lines == [
        "suite: INCOMPLETE — interrupted (Ctrl-C) during pair 2 of 3 ('stopped'): 1 of 3 pairs "
        "as expected, 1 not run, in 2.0 s",
        "  INCOMPLETE stopped: interrupted (Ctrl-C) during the candidate run; reference "
        "finished, candidate interrupted after 2 of 8 updates",
        "  NOT RUN later: not run: interrupted"]
