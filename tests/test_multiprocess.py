"""Multi-process comparisons for real: gloo on the CPU, both launch directions, and the ways a
multi-process run can go wrong (a rank raising, a rank hanging, Ctrl-C) — each of which must
end quickly with the right exit code and leave no process behind.

Each test runs lrcheck as a subprocess with a marker in its environment; every process it
starts inherits the marker, which is how ``_survivors`` finds any left running.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

import pytest

import lrcheck
from lrcheck.checks import CHECK_NAMES
from tests.helpers import HANG_S, wait_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not os.path.isdir("/proc"), reason="the survivor scan needs /proc (Linux)"),
]

MARK = "LRCHECK_TEST_MARK"
LRCHECK = [sys.executable, "-m", "lrcheck", "compare"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
# Runs the command as a child subreaper (Linux's PR_SET_CHILD_SUBREAPER): whatever the command
# leaves behind — running, or exited and never reaped — is re-parented to it instead of init,
# and it writes their command lines to the file named by $REAPED once the command has exited.
# It passes SIGINT and SIGTERM on to the command, as a shell does to the job in the foreground.
REAPER = """
import ctypes, json, os, signal, subprocess, sys
from pathlib import Path
assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
proc = subprocess.Popen(sys.argv[1:])
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda signum, frame: proc.send_signal(signum))
code = proc.wait()
left = []
for entry in Path("/proc").iterdir():
    try:
        state = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        if entry.name.isdigit() and state[1] == str(os.getpid()):
            cmd = (entry / "cmdline").read_bytes().replace(b"\\0", b" ").decode()
            left.append(f"{entry.name} ({state[0]}): {cmd}")
    except OSError:
        pass
