"""reports.render: plots drawn in a helper process, and drawn here when the helper is gone."""

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lrcheck.errors import SpecError
from lrcheck.procs.marks import alive
from lrcheck.reports.plots import Plot, draw_loss
from lrcheck.reports.render import Renderer, draw_in_two
from tests.helpers import HANG_S, wait_for

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def loss_plot(path):
    x = np.arange(50)
    return Plot(path, draw_loss, {"ref": (x, np.exp(-x / 10)), "cand": (x, np.exp(-x / 11)),
                                  "title": "test"})


def assert_png(path):
    assert path.read_bytes()[:8] == PNG_SIGNATURE


@pytest.mark.slow
def test_plots_are_drawn_in_a_helper_process(tmp_path):
    with Renderer(background=True) as renderer:
        helper = renderer.helper()
        assert helper is not None and helper != os.getpid()
        renderer.draw([loss_plot(tmp_path / "a.png"), loss_plot(tmp_path / "b.png")])
        renderer.finish()
        assert_png(tmp_path / "a.png")
        assert_png(tmp_path / "b.png")
    assert sorted(os.listdir(tmp_path)) == ["a.png", "b.png"]  # no temporaries left


@pytest.mark.slow
def test_a_process_whose_plots_are_drawn_by_the_helper_never_imports_matplotlib(tmp_path):
    code = (
        "import sys, numpy as np\n"
        "from lrcheck.reports.plots import Plot, draw_loss\n"
        "from lrcheck.reports.render import Renderer\n"
        "with Renderer(background=True) as r:\n"
        "    assert r.in_background\n"
        "    x = np.arange(5)\n"
        f"    r.draw([Plot(__import__('pathlib').Path({str(tmp_path / 'p.png')!r}), draw_loss,"
        " {'ref': (x, x), 'cand': (x, x), 'title': 't'})])\n"
        "print(sorted(m for m in sys.modules if m.startswith('matplotlib')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert_png(tmp_path / "p.png")


def test_without_background_plots_are_drawn_here_at_once(tmp_path):
    renderer = Renderer(background=False)
    assert renderer.helper() is None
    renderer.draw([loss_plot(tmp_path / "a.png")])
    assert_png(tmp_path / "a.png")  # before finish(): drawn synchronously
    renderer.close()


def write_page(path, pictures):
    """A page that needs its pictures drawn before it (as report.html inlines the PNGs)."""
    path.write_text(" ".join(str(len(picture.read_bytes())) for picture in pictures))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="draw_in_two forks")
def test_draw_in_two_draws_every_picture_then_the_pages_and_leaves_no_process(tmp_path):
    pictures = [tmp_path / f"{name}.png" for name in "abcde"]
    page = Plot(tmp_path / "page.html", write_page, {"pictures": pictures})
    before = children()
    draw_in_two([*(loss_plot(path) for path in pictures), page])
    for path in pictures:
        assert_png(path)
    assert all(int(n) > 0 for n in page.path.read_text().split())
    assert children() == before  # the child that drew half of them was reaped


def children():
    """This process's children (Linux), or None where that cannot be read."""
    try:
        return sorted(Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split())
    except OSError:
        return None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="draw_in_two forks")
@pytest.mark.parametrize("bad", [0, 1])  # drawn by this process, or by the child
def test_draw_in_two_raises_the_first_error_after_drawing_the_rest(tmp_path, bad):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    paths = [tmp_path / "a.png", tmp_path / "b.png"]
    paths[bad] = blocker / "bad.png"
    with pytest.raises(SpecError, match="cannot write"):
        draw_in_two([loss_plot(path) for path in paths])
    assert_png(paths[1 - bad])


@pytest.mark.slow
def test_plots_the_helper_has_not_begun_are_drawn_in_two_processes_at_finish(tmp_path):
    paths = [tmp_path / f"{n}.png" for n in range(6)]
    with Renderer(background=True) as renderer:
        renderer.helper()
        renderer.draw([loss_plot(path) for path in paths])
        renderer.draw([Plot(tmp_path / "page.html", write_page, {"pictures": paths})])
        renderer.finish()
        assert renderer.in_background
    for path in paths:
        assert_png(path)
    assert all(int(n) > 0 for n in (tmp_path / "page.html").read_text().split())


