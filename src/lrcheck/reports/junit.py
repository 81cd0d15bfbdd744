"""``junit.xml``: the suite for CI test reporters (GitHub, GitLab, Jenkins, Azure, CircleCI).

A ``<testsuites>`` root; a ``<testsuite>`` per pair; in it a ``<testcase>`` per check. What fails
a test case is what fails the suite, so the reporter's counts agree with the exit code:

- a pair expected to pass: a failed check is a ``<failure>``, a skipped one ``<skipped>``, a
  warning passes with the reason in ``<system-out>``;
- a pair expected to fail: checks never fail (their details go to ``<system-out>``); one more
  case, ``expectation``, fails when no check failed ("expected fail but passed");
- with a baseline, a ``baseline`` case fails on a regression;
- a pair without a result has one ``run`` case with an ``<error>``;
- after Ctrl-C, the pair that was running and those not run have one ``run`` case that is
  ``<skipped>`` (``not run: interrupted``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from lrcheck.checks import FAIL, SKIP, WARN
from lrcheck.spec import CommandPair, PairSpec
from lrcheck.suite.outcome import INCOMPLETE, NOT_RUN, PairOutcome, SuiteResult


def _case(suite: ET.Element, pair: str, name: str, seconds: float = 0.0) -> ET.Element:
    return ET.SubElement(suite, "testcase", name=name, classname=f"lrcheck.{pair}",
                         time=f"{seconds:.3f}")


def _mark(case: ET.Element, tag: str, message: str, detail: str | None = None) -> None:
    """Add ``<failure>``, ``<error>``, ``<skipped>`` or ``<system-out>`` to a test case."""
    if tag == "system-out":
        ET.SubElement(case, tag).text = message
        return
    element = ET.SubElement(case, tag, message=message.splitlines()[0][:500])
    if tag != "skipped":
        element.set("type", tag)
        element.text = detail or message


def _sides(pair: PairSpec | CommandPair) -> tuple[tuple[str, str], ...]:
    """The candidate and the reference: lrcheck's labels, or a pair's command lines."""
    if isinstance(pair, CommandPair):
        return ("candidate", pair.candidate), ("reference", pair.reference)
    return ("candidate", pair.candidate.label), ("reference", pair.reference.label)


def _pair_suite(outcome: PairOutcome) -> ET.Element:
    name, expect = outcome.entry.name, outcome.entry.expect
    suite = ET.Element("testsuite", name=name)
    properties = ET.SubElement(suite, "properties")
    for key, value in (("expect", expect), ("verdict", outcome.verdict),
                       ("status", outcome.status), ("origin", outcome.entry.origin),
                       *_sides(outcome.entry.pair),
                       ("shared_reference", str(outcome.shared_reference).lower())):
        ET.SubElement(properties, "property", name=key, value=value)

    if outcome.status in (INCOMPLETE, NOT_RUN):
        _mark(_case(suite, name, "run", outcome.seconds), "skipped", outcome.reason)
        return suite
    if outcome.report is None:
        _mark(_case(suite, name, "run", outcome.seconds), "error", outcome.error or "no result")
        return suite
    for check in outcome.report.checks:
        case = _case(suite, name, check.name)
        text = f"{check.status}: {check.detail}"
        if check.status == FAIL and expect == "pass":
            _mark(case, "failure", f"{check.name} failed: {check.detail}", text)
        elif check.status == SKIP:
            _mark(case, "skipped", check.detail)
        elif check.status in (FAIL, WARN):
            _mark(case, "system-out", f"{text} (expected to fail)" if check.status == FAIL
                  else text)
    if expect == "fail":
        case = _case(suite, name, "expectation")
        if outcome.met:
            _mark(case, "system-out", outcome.reason)
        else:
            _mark(case, "failure", outcome.reason)
    if outcome.baseline != "none":
        case = _case(suite, name, "baseline")
        if outcome.regressions:
            _mark(case, "failure", "regression against the baseline",
                  "\n".join(r.detail for r in outcome.regressions))
        elif outcome.baseline == "new":
            _mark(case, "system-out", "not in the baseline: nothing to compare")
    return suite


def _count(element: ET.Element) -> dict[str, int]:
    cases = element.iter("testcase")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for case in cases:
        counts["tests"] += 1
        for tag, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            counts[key] += case.find(tag) is not None
    return counts


def junit_xml(result: SuiteResult) -> str:
    """The JUnit XML document of ``result``."""
    root = ET.Element("testsuites", name=f"lrcheck suite {result.suite.path}")
    for outcome in result.outcomes:
        suite = _pair_suite(outcome)
        for key, value in _count(suite).items():
            suite.set(key, str(value))
        suite.set("time", f"{outcome.seconds:.3f}")
        root.append(suite)
    for key, value in _count(root).items():
        root.set(key, str(value))
    root.set("time", f"{result.seconds:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