Path(os.environ["REAPED"]).write_text(json.dumps(left))
sys.exit(code)
"""


def _survivors(mark: str) -> list[str]:
    """Command lines of live processes (zombies aside) whose environment carries ``mark``."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if needle in environ.split(b"\0") and state != "Z":
            found.append(f"{entry.name}: {cmdline}")
    return found


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Run:
    """One lrcheck (or torchrun) subprocess, in a session of its own like a terminal job."""

    def __init__(self, argv: list[str], tmp_path: Path, **env: str) -> None:
        self.mark = uuid.uuid4().hex
        self.tmp = tmp_path
        self.reaped = tmp_path / f"reaped-{self.mark}.json"
        self.env = {**os.environ, MARK: self.mark, "TMPDIR": str(tmp_path),
                    "OMP_NUM_THREADS": "1", "COLUMNS": "200", "REAPED": str(self.reaped)}
        self.env.pop("LRCHECK_FAULT", None)
        self.env.update(env)
        self.started = time.monotonic()
        # A shell that starts its commands in the background (some CI runners, `cmd &`) leaves
        # SIGINT ignored in them, and Python then keeps it ignored: restore it, as a terminal
        # job has it.
        self.proc = subprocess.Popen([sys.executable, "-c", REAPER, *argv], env=self.env,
                                     cwd=tmp_path, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True,
                                     preexec_fn=_default_sigint)

    def finish(self, timeout: float = HANG_S) -> Run:
        try:
            self.out, self.err = self.proc.communicate(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                for line in _survivors(self.mark):  # workers live in sessions of their own
                    os.kill(int(line.split(":", 1)[0]), signal.SIGKILL)
        self.ended, self.ended_wall = time.monotonic(), time.time()
        self.code = self.proc.returncode
        print(f"exit {self.code} after {self.ended - self.started:.1f} s\n--- stdout\n{self.out}"
              f"\n--- stderr\n{self.err}")
        return self

    def result(self) -> dict:
        return json.loads((self.tmp / "out" / "result.json").read_text())

    def assert_no_survivors(self) -> None:
        """Nothing the command started is left once it has exited: no child left to init,
        running or unreaped, and no process of its launch (torchrun's workers live in sessions
        of their own) still running."""
        assert json.loads(self.reaped.read_text()) == [], "processes left to init"
        assert _survivors(self.mark) == [], "processes left running"

    def wait_for_updates(self, count: int) -> Path:
        """The candidate's launch folder once rank 0 has recorded ``count`` lines of the
        candidate's run (its "started" line and count - 1 updates; a reference that rank 0
        trains in the same job has lines of its own): a condition, not a time."""
        def recorded() -> Path | None:
            for path in self.tmp.glob("lrcheck-candidate-*/updates.jsonl"):
                lines = [json.loads(line) for line in path.read_text().splitlines()
                         if line.endswith("}")]
                if sum(line.get("role", "candidate") == "candidate" for line in lines) >= count:
                    return path.parent
            return None

        return wait_for(recorded, HANG_S, f"{count} lines from the candidate", proc=self.proc)


def _hold_default_ports() -> ExitStack:
    """Keep torchrun's default rendezvous port and the usual MASTER_PORT busy, where free."""
    stack = ExitStack()
    for port in (29400, 29500):
        sock = stack.enter_context(socket.socket())
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
        except OSError:
            pass  # busy already, which is the point
    return stack


def _check(result: dict, name: str) -> dict:
    return next(c for c in result["checks"] if c["name"] == name)


def test_lrcheck_launches_two_ranks_exactly_like_one_process(tmp_path):
    with _hold_default_ports():
        run = Run(LRCHECK + ["--nproc", "2", "--bs", "8", "--accum", "2", "--ref-bs", "32",
                             "--epochs", "1", "--out", "out"], tmp_path).finish()
    assert run.code == 0
    assert "bs8x2x2w (world 2, per-update) vs bs32 (world 1)" in run.out
    result = run.result()
    assert result["verdict"] == "pass"
    assert [c["status"] for c in result["checks"]] == ["pass"] * len(CHECK_NAMES)
    assert _check(result, "params")["max_rel_diff"] <= 1e-9
    assert result["runs"]["candidate"]["spec"]["world"] == 2
    assert result["environment"]["launch"]["candidate"] == "launched through torchrun, 2 processes"
    assert list(tmp_path.glob("lrcheck-*")) == []  # the run's folder is gone after a success
    run.assert_no_survivors()


def test_the_reference_rides_in_the_candidate_s_job_and_this_process_stays_light(tmp_path):
    # The parent only watches: rank 0 trains the reference after the candidate, so the parent
    # imports neither torch nor the data, and its work does not compete with the ranks.
    code = ("import sys, lrcheck\n"
            "report = lrcheck.compare(world=2, bs=8, accum=2, task='wine', epochs=2)\n"
            "print(report.verdict, report.environment.launch['reference'],\n"
            "      len(report.reference.updates), sorted(m for m in ('torch', 'sklearn')\n"
            "      if m in sys.modules))\n")
    run = Run([sys.executable, "-c", code], tmp_path).finish()
    assert run.code == 0
    assert run.out.strip() == f"pass rank 0 of the candidate's torchrun job {2 * (142 // 32)} []"
    run.assert_no_survivors()


def test_bad_input_found_by_the_ranks_is_bad_input_and_told_once(tmp_path):
    run = Run(LRCHECK + ["--nproc", "2", "--bs", "8", "--accum", "2", "--task", "wine",
                         "--epochs", "1", "--resume-at", "50", "--out", "out"], tmp_path).finish()
    assert run.code == 2
    assert run.err.count("--resume-at 50: the run has") == 1
    assert "Traceback" not in run.err
    assert list(tmp_path.glob("lrcheck-*")) == []
    run.assert_no_survivors()


def test_three_ranks_against_a_two_rank_reference(tmp_path):
    run = Run(LRCHECK + ["--nproc", "3", "--ref-nproc", "2", "--bs", "4", "--accum", "2",
                         "--ref-bs", "12", "--task", "wine", "--epochs", "3", "--out", "out"],
              tmp_path).finish()
    assert run.code == 0
    result = run.result()
    assert [c["status"] for c in result["checks"]] == ["pass"] * len(CHECK_NAMES)
    assert _check(result, "params")["max_rel_diff"] <= 1e-9
    assert result["environment"]["launch"] == {
        "reference": "launched through torchrun, 2 processes",
        "candidate": "launched through torchrun, 3 processes"}
    assert len(result["runs"]["candidate"]["updates"]) == 3 * (142 // 24)
    run.assert_no_survivors()


def test_torchrun_launches_lrcheck_and_rank_0_alone_reports(tmp_path):
    run = Run(TORCHRUN + ["--nproc-per-node", "2", "-m", "lrcheck", "compare", "--bs", "8",
                          "--accum", "2", "--ref-bs", "32", "--epochs", "1", "--out", "out"],
              tmp_path).finish()
    assert run.code == 0  # torchrun exits 0 only when every rank did
    assert run.out.count("bs8x2x2w (world 2, per-update) vs bs32 (world 1)") == 1
    assert run.out.count("verdict: PASS") == 1
    assert run.err.count("report: out") == 1
    result = run.result()
    assert [c["status"] for c in result["checks"]] == ["pass"] * len(CHECK_NAMES)
    assert _check(result, "params")["max_rel_diff"] <= 1e-9
    assert result["environment"]["launch"]["candidate"] == "inside torchrun, 2 processes"
    run.assert_no_survivors()


def test_per_micro_batch_policy_fails_under_torchrun_as_in_one_process(tmp_path):
    flags = ["--accum", "2", "--task", "wine", "--epochs", "2", "--policy", "per-micro-batch"]
    run = Run(TORCHRUN + ["--nproc-per-node", "3", "-m", "lrcheck", "compare", "--bs", "4",
                          "--out", "out", *flags], tmp_path).finish()
    assert run.code == 1
    assert run.out.count("verdict: FAIL") == 1
    lr = _check(run.result(), "lr")
    assert lr["status"] == "fail"

    one = lrcheck.compare(bs=12, accum=2, task="wine", epochs=2, policy="per-micro-batch",
                          device="cpu")
    assert one.check("lr").status == "fail"
    assert lr["first_divergence"] == one.check("lr").first_divergence
    got = [u["lr"] for u in run.result()["runs"]["candidate"]["updates"]]
    assert got == [list(u.lr) for u in one.candidate.updates]  # the same wrong LRs, exactly
    run.assert_no_survivors()


def test_a_rank_that_raises_fails_the_run_in_seconds_naming_it(tmp_path):
    run = Run(LRCHECK + ["--nproc", "2", "--bs", "8", "--accum", "2", "--task", "wine",
                         "--epochs", "5", "--out", "out"], tmp_path, LRCHECK_FAULT="1:2").finish()
    assert run.code == 3
    line = run.err.strip().splitlines()[-1]
    assert ("rank 1 of 2 failed in the candidate run: InjectedFault: LRCHECK_FAULT=1:2 made "
            "rank 1 raise after update 2; full log: ") in line
    log = Path(line.rsplit("full log: ", 1)[1])
    assert log.name == "rank1.log" and "InjectedFault" in log.read_text()
    # Stopped when the rank failed, not when the run would have ended: rank 0 recorded only
    # the candidate's updates before it (the failure comes after update 2 of 20), after the
    # reference's 20 (rank 0 trains it first: the candidate runs in lockstep with it).
    recorded = [json.loads(line) for line in
                (log.parent / "updates.jsonl").read_text().splitlines()]
    assert sum(line["role"] == "candidate" for line in recorded) <= 1 + 4
    assert sum(line["role"] == "reference" for line in recorded) == 1 + 20
    assert "Traceback" not in run.err
    run.assert_no_survivors()


def test_a_hung_rank_is_stopped_by_the_timeout(tmp_path):
    # 10 s: far beyond any stall of a loaded machine between two updates of this tiny run (a
    # stall as long would stop it before the hang, at another update).
    run = Run(LRCHECK + ["--nproc", "2", "--bs", "8", "--accum", "2", "--task", "wine",
                         "--epochs", "5", "--timeout", "10", "--out", "out"], tmp_path,
              LRCHECK_FAULT="1:2:hang").finish()
    assert run.code == 3
    assert ("the candidate run (2 processes) made no progress for 10 s (--timeout) after "
            "update 2 of 20; every process was stopped") in run.err
    folder = next(tmp_path.glob("lrcheck-candidate-*"))
    last_update = (folder / "updates.jsonl").stat().st_mtime
    assert run.ended_wall - last_update >= 10  # not before --timeout (no upper bound: a busy
    run.assert_no_survivors()                 # machine may take longer to stop it)


def test_ctrl_c_stops_every_worker_and_keeps_what_was_recorded(tmp_path):
    # Rank 1 hangs after update 3, so rank 0 records updates 0 to 3 and waits for it: Ctrl-C
    # comes while the candidate is running, at a known point.
    run = Run(LRCHECK + ["--nproc", "2", "--bs", "8", "--accum", "2", "--task", "wine",
                         "--epochs", "5", "--out", "out"], tmp_path, LRCHECK_FAULT="1:3:hang")
    run.wait_for_updates(5)
    run.proc.send_signal(signal.SIGINT)
    run.finish()
    assert run.code == 130
    assert "interrupted (Ctrl-C) during the candidate run" in run.err
    assert "Traceback" not in run.err
    result = run.result()
    assert result["verdict"] == "incomplete" and result["checks"] == []
    # Rank 0 trained it before the candidate, in the same job: the candidate runs in lockstep
    # with it.
    ref = result["runs"]["reference"]
    assert len(ref["updates"]) == 20 and ref["stopped"] is None
    cand = result["runs"]["candidate"]
    assert [u["step"] for u in cand["updates"]] == [0, 1, 2, 3]
    assert cand["stopped"] == "interrupted after 4 of 20 updates"
    assert list(tmp_path.glob("lrcheck-*")) == []
    run.assert_no_survivors()


def test_a_rank_killed_by_sigkill_is_named_with_its_signal_and_the_run_it_was_in(tmp_path):
    # Rank 1 stops after update 3 (so the kill lands mid-run, at a known point), then dies by
    # SIGKILL: it writes nothing, and rank 0 only learns that it lost its peer.
    run = Run(LRCHECK + ["--nproc", "2", "--bs", "8", "--accum", "2", "--task", "wine",
                         "--epochs", "5", "--out", "out"], tmp_path, LRCHECK_FAULT="1:3:hang")
    folder = run.wait_for_updates(5)
    os.kill(int((folder / "rank1.pid").read_text()), signal.SIGKILL)
    run.finish()
    assert run.code == 3
    line = run.err.strip().splitlines()[-1]
    assert line.startswith("lrcheck: error: rank 1 of 2 died in the candidate run: killed by "
                           "SIGKILL; ")
    assert line.endswith(f"full log: {folder / 'rank1.log'}")
    assert "Traceback" not in run.err
    run.assert_no_survivors()


def test_sigterm_to_lrcheck_stops_every_rank_and_saves_what_was_recorded(tmp_path):
    run = Run(LRCHECK + ["--nproc", "2", "--bs", "8", "--accum", "2", "--task", "wine",
                         "--epochs", "5", "--out", "out"], tmp_path, LRCHECK_FAULT="1:3:hang")
    run.wait_for_updates(5)
    run.proc.send_signal(signal.SIGTERM)  # the reaper passes it to lrcheck
    run.finish()
    assert run.code == 128 + signal.SIGTERM
    assert "terminated (SIGTERM) during the candidate run" in run.err
    assert "Traceback" not in run.err
    result = run.result()
    assert result["verdict"] == "incomplete"
    assert [u["step"] for u in result["runs"]["candidate"]["updates"]] == [0, 1, 2, 3]
    assert list(tmp_path.glob("lrcheck-*")) == []
    run.assert_no_survivors()


def test_a_normal_exit_leaves_no_process_behind_not_even_the_plot_helper(tmp_path):
    run = Run(LRCHECK + ["--task", "wine", "--bs", "8", "--accum", "2", "--epochs", "1",
                         "--out", "out"], tmp_path).finish()
    assert run.code == 0
    assert (tmp_path / "out" / "lr.png").stat().st_size > 0
    run.assert_no_survivors()


def test_accelerate_on_two_processes_follows_its_convention_and_catches_per_process_sizing(
        tmp_path, schedules_file):
    """Accelerate steps the schedule once per process on every update, so a schedule sized by
    its convention (updates of the single-process loader) passes on world 2, while one sized
    from the prepared, per-process loader runs twice too fast (accelerate #2773)."""
    pytest.importorskip("accelerate", reason="the accelerate extra is not installed")
    common = ["--nproc", "2", "--bs", "8", "--accum", "2", "--ref-bs", "32", "--epochs", "2",
              "--policy", "accelerate"]
    good = Run(LRCHECK + common + ["--out", "good"], tmp_path).finish()
    assert good.code == 0
    result = json.loads((tmp_path / "good" / "result.json").read_text())
    assert [c["status"] for c in result["checks"]] == ["pass"] * len(CHECK_NAMES)
    assert _check(result, "params")["max_rel_diff"] <= 1e-9
    steps = [u["scheduler_steps"] for u in result["runs"]["candidate"]["updates"][:3]]
    assert steps == [0, 2, 4]  # two scheduler steps per update: one per process
    assert result["runs"]["candidate"]["schedule_context"]["total_steps"] == 2 * 88
    good.assert_no_survivors()

    bad = Run(LRCHECK + common + ["--scheduler", f"{schedules_file}:sized_from_prepared_loader",
                                  "--out", "bad"], tmp_path).finish()
    assert bad.code == 1
    lr = _check(json.loads((tmp_path / "bad" / "result.json").read_text()), "lr")
    assert lr["status"] == "fail" and lr["first_divergence"] == 1
    bad.assert_no_survivors()


@pytest.mark.parametrize("framework", ["transformers", "lightning"])
def test_a_framework_trains_alike_inside_torchrun_and_against_a_two_process_reference(
        framework, tmp_path):
    """Both directions of processes through a real framework, on whole windows: lrcheck inside
    torchrun (the candidate on both ranks, the reference on rank 0 alone, in the framework), and
    a one-process candidate against a reference launched on two."""
    pytest.importorskip(framework, reason=f"the {framework} extra is not installed")
    common = ["--framework", framework, "--task", "synthetic", "--samples", "640", "--epochs",
              "1"]
    inside = Run(TORCHRUN + ["--nproc-per-node", "2", "-m", "lrcheck", "compare", *common,
                             "--bs", "8", "--accum", "2", "--ref-bs", "32", "--out", "inside"],
                 tmp_path).finish()
    assert inside.code == 0
    result = json.loads((tmp_path / "inside" / "result.json").read_text())
    assert [c["status"] for c in result["checks"]] == ["pass"] * len(CHECK_NAMES)
    assert result["runs"]["candidate"]["spec"]["world"] == 2
    assert result["runs"]["reference"]["spec"]["framework"] == framework
    inside.assert_no_survivors()

    reverse = Run(LRCHECK + common + ["--bs", "32", "--accum", "1", "--ref-bs", "16",
                                      "--ref-nproc", "2", "--out", "reverse"], tmp_path).finish()
    assert reverse.code == 0
    result = json.loads((tmp_path / "reverse" / "result.json").read_text())
    assert [c["status"] for c in result["checks"]] == ["pass"] * len(CHECK_NAMES)
    assert result["runs"]["reference"]["spec"]["world"] == 2
    reverse.assert_no_survivors()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _two_nodes(tmp_path: Path, *flags: str, **env: str) -> list[Run]:
    """Two torchrun launchers of one job, each a "node" of 1 process with a folder of its own,
    meeting at a c10d rendezvous on a free loopback port, as on two machines. Node 0 hosts the
    rendezvous store (``is_host``), and each node's address (``--local-addr``) sorts in node
    order: the c10d rendezvous numbers nodes by address, not by ``--node-rank``, so this makes
    node 0 hold global rank 0."""
    endpoint = f"127.0.0.1:{_free_port()}"
    runs = []
    for node in (0, 1):
        folder = tmp_path / f"node{node}"
        folder.mkdir()
        runs.append(Run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2",
                         "--nproc-per-node", "1", "--node-rank", str(node),
                         "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                         "--rdzv-id", "two-nodes", "--rdzv-conf", f"is_host={int(node == 0)}",
                         "--local-addr", f"127.0.0.{node + 1}", "--max-restarts", "0",
                         "-m", "lrcheck", "compare", "--bs", "8", "--accum", "2",
                         "--ref-bs", "32", "--epochs", "1", "--out", "out", *flags],
                        folder, **env))
    return runs


