"""runner.helper: calls made in one helper process, in order; a helper that dies fails what it
had not finished; the fork that runs two calls at once."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from lrcheck.runner.helper import Helper, HelperGone, in_two
from tests.helpers import HANG_S, wait_for


def say(text: str) -> str:
    print(text)  # the helper's stdout is its stderr: this must not break the replies
    return text


def fail(text: str) -> None:
    raise ValueError(text)


def path() -> list[str]:
    return sys.path


def unpicklable() -> object:
    return lambda: None


@pytest.mark.slow
def test_calls_run_in_the_helper_in_order_with_their_results_and_errors():
    helper = Helper()
    try:
        pid = helper.submit(os.getpid).result(HANG_S)
        assert pid == helper.pid != os.getpid()
        futures = [helper.submit(say, str(n)) for n in range(20)]
        assert [f.result(HANG_S) for f in futures] == [str(n) for n in range(20)]
        with pytest.raises(ValueError, match="^bad$"):
            helper.submit(fail, "bad").result(HANG_S)
        with pytest.raises(RuntimeError, match="does not pickle"):
            helper.submit(unpicklable).result(HANG_S)
        with pytest.raises(Exception, match="lambda"):  # here, before anything is sent
            helper.submit(lambda: None).result(HANG_S)
        assert helper.submit(path).result(HANG_S) == sys.path  # this process's
    finally:
        helper.shutdown()
    with pytest.raises(RuntimeError, match="after shutdown"):
        helper.submit(os.getpid)


@pytest.mark.slow
def test_a_helper_that_dies_fails_what_it_had_not_finished():
    helper = Helper()
    try:
        pid = helper.submit(os.getpid).result(HANG_S)
        import time

        sleeping = helper.submit(time.sleep, 60)
        queued = helper.submit(os.getpid)
        os.kill(pid, signal.SIGKILL)
        for future in (sleeping, queued):
            with pytest.raises(HelperGone):
                future.result(HANG_S)
        with pytest.raises(HelperGone):
            helper.submit(os.getpid)
    finally:
        helper.shutdown()


@pytest.mark.slow
def test_shutdown_waits_for_what_was_sent_and_what_it_cancels_never_hangs():
    helper = Helper()
    done = [helper.submit(say, str(n)) for n in range(5)]
    helper.shutdown(wait=True)
    assert [f.result(0) for f in done] == [str(n) for n in range(5)]
    import time

    helper = Helper()
    helper.submit(os.getpid).result(HANG_S)
    first = helper.submit(time.sleep, 0.5)
    wait_for(first.running, HANG_S, "the first call to be sent")
    rest = [helper.submit(os.getpid) for _ in range(50)]
    helper.shutdown(wait=True, cancel_futures=True)
    assert first.result(0) is None
    assert all(f.cancelled() or f.result(0) == helper.pid for f in rest)  # none left hanging


@pytest.mark.slow
def test_an_initializer_that_fails_breaks_the_helper():
    helper = Helper(initializer=_broken_start)
    try:
        with pytest.raises(HelperGone):
            helper.submit(os.getpid).result(HANG_S)
    finally:
        helper.shutdown()


def _broken_start() -> None:
    raise OSError("no start")


def write(path, text):
    path.write_text(text)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="in_two forks")
def test_in_two_runs_both_and_raises_the_first_error(tmp_path):
    in_two(lambda: write(tmp_path / "a", str(os.getpid())),
           lambda: write(tmp_path / "b", str(os.getpid())), "the child")
    assert (tmp_path / "a").read_text() != (tmp_path / "b").read_text() == str(os.getpid())
    with pytest.raises(ValueError, match="child's"):
        in_two(lambda: fail("child's"), lambda: None, "the child")
    with pytest.raises(ValueError, match="mine"):
        in_two(lambda: fail("child's"), lambda: fail("mine"), "the child")
    with pytest.raises(RuntimeError, match="^the child ended with status"):
        in_two(lambda: os._exit(3), lambda: None, "the child")
