"""``lrcheck.testing.assert_equivalent`` as a user's pytest would call it."""

import pytest

from lrcheck.testing import assert_equivalent


def test_returns_the_report_when_the_pair_trains_alike():
    report = assert_equivalent(accum=2, bs=16, epochs=1)
    assert report.ok and report.pair.candidate.accum == 2


def test_fails_with_the_table_in_the_message():
    with pytest.raises(AssertionError) as info:
        assert_equivalent(accum=2, bs=16, epochs=1, policy="per-micro-batch")
    message = str(info.value)
    print(message)
    assert "does not train like its reference" in message
    assert "│ lr " in message and "FAIL" in message and "verdict: FAIL" in message
