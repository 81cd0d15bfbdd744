"""The errors lrcheck raises, and the stop that is not one."""

from pathlib import Path

from lrcheck.errors import Interrupted, LrcheckError, RunError, SpecError


def test_each_error_carries_the_exit_code_of_design_md():
    assert (LrcheckError.exit_code, SpecError.exit_code, RunError.exit_code) == (1, 2, 3)


def test_a_stop_is_not_an_lrcheck_error_so_error_handlers_let_it_through():
    assert not issubclass(Interrupted, LrcheckError)
    try:
        raise Interrupted("interrupted (Ctrl-C) during the candidate run", result=None)
    except LrcheckError:
        raise AssertionError("a stop was taken for an error") from None
    except Interrupted as stop:
        assert stop.exit_code == 130 and stop.saved is None


def test_saved_in_gives_the_same_stop_saying_where_what_was_recorded_is():
    stop = Interrupted("interrupted (Ctrl-C)", result="recorded")
    saved = stop.saved_in(Path("out/result.json"))
    assert (str(saved), saved.result, saved.saved) == ("interrupted (Ctrl-C)", "recorded",
                                                        Path("out/result.json"))
    assert stop.saved is None  # the first one is left as it was
