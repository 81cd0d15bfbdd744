"""A suite run with --jobs 2, and as 3 shards merged, gives every pair the result.json of the
sequential run (timings masked); Ctrl-C and SIGTERM stop every worker, keep what finished and
the running pairs as incomplete, and leave no process behind. Real trainings of wine, small."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from lrcheck.api import suite_jobs
from lrcheck.errors import SpecError
from lrcheck.procs.marks import HAS_PROC, alive, marked
from lrcheck.runner.workers import Workers
from lrcheck.suite.parallel import SUITE_WORKER_ENV, _schedule
from lrcheck.suite.queue import PairQueue
from lrcheck.suite.spec import parse_suite
from tests.helpers import HANG_S, hanging_suite, session, wait_for

# Two reference groups: a, b and d train like bs 16 (d's policy is the bug), c and e like bs 8.
SUITE = """
    [defaults]
    task = "wine"
    epochs = {epochs}

    [[pair]]
    name = "a"
    bs = 8
    accum = 2

    [[pair]]
    name = "b"
    bs = 4
    accum = 4

    [[pair]]
    name = "c"
    bs = 4
    accum = 2

    [[pair]]
    name = "d"
    bs = 8
    accum = 2
    policy = "per-micro-batch"
    expect = "fail"

    [[pair]]
    name = "e"
    bs = 2
    accum = 4
"""
NAMES = "abcde"
TIMINGS = ("seconds", "wall_seconds")


def lrcheck(*args, env=None, **kw):
    return subprocess.Popen([sys.executable, "-m", "lrcheck", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def finished(proc, timeout=HANG_S):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def result(folder, name):
    data = json.loads((folder / name / "result.json").read_text())
    for key in ("environment", "files"):
        data.pop(key)
    for run in data["runs"].values():
        for key in TIMINGS:
            run.pop(key, None)
    return data


@pytest.fixture
def suite_file(tmp_path):
    path = tmp_path / "ci.toml"
    path.write_text(textwrap.dedent(SUITE.format(epochs=1)))
    return path


@pytest.fixture
def token():
    """The suite's SUITE_WORKER_ENV token; whatever carries it is killed when the test ends
    (workers lead process groups of their own: killing the suite's does not reach them)."""
    mine = f"test-{os.getpid()}-{os.urandom(4).hex()}"
    yield mine
    for pid in marked(mine, SUITE_WORKER_ENV):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_jobs_and_merged_shards_give_the_sequential_results(tmp_path, suite_file):
    code, _, err = finished(lrcheck("suite", str(suite_file), "--out", str(tmp_path / "seq"),
                                    "-q"))
    assert code == 0, err
    code, _, err = finished(lrcheck("suite", str(suite_file), "--out", str(tmp_path / "par"),
                                    "-q", "--jobs", "2"))
    assert code == 0, err
    for k in (1, 2, 3):
        env = {**os.environ, "LRCHECK_SHARD": f"{k}/3"}
        code, _, err = finished(lrcheck("suite", str(suite_file), "--out",
                                        str(tmp_path / f"s{k}"), "-q", env=env))
        assert code == 0, err
    code, _, err = finished(lrcheck("suite", "merge", str(tmp_path / "m"),
                                    *(str(tmp_path / f"s{k}") for k in (1, 2, 3)), "-q"))
    assert code == 0, err
    for name in NAMES:
        expected = result(tmp_path / "seq", name)
        assert result(tmp_path / "par", name) == expected, name
        assert result(tmp_path / "m", name) == expected, name
    seq, par, merged = (json.loads((tmp_path / f / "suite.json").read_text())
                        for f in ("seq", "par", "m"))
    for key in ("status", "verdict", "checks", "shared_reference"):
        assert [p[key] for p in par["pairs"]] == [p[key] for p in seq["pairs"]], key
        assert [p[key] for p in merged["pairs"]] == [p[key] for p in seq["pairs"]], key
    code, out, err = finished(lrcheck("suite", "merge", str(tmp_path / "m2"),
                                      str(tmp_path / "s1"), str(tmp_path / "s3")))
    lost = [p["name"] for p in json.loads((tmp_path / "s1" / "suite.json").read_text())[
        "shard"]["plan"] if p["shard"] == 2]
    assert code == 3 and lost
    for name in lost:
        assert f"ERROR {name}: no result: missing: its shard, 2/3, was not merged" in out


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="finding leftover workers needs /proc")
@pytest.mark.parametrize(("sig", "code", "words"), [
    (signal.SIGINT, 130, "interrupted (Ctrl-C)"), (signal.SIGTERM, 143, "terminated (SIGTERM)"),
])
def test_a_signal_stops_every_worker_and_keeps_what_finished(tmp_path, sig, code, words, token):
    path = tmp_path / "ci.toml"
    path.write_text(textwrap.dedent(SUITE.format(epochs=300)))
    env = {**os.environ, SUITE_WORKER_ENV: token}
    argv = [sys.executable, "-m", "lrcheck", "suite", str(path), "--out", str(tmp_path / "R"),
            "--jobs", "2"]
    # SIGINT's default in the suite (session), which a background shell would leave ignored;
    # its output to a file: a worker left running would hold a pipe open.
    with open(tmp_path / "output", "w") as output, session(
            argv, env=env, stdout=output, stderr=subprocess.STDOUT) as proc:
        # The suite, the process the workers are forked from and both workers are there.
        wait_for(lambda: len(marked(token, SUITE_WORKER_ENV)) >= 4, HANG_S, "two workers",
                 proc=proc)
        # Both workers training a pair.
        wait_for(lambda: _training(token) >= 2, HANG_S, "both workers to train", proc=proc)
        proc.send_signal(sig)
        status = proc.wait(timeout=HANG_S)
    err = (tmp_path / "output").read_text()
    assert status == code, err
    saved = json.loads((tmp_path / "R" / "suite.json").read_text())
    assert saved["interrupted"].startswith(f"{words} with 2 pairs running")
    statuses = {p["name"]: p["status"] for p in saved["pairs"]}
    assert list(statuses.values()).count("incomplete") == 2, statuses
    assert set(statuses.values()) <= {"incomplete", "not_run", "ok"}
    for name, status in statuses.items():
        if status == "incomplete":
            assert json.loads((tmp_path / "R" / name / "result.json").read_text())[
                "verdict"] == "incomplete"
    wait_for(lambda: not marked(token, SUITE_WORKER_ENV), 10, "no worker left")


