"""``procs.owner``: a process's identity survives its pid being used again, and a folder whose
owner is gone is swept while one whose owner runs, or that names none, is kept."""

import os

from lrcheck.procs import owner


def test_this_process_is_alive_and_another_start_time_or_pid_is_gone():
    me = owner.identity()
    assert me is not None and me.startswith(f"{os.getpid()}:") and not owner.gone(me)
    assert owner.gone(f"{os.getpid()}:0")  # the pid used again by another process
    assert owner.gone("999999999:1") and not owner.gone("malformed")


def test_the_sweep_removes_only_folders_whose_owner_is_gone(tmp_path):
    mine, orphan, unowned, other = (tmp_path / f"lrcheck-lockstep-{n}" for n in "abcd")
    for folder in (mine, orphan, unowned):
        folder.mkdir()
    owner.claim(mine)
    (orphan / owner.OWNER_FILE).write_text("999999999:1")
    (tmp_path / "other").mkdir()
    assert owner.sweep(tmp_path, "lrcheck-lockstep-") == [orphan]
    assert mine.is_dir() and unowned.is_dir() and not orphan.exists() and not other.exists()
    assert (tmp_path / "other").is_dir()


def test_no_watch_without_an_owner(monkeypatch):
    monkeypatch.delenv(owner.ENV_OWNER, raising=False)
    assert owner.watch() is None


def test_a_folder_swept_takes_the_folders_its_owner_claimed_with_it(tmp_path):
    memory, disk = tmp_path / "shm", tmp_path / "disk"
    memory.mkdir()
    disk.mkdir()
    exchange, spare = memory / "lrcheck-lockstep-a", disk / "lrcheck-lockstep-b"
    foreign = disk / "c"
    for folder in (exchange, spare, foreign):
        folder.mkdir()
    dead = "999999999:1"
    (spare / owner.OWNER_FILE).write_text(dead)
    (foreign / owner.OWNER_FILE).write_text("999999999:2")  # not its owner's: kept
    (exchange / owner.OWNER_FILE).write_text(dead)
    (exchange / owner.ALSO_FILE).write_text(f"{spare}\n{foreign}\n")
    assert owner.sweep(memory, "lrcheck-lockstep-") == [spare, exchange]
    assert not spare.exists() and foreign.is_dir()

