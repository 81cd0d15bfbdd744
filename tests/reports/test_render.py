"""reports.render: plots drawn in a helper process, and drawn here when the helper is gone."""

import os
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest

from lrcheck.errors import SpecError
from lrcheck.reports.plots import Plot, draw_loss
from lrcheck.reports.render import Renderer
from lrcheck.runner.dist.procs import alive
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
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert_png(tmp_path / "p.png")


def test_without_background_plots_are_drawn_here_at_once(tmp_path):
    renderer = Renderer(background=False)
    assert renderer.helper() is None
    renderer.draw([loss_plot(tmp_path / "a.png")])
    assert_png(tmp_path / "a.png")  # before finish(): drawn synchronously
    renderer.close()


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
    with Renderer(background=True) as renderer:
        helper = renderer.helper()
        os.kill(helper, signal.SIGKILL)
        wait_for(lambda: not alive(helper), HANG_S, "the helper to die")
        renderer.draw([loss_plot(tmp_path / "a.png"), loss_plot(tmp_path / "b.png")])
        renderer.finish()
        assert not renderer.in_background
    assert_png(tmp_path / "a.png")
    assert_png(tmp_path / "b.png")


@pytest.mark.slow
def test_the_helper_ignores_ctrl_c_which_is_this_process_s_to_handle(tmp_path):
    with Renderer(background=True) as renderer:
        helper = renderer.helper()
        os.kill(helper, signal.SIGINT)
        renderer.draw([loss_plot(tmp_path / "a.png")])
        renderer.finish()
        assert renderer.helper() == helper  # the same helper, still alive
    assert_png(tmp_path / "a.png")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored here


def test_report_files_get_the_umask_s_permissions_not_owner_only(tmp_path):
    previous = os.umask(0o022)
    try:
        Renderer().draw([loss_plot(tmp_path / "a.png")])
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "a.png").stat().st_mode) == 0o644