@pytest.mark.slow
def test_a_plot_that_fails_raises_at_finish_after_the_others_are_drawn(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with Renderer(background=True) as renderer:
        renderer.draw([loss_plot(blocker / "bad.png"), loss_plot(tmp_path / "good.png")])
        with pytest.raises(SpecError, match="cannot write"):
            renderer.finish()
    assert_png(tmp_path / "good.png")


@pytest.mark.slow
def test_plots_are_drawn_here_when_the_helper_dies(tmp_path):
    before = children()
    with Renderer(background=True) as renderer:
        helper = renderer.helper()
        os.kill(helper, signal.SIGKILL)
        wait_for(lambda: not alive(helper), HANG_S, "the helper to die")
        renderer.draw([loss_plot(tmp_path / "a.png"), loss_plot(tmp_path / "b.png")])
        renderer.finish()
        assert not renderer.in_background
    assert_png(tmp_path / "a.png")
    assert_png(tmp_path / "b.png")
    assert children() == before  # the dead helper was reaped


@pytest.mark.slow
def test_the_helper_ignores_ctrl_c_which_is_this_process_s_to_handle(tmp_path):
    # Ctrl-C handled here, as Python sets it up unless it started with SIGINT ignored (a
    # background job of a non-interactive shell): the helper must ignore it by itself.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with Renderer(background=True) as renderer:
            helper = renderer.helper()
            os.kill(helper, signal.SIGINT)
            renderer.draw([loss_plot(tmp_path / "a.png")])
            renderer.finish()
            assert renderer.helper() == helper  # the same helper, still alive
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored here
    finally:
        signal.signal(signal.SIGINT, previous)
    assert_png(tmp_path / "a.png")


def test_report_files_get_the_umask_s_permissions_not_owner_only(tmp_path):
    previous = os.umask(0o022)
    try:
        Renderer().draw([loss_plot(tmp_path / "a.png")])
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "a.png").stat().st_mode) == 0o644


def write_pid(path, until=None):
    """A 'picture' that says which process drew it (once the file ``until`` exists)."""
    if until is not None:
        wait_for(until.exists, HANG_S, f"{until} to be made")
    path.write_text(str(os.getpid()))


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "fork"), reason="draw_in_two forks")
def test_every_plot_the_helper_has_not_begun_is_taken_back_at_finish(tmp_path):
    # The helper is handed one plot at a time: while it draws the first (until finish() has
    # taken the others back: no race with the machine's load), the next four wait here, and
    # finish() has the helper draw all four in two processes; the first of them (a pool would
    # already have queued it to the helper) in the forked one.
    taken_back = tmp_path / "taken-back"
    with Renderer(background=True) as renderer:
        helper = renderer.helper()
        take_back = renderer._take_back

        def take_back_then_let_the_first_end():
            try:
                take_back()
            finally:
                taken_back.touch()

        renderer._take_back = take_back_then_let_the_first_end
        paths = [tmp_path / f"{n}.txt" for n in range(5)]
        renderer.draw([Plot(paths[0], write_pid, {"until": taken_back}),
                       *(Plot(path, write_pid, {}) for path in paths[1:])])
        renderer.finish()
    drawn_by = [int(path.read_text()) for path in paths]
    assert drawn_by[0] == helper
    assert drawn_by[1] != helper and drawn_by[1] == drawn_by[3]  # the forked child's half
    assert drawn_by[2] == drawn_by[4] == helper


def test_halves_balance_the_drawing_time_and_keep_the_order(tmp_path):
    from lrcheck.reports.render import halves

    def plot(name, weight):
        return Plot(tmp_path / name, write_pid, {}, weight=weight)

    lr, loss, metrics, matrix = (plot("lr", 1.5), plot("loss", 1.0), plot("metrics", 1.3),
                                 plot("matrix", 3.0))
    assert halves([lr, loss, metrics, matrix]) == ([matrix], [lr, loss, metrics])
    assert halves([loss, loss, loss, loss]) == ([loss, loss], [loss, loss])
    assert halves([lr]) == ([lr], [])


