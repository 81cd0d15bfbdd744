"""Rank 0 naming the rank at the root of a lost peer, from the notes in the job's store (a
dict here: the store of a real job is tested in tests/test_multiprocess.py, two nodes)."""

from __future__ import annotations

import pytest

from lrcheck.errors import RunError
from lrcheck.runner.ranks import notes as notes_module
from lrcheck.runner.ranks.notes import Notes, lost_peer

LOST = RunError("the candidate run on rank 0 crashed: RuntimeError: Connection closed by peer "
                "[127.0.0.1]:5000")


class FakeStore:
    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def set(self, key: str, value: str) -> None:
        self.data[key] = value.encode()

    def get(self, key: str) -> bytes:
        return self.data[key]

    def check(self, keys: list[str]) -> bool:
        return all(key in self.data for key in keys)


@pytest.fixture
def store(monkeypatch) -> FakeStore:
    fake = FakeStore()
    monkeypatch.setattr(notes_module, "_store", lambda: fake)
    return fake


def _group(world: int) -> list[Notes]:
    """One Notes per rank of one join: each rank's process counts its joins alike."""
    first = Notes(0, world, 0, world)
    others = [Notes(rank, world, rank, world) for rank in range(1, world)]
    for rank, notes in enumerate(others, start=1):
        notes.prefix = first.prefix  # one process stands for every rank here
        notes._set("where", f"on node {rank} of {world}, host h{rank}, pid {100 + rank}")
    return [first, *others]


def test_the_rank_whose_error_was_not_a_lost_peer_is_named(store):
    ranks = _group(3)
    ranks[2].failed("the candidate run on rank 2 crashed: InjectedFault: boom")
    ranks[1].failed("the candidate run on rank 1 crashed: RuntimeError: Connection reset by peer")
    told = ranks[0].blame(LOST, wait_s=0)
    assert str(told) == ("the candidate run on rank 2 crashed: InjectedFault: boom (rank 2 of 3, "
                         "on node 2 of 3, host h2, pid 102); rank 0 then lost its peers")


def test_a_rank_that_left_no_error_is_named_as_dead(store):
    ranks = _group(3)
    ranks[1].failed("the candidate run on rank 1 crashed: RuntimeError: Connection reset by peer")
    told = ranks[0].blame(LOST, wait_s=0.2)
    assert str(told) == (f"rank 2 of 3, on node 2 of 3, host h2, pid 102 died without a word "
                         f"(killed, or its node was lost); then {LOST}")


def test_an_error_of_its_own_or_on_another_rank_is_left_as_it_is(store):
    ranks = _group(2)
    own = RunError("the candidate run on rank 0 crashed: ValueError: bad")
    assert ranks[0].blame(own, wait_s=0) is own
    assert ranks[1].blame(LOST, wait_s=0) is LOST


def test_a_store_that_is_gone_leaves_rank_0_s_error(monkeypatch):
    def gone():
        raise RuntimeError("Connection refused")

    monkeypatch.setattr(notes_module, "_store", gone)
    notes = Notes(0, 2, 0, 2)
    notes.failed("anything")
    assert "died without a word" in str(notes.blame(LOST, wait_s=0))
    assert "place not known" in str(notes.blame(LOST, wait_s=0))


def test_what_a_lost_peer_says():
    assert lost_peer(str(LOST))
    assert not lost_peer("InjectedFault: boom")
