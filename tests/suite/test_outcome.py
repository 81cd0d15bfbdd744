"""Expectations: a pair meets its expectation when its verdict is the expected one; "expected
fail but passed" is a failure too; the suite's exit code is the worst pair's."""

from __future__ import annotations

from dataclasses import replace

from lrcheck.checks import CHECK_NAMES
from lrcheck.suite.outcome import PairOutcome, Regression, SuiteResult
from lrcheck.suite.spec import Suite, SuiteEntry


def outcome(report, expect="pass", **kw) -> PairOutcome:
    entry = SuiteEntry("p", report.pair, expect, "[[pair]] #1")
    return PairOutcome(entry, report=report, **kw)


def test_expectations(make_report):
    good, bad = make_report(), make_report(lr_shift=0.01)
    assert good.verdict == "pass" and bad.verdict == "fail"

    met = outcome(good)
    assert (met.met, met.status, met.exit_code) == (True, "ok", 0)
    assert met.reason == "passed as expected"

    caught = outcome(bad, expect="fail")
    assert (caught.status, caught.exit_code) == ("ok", 0)
    assert caught.reason == "failed as expected (lr)"

    escaped = outcome(good, expect="fail")
    assert (escaped.met, escaped.status, escaped.exit_code) == (False, "unexpected", 1)
    assert escaped.reason.startswith("expected fail but passed")

    broke = outcome(bad)
    assert (broke.status, broke.exit_code) == ("unexpected", 1)
    assert broke.reason.startswith("expected pass but failed (lr): lr: ")
    assert "first differs at update 2" in broke.reason


def test_regressions_and_errors(make_report):
    regressed = outcome(make_report(), regressions=[Regression("lr", "trace changed")])
    assert (regressed.status, regressed.exit_code) == ("regression", 1)
    assert regressed.reason == "regression against the baseline: trace changed"

    report = make_report()
    crashed = PairOutcome(SuiteEntry("c", report.pair, "fail", "[[pair]] #2"),
                          error="the candidate run crashed: boom", error_code=3)
    assert (crashed.verdict, crashed.status, crashed.met, crashed.exit_code) == (
        "error", "error", False, 3)

    suite = Suite("ci.toml", (regressed.entry, crashed.entry))
    result = SuiteResult(suite, [regressed, crashed])
    assert result.exit_code == 3 and result.verdict == "fail"
    assert result.counts() == {"pairs": 2, "ok": 0, "unexpected": 0, "regression": 1, "error": 1,
                               "incomplete": 0, "not_run": 0}
    assert SuiteResult(suite, [outcome(make_report())]).exit_code == 0


def test_deltas_and_suite_json(make_report):
    o = outcome(make_report(accuracy=0.85, f1=0.9))
    d = o.deltas()
    assert d["max_abs_dlr"] == 0.0
    assert round(d["accuracy"], 6) == -0.05 and round(d["f1_macro"], 6) == 0.02
    data = SuiteResult(Suite("ci.toml", (o.entry,)), [o]).to_dict()
    assert data["schema_version"] == 1 and data["kind"] == "lrcheck-suite"
    pair = data["pairs"][0]
    assert pair["folder"] == "p" and pair["status"] == "unexpected"  # metrics beyond 0.01
    assert [c["name"] for c in pair["checks"]] == list(CHECK_NAMES)
    assert replace(o.entry, expect="fail").expect == "fail"


def test_an_interrupted_suite_exits_130_whatever_its_pairs_gave(make_report):
    crashed = PairOutcome(SuiteEntry("c", make_report().pair, "pass", "[[pair]] #1"),
                          error="the candidate run crashed: boom", error_code=3)
    stopped = PairOutcome(SuiteEntry("s", crashed.entry.pair, "pass", "[[pair]] #2"),
                          interrupted="interrupted (Ctrl-C) during the reference run")
    later = PairOutcome(SuiteEntry("l", crashed.entry.pair, "pass", "[[pair]] #3"), not_run=True)
    assert [(o.status, o.verdict, o.exit_code, o.met) for o in (stopped, later)] == [
        ("incomplete", "incomplete", 130, False), ("not_run", "not_run", 130, False)]
    suite = Suite("ci.toml", (crashed.entry, stopped.entry, later.entry))
    result = SuiteResult(suite, [crashed, stopped, later], interrupted="interrupted (Ctrl-C)")
    assert (result.exit_code, result.verdict) == (130, "incomplete")