def test_a_ctrl_c_while_a_plot_is_handed_over_loses_nothing_and_finish_returns(tmp_path):
    # A Ctrl-C can land in the main thread while it hands the helper a plot (a suite goes on
    # after one that lands "after both runs"): that plot waits again, and finish() draws it
    # with the ones sent after (the plots after it in the interrupted draw() were not sent).
    import threading
    from concurrent.futures import ThreadPoolExecutor

    class Interrupted(ThreadPoolExecutor):  # stands in for the helper's pool
        calls = 0

        def submit(self, *args, **kwargs):
            Interrupted.calls += 1
            if Interrupted.calls == 1:
                raise KeyboardInterrupt
            return super().submit(*args, **kwargs)

    renderer = Renderer()
    renderer._pool = renderer._started = Interrupted(1)
    paths = [tmp_path / f"{n}.txt" for n in range(3)]
    with pytest.raises(KeyboardInterrupt):
        renderer.draw([Plot(path, write_pid, {}) for path in paths[:2]])
    renderer.draw([Plot(paths[2], write_pid, {})])
    waiting = threading.Thread(target=renderer.finish, daemon=True)
    waiting.start()
    waiting.join(30)
    assert not waiting.is_alive(), "finish() hangs"
    assert [path.exists() for path in paths] == [True, False, True]
    renderer.close()


def blocked_signals(pid: int) -> set[int]:
    """The signals process ``pid`` blocks (Linux: /proc/PID/status SigBlk)."""
    line = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                if line.startswith("SigBlk:"))
    mask = int(line.split()[1], 16)
    return {n for n in range(1, 65) if mask >> (n - 1) & 1}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc (Linux)")
def test_the_helper_leaves_a_sighup_this_process_handles_to_it_and_starts_nothing_else(tmp_path):
    """A closed terminal sends SIGHUP to the whole process group. lrcheck stops on it (cli);
    the helper must not die of it first. The helper is the one process a Renderer starts: no
    resource tracker of multiprocessing's (which a SIGHUP killed and the helper's shutdown
    started again, printing a KeyError traceback per semaphore)."""
    def stop(signum, frame):
        raise AssertionError("a SIGHUP reached this process")

    previous = signal.signal(signal.SIGHUP, stop)  # as cli._stop_on_signals does
    try:
        before = children()
        with Renderer(background=True) as renderer:
            helper = renderer.helper()
            assert children() == sorted([*before, str(helper)])
            assert signal.SIGHUP in blocked_signals(helper)
            os.kill(helper, signal.SIGHUP)
            renderer.draw([loss_plot(tmp_path / "a.png")])
            renderer.finish()
            assert renderer.helper() == helper  # alive still
        assert_png(tmp_path / "a.png")
        assert children() == before  # close() stopped and reaped it
        assert signal.SIGHUP not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # here: lifted
    finally:
        signal.signal(signal.SIGHUP, previous)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)  # a process that leaves SIGHUP to its default
    try:
        with Renderer(background=True) as renderer:  # (a rank under torchrun) lets it kill
            assert signal.SIGHUP not in blocked_signals(renderer.helper())
    finally:
        signal.signal(signal.SIGHUP, previous)


@pytest.mark.slow
def test_a_script_without_a_main_guard_gets_its_plots_and_no_traceback(tmp_path):
    # A helper spawned by multiprocessing ran the script again and could not start a helper of
    # its own (that process drew the plot itself; stopping the resource tracker it never started
    # was a TypeError). runner.helper's helper does not run the script at all.
    script = tmp_path / "script.py"
    script.write_text(
        "import numpy as np\n"
        "from pathlib import Path\n"
        "from lrcheck.reports.plots import Plot, draw_loss\n"
        "from lrcheck.reports.render import Renderer\n"
        "x = np.arange(5)\n"
        "with Renderer(background=True) as r:\n"
        f"    r.draw([Plot(Path({str(tmp_path / 'p.png')!r}), draw_loss,"
        " {'ref': (x, x), 'cand': (x, x), 'title': 't'})])\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=HANG_S, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    assert_png(tmp_path / "p.png")
