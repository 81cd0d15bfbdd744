"""``checks.recorded.then_free``: ``params`` of a pair whose lockstep stopped — the updates
after it judged free-running from the fingerprints, or a warning saying how far the effects
were judged, which ``--strict`` fails. Never a pass of updates nobody compared."""

from lrcheck.checks.recorded import then_free
from lrcheck.checks.status import FAIL, PASS, SKIP, WARN, CheckResult, strictly
from lrcheck.plan.judging import recorded_judging

LOCKED = CheckResult("params", PASS, 1e-9, None, "lockstep (0 updates started from the "
                     "reference's state; lockstep stopped after update 0: states differ): ok")
STOPPED = recorded_judging([0], "states differ")


def test_the_updates_after_the_stop_fingerprinted_to_the_end_are_judged_free_running():
    free = CheckResult("params", PASS, 1e-7, None, "max |Δsum|/max|p| 1e-7 ≤ 0.0001")
    found = then_free(LOCKED, free, STOPPED, 12, list(range(1, 12)))
    assert found.status == PASS
    assert found.detail.startswith("free-running from update 1, at 11 fingerprinted updates: "
                                   "max |Δsum|/max|p| 1e-7")
    assert found.detail.endswith(f"before it, {LOCKED.detail}")


def test_a_gap_after_the_stop_fails_there():
    free = CheckResult("params", FAIL, 0.02, 3, "|Δsum|/max|p| 0.02 > 0.0001 at update 3")
    found = then_free(LOCKED, free, STOPPED, 12, list(range(1, 12)))
    assert found.status == FAIL and found.first_divergence == 3
    assert found.detail.startswith("free-running from update 1: |Δsum|/max|p| 0.02")


def test_updates_nobody_compared_are_a_warning_that_strict_fails():
    unjudged = [then_free(LOCKED, None, STOPPED, 12, []),
                then_free(LOCKED, CheckResult("params", SKIP, None, None, "none"), STOPPED, 12,
                          []),
                then_free(LOCKED, CheckResult("params", PASS, 0.0, None, "ok"), STOPPED, 12,
                          [1, 5])]
    for found, last in zip(unjudged, (0, 0, 5), strict=True):
        assert found.status == WARN and found.first_divergence == last
        assert found.detail.startswith(
            f"effects judged up to update {last} of 12: judged in lockstep at 1 update of 12 "
            f"(0 to 0); lockstep stopped after update 0: states differ; updates {last + 1} to "
            "11 have no parameter fingerprint in both runs, so nobody compared them")
        assert strictly([found])[0].status == FAIL


def test_a_stop_at_the_last_update_or_a_lockstep_failure_keeps_lockstep_s_verdict():
    assert then_free(LOCKED, None, recorded_judging(range(12), "gone"), 12, []) is LOCKED
    failed = CheckResult("params", FAIL, 0.1, 0, "lockstep: 0.3 > 0.0001 at update 0")
    found = then_free(failed, None, STOPPED, 12, [])
    assert found.status == FAIL and found.first_divergence == 0
    assert found.detail == f"{failed.detail}; {STOPPED.lead(12)}"


def test_a_cause_that_explains_a_drift_after_the_stop_is_said_first():
    drift = CheckResult("params", WARN, 1e-4, 8, "numerical drift, not a failure: …")
    found = then_free(LOCKED, drift, STOPPED, 12, list(range(1, 12)), "the optimizers differ")
    assert found.status == WARN and found.detail.startswith("the optimizers differ; free-")