def test_two_torchrun_nodes_run_lrcheck_and_global_rank_0_alone_reports(tmp_path):
    nodes = [run.finish() for run in _two_nodes(tmp_path)]
    assert [run.code for run in nodes] == [0, 0]  # each launcher exits 0 only when all did
    first, second = nodes
    assert first.out.count("bs8x2x2w (world 2, per-update) vs bs32 (world 1)") == 1
    assert first.out.count("verdict: PASS") == 1 and first.err.count("report: out") == 1
    assert "verdict" not in second.out and "report" not in second.err
    assert not (second.tmp / "out").exists()
    result = first.result()
    assert [c["status"] for c in result["checks"]] == ["pass"] * len(CHECK_NAMES)
    assert _check(result, "params")["max_rel_diff"] <= 1e-9
    assert result["environment"]["launch"] == {
        "reference": "inside torchrun, rank 0 alone",
        "candidate": "inside torchrun, 2 processes on 2 nodes"}
    for run in nodes:
        run.assert_no_survivors()


def test_a_rank_that_raises_on_another_node_is_named_by_rank_0(tmp_path):
    nodes = [run.finish() for run in _two_nodes(tmp_path, LRCHECK_FAULT="1:3")]
    # torchrun exits 1 when a process of its node failed; lrcheck on rank 0 exited 3.
    assert [run.code for run in nodes] == [1, 1]
    assert "exitcode  : 3" in nodes[0].err
    line = next(line for line in nodes[0].err.splitlines() if line.startswith("lrcheck: "))
    assert line.startswith("lrcheck: error: the candidate run on rank 1 crashed: InjectedFault: "
                           "LRCHECK_FAULT=1:3 made rank 1 raise after update 3 (rank 1 of 2, "
                           "on node 1 of 2, host ")
    assert line.endswith("); rank 0 then lost its peers")
    for run in nodes:
        run.assert_no_survivors()


def test_a_node_whose_rank_is_killed_is_named_by_rank_0(tmp_path):
    # Rank 1 (node 1's only process) stops after update 3, so the kill lands mid-run.
    nodes = _two_nodes(tmp_path, LRCHECK_FAULT="1:3:hang")
    pid_file = nodes[1].tmp / "fault-hang-rank1.pid"
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), HANG_S,
                       "rank 1 to stop after update 3", proc=nodes[1].proc))
    os.kill(pid, signal.SIGKILL)
    first, second = (run.finish() for run in nodes)
    assert [first.code, second.code] == [1, 1]
    assert "exitcode  : 3" in first.err and "(SIGKILL)" in second.err
    line = next(line for line in first.err.splitlines() if line.startswith("lrcheck: "))
    assert line.startswith("lrcheck: error: rank 1 of 2, on node 1 of 2, host ")
    assert (f", pid {pid} died without a word (killed, or its node was lost); then the "
            "candidate run on rank 0 crashed: ") in line
    # Only torchrun's own report of the failed process (after its "failed (exitcode" line)
    # has a traceback.
    assert "Traceback" not in first.err.split("failed (exitcode", 1)[0]
    for run in (first, second):
        run.assert_no_survivors()
