"""runner.startup: the garbage collector held off while a command starts, and let go (with what
is alive frozen) once a run is built. Each test runs in a fresh interpreter: the collector is
process-wide, and this one's must stay as pytest left it."""

import subprocess
import sys

import pytest

from tests.helpers import HANG_S

pytestmark = pytest.mark.slow


def run(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_hold_turns_the_collector_off_and_release_freezes_then_turns_it_on():
    assert run(
        "import gc, weakref\n"
        "from lrcheck.runner.startup import hold, release\n"
        "class Node: pass\n"
        "hold(); off = gc.isenabled()\n"
        "node = Node(); node.me = node; gone = weakref.ref(node); del node  # a cycle\n"
        "held = gone() is not None\n"
        "release()\n"
        "print(off, held, gc.isenabled(), gc.get_freeze_count() > 0, gone() is None)\n"
    ) == "False True True True True"  # the cycle was collected at release, not frozen


def test_release_without_hold_leaves_the_collector_as_it_was():
    assert run(
        "import gc\n"
        "from lrcheck.runner.startup import release\n"
        "gc.disable(); release(); print(gc.isenabled(), gc.get_freeze_count())\n"
    ) == "False 0"


def test_a_run_once_built_lets_the_held_collector_go():
    assert run(
        "import gc\n"
        "from lrcheck.runner.startup import hold\n"
        "from lrcheck.experiments.cache import load_data\n"
        "from lrcheck.runner import plain\n"
        "from lrcheck.spec import RunSpec\n"
        "hold()\n"
        "spec = RunSpec(bs=32, accum=1, epochs=1, device='cpu', samples=200)\n"
        "seen = []\n"
        "plain.train(spec, load_data(spec.task, spec.seed, spec.samples), device='cpu',\n"
        "            on_start=lambda: seen.append(gc.isenabled()))\n"
        "print(seen, gc.isenabled())\n"
    ) == "[True] True"
