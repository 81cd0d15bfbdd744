from __future__ import annotations

import pytest

from lrcheck.errors import SpecError
from lrcheck.runner.ranks.fault import Fault, InjectedFault, fault_from_env, fault_hook, parse_fault


def test_parse():
    assert parse_fault("1:3") == Fault(1, 3, hang=False)
    assert parse_fault("0:0:hang") == Fault(0, 0, hang=True)
    assert fault_from_env({}) is None
    assert fault_from_env({"LRCHECK_FAULT": "2:5"}) == Fault(2, 5)


@pytest.mark.parametrize("text", ["1", "a:3", "1:3:stall", "-1:2", "1:2:hang:x"])
def test_bad_switch_is_bad_input(text):
    with pytest.raises(SpecError, match="RANK:UPDATE"):
        parse_fault(text)


def test_trips_only_on_the_named_rank_and_update():
    fault = Fault(1, 3)
    fault.trip(0, 3)
    fault.trip(1, 2)
    with pytest.raises(InjectedFault, match="rank 1 raise after update 3"):
        fault.trip(1, 3)


def test_hook_is_armed_on_the_candidate_only():
    environ = {"LRCHECK_FAULT": "1:0"}
    assert fault_hook("reference", 1, environ) is None
    assert fault_hook("candidate", 1, {}) is None

    class Record:
        step = 0

    with pytest.raises(InjectedFault):
        fault_hook("candidate", 1, environ)(Record(), 10)