def _training(token):
    """How many of the suite's workers are running a pair: a worker leads a process group of
    its own (the suite process and the one the workers are forked from lead none) and
    has used 3 s of CPU, which only a pair's work takes (torch is imported before the fork; a
    worker's own start took over 1 s on a loaded machine, before the suite had its pair as
    running: make test's SIGTERM case once saw 1 pair running of 2).
    """
    training = 0
    for pid in marked(token, SUITE_WORKER_ENV):
        try:
            if os.getpgid(pid) != pid:
                continue
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        training += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK") > 3.0
    return training


def test_jobs_is_a_whole_number_or_auto():
    assert suite_jobs("3") == 3 and suite_jobs("auto") >= 1
    for bad in ("0", "-1", "two"):
        with pytest.raises(SpecError, match=r"^--jobs .*expected a whole number >= 1, or auto"):
            suite_jobs(bad)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_PROC, reason="finding leftover workers needs /proc")
def test_a_worker_killed_by_sigkill_is_its_pairs_error_and_the_suite_goes_on(tmp_path, token):
    path, mark = hanging_suite(tmp_path)  # b writes its worker's pid into mark and hangs
    env = {**os.environ, SUITE_WORKER_ENV: token}
    argv = [sys.executable, "-m", "lrcheck", "suite", str(path), "--out", str(tmp_path / "R"),
            "--jobs", "2"]
    # Files, not pipes: a process left running would hold a pipe open.
    with open(tmp_path / "output", "w") as output, session(
            argv, env=env, stdout=output, stderr=subprocess.STDOUT) as proc:
        pid = int(wait_for(lambda: mark.exists() and mark.read_text(), HANG_S,
                           "pair b to train in a worker", proc=proc))
        assert pid != proc.pid and pid in marked(token, SUITE_WORKER_ENV)
        os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=HANG_S)
    out = (tmp_path / "output").read_text()
    print(out)
    assert proc.returncode == 3 and "Traceback" not in out
    saved = json.loads((tmp_path / "R" / "suite.json").read_text())
    statuses = {p["name"]: p["status"] for p in saved["pairs"]}
    assert statuses == {"a": "ok", "b": "error", "c": "ok"}, statuses
    b = next(p for p in saved["pairs"] if p["name"] == "b")
    print(b)
    assert f"(pid {pid}) died while running it (killed by SIGKILL" in json.dumps(b)
    assert (tmp_path / "R" / "junit.xml").exists() and (tmp_path / "R" / "summary.md").exists()
    wait_for(lambda: not marked(token, SUITE_WORKER_ENV), 10, "no worker left")
    assert not alive(pid)


def test_a_pair_sent_to_a_worker_that_died_idle_is_put_back_not_a_broken_pipe():
    suite = parse_suite({"defaults": {"task": "wine"}, "pair": [{"name": "a", "bs": 8,
                                                                 "accum": 2}]}, "ci.toml")
    workers = Workers(print, (), mark_env="TEST_NONE", mark="test-none", env={})
    mine, theirs = multiprocessing.Pipe()
    theirs.close()  # the worker's end: gone with it
    workers.pipes = [mine]
    ended = {}
    _schedule(PairQueue(suite, 1), workers, {}, 1, None,
              lambda index, outcome, drawings: ended.setdefault(index, outcome))
    assert mine.closed and list(ended) == [0]
    assert ended[0].status == "error" and ended[0].exit_code == 3
    assert ended[0].error == "not run: every suite worker had died before it could start"
