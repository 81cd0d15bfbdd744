"""``tests.helpers.wait_for``: it returns what the condition found, and fails, saying why, when the
condition does not come — without measuring how fast anything ran."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import HANG_S, wait_for


def test_returns_the_first_truthy_value():
    answers = iter([None, [], ["rank0"]])
    assert wait_for(lambda: next(answers), HANG_S, "a rank", interval=0) == ["rank0"]


def test_tries_once_more_at_the_deadline_then_fails_naming_what_it_waited_for():
    calls = []
    with pytest.raises(pytest.fail.Exception, match=r"waiting for the mark: gave up after 0 s"):
        wait_for(lambda: calls.append(1), 0, "the mark")
    assert calls == [1]


def test_fails_as_soon_as_the_process_exits_with_its_code_and_output():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; print('bye'); sys.exit(3)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with pytest.raises(pytest.fail.Exception) as info:
        wait_for(lambda: False, HANG_S, "pair b to start training", proc=proc)
    message = str(info.value)
    assert message.startswith("waiting for pair b to start training: the process exited first, "
                              "with code 3")
    assert "stdout:\nbye" in message


def test_a_condition_that_came_true_as_the_process_exited_still_counts():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=HANG_S)
    assert wait_for(lambda: "done", HANG_S, "the result", proc=proc) == "done"
