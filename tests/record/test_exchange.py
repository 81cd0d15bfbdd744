"""``record.exchange`` and the lockstep exchange's limits: its size from the model, its place
where that fits, a deadline on every wait, and a failure (a full disk) that switches lockstep
off instead of reaching the user's step."""

import errno
import json
from pathlib import Path

import pytest
import torch

from lrcheck.record import exchange, lockstep
from lrcheck.record.guard import Guard
from lrcheck.record.roles import ENV_WAIT, REFERENCE, ended

GIB = 1 << 30


def test_the_need_is_the_start_and_depth_plus_one_states_of_params_grads_and_state():
    params = [torch.zeros(1000), torch.zeros(10, dtype=torch.float64)]  # 4000 + 80 bytes
    size = 4080
    assert exchange.need(params, state_bytes=100) == size + 3 * (2 * size + 100)
    assert exchange.need(params) == size + 3 * (4 * size)  # before the first step: Adam's two


def test_the_states_go_to_the_first_place_that_holds_them_with_the_margin():
    shm, disk = Path("/dev/shm/x"), Path("/tmp/y")
    assert exchange.place(GIB, [(shm, 2 * GIB), (disk, 100 * GIB)]) == shm
    assert exchange.place(GIB, [(shm, int(1.4 * GIB)), (disk, 100 * GIB)]) == disk
    assert exchange.place(GIB, [(shm, GIB), (disk, GIB)]) is None


def test_a_model_that_fits_nowhere_switches_lockstep_off_saying_so(tmp_path, monkeypatch):
    monkeypatch.setattr(exchange, "free_space", lambda folders: [(f, 1000) for f in folders])
    streamer = lockstep.Streamer(tmp_path)
    streamer.start([torch.zeros(1000)], sharded=False)
    said = json.loads((tmp_path / "reference.json").read_text())["off"]
    assert streamer.off and said.startswith("the exchange needs ") and " has " in said
    assert not list(tmp_path.glob("ref-*"))


def test_a_wait_has_a_deadline_that_names_its_setting(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_WAIT, "0.05")
    with pytest.raises(TimeoutError, match=f"waited 0.05 s for the update .*{ENV_WAIT}"):
        exchange.wait(lambda: False, tmp_path / "never", "the update")


def test_a_full_disk_switches_lockstep_off_and_releases_the_candidate(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    streamer = lockstep.Streamer(tmp_path)
    on = Guard("lockstep")
    on.arm(streamer.stop)
    on("lockstep's start", streamer.start)(params, False, optimizer=optimizer)
    (tmp_path / "candidate.world").write_text("1")
    (tmp_path / "candidate-rank0.done").write_text("-1")

    def full(obj, path):
        path.with_name(path.name + ".part").write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lockstep, "_save", full)
    model(torch.ones(1, 3)).sum().backward()
    on("lockstep at update 0", streamer.after)(0, optimizer, params)  # never raises
    assert streamer.off and "No space left on device" in (tmp_path / "reference.off").read_text()
    assert ended(tmp_path, REFERENCE).exists() and not list(tmp_path.glob("ref-*"))


def test_a_candidate_waiting_is_released_with_the_reason_the_reference_gave(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    follower = lockstep.Follower(tmp_path, tmp_path, 0, 1)
    follower.start_params = [p.detach().clone() for p in params]
    lockstep.Streamer(tmp_path).stop("lockstep at update 0 raised OSError: disk full")
    follower.after(0, optimizer, params)
    follower.close()
    lines = [json.loads(line) for line in (tmp_path / "lockstep-rank0.jsonl").read_text()
             .splitlines()]
    assert lines == [{"off": "the reference switched lockstep off: lockstep at update 0 raised "
                             "OSError: disk full", "at": 0}]


def test_a_candidate_waiting_is_released_once_the_references_process_is_gone(tmp_path):
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    follower = lockstep.Follower(tmp_path, tmp_path, 0, 1)
    follower.start_params = [p.detach().clone() for p in params]
    follower.peer = "999999999:1"  # killed (the OOM killer): no marker, no reason left
    follower.after(0, optimizer, params)
    follower.close()
    line = json.loads((tmp_path / "lockstep-rank0.jsonl").read_text())
    assert line == {"off": "the reference ended after 0 update(s)", "at": 0}
