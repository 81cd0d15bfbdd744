"""Joining the process group under torchrun: lrcheck initialises the default group itself, or
uses the one a user's script initialised, and leaves only the one it made."""

from __future__ import annotations

import socket

import pytest

dist = pytest.importorskip("torch.distributed")

from lrcheck.runner.ranks.group import finish, join, release  # noqa: E402
from lrcheck.runner.ranks.torchrun import TorchrunEnv  # noqa: E402

ONE = TorchrunEnv(rank=0, world=1, local_rank=0, local_world=1, node=0)


@pytest.fixture
def rendezvous(monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_lrcheck_leaves_the_group_it_made_itself(rendezvous):
    member = join(ONE, "cpu", timeout=30)
    assert member.owned and dist.is_initialized()
    finish(member)
    assert not dist.is_initialized()


def test_a_user_s_own_group_is_used_and_left_to_them(rendezvous):
    dist.init_process_group("gloo", rank=0, world_size=1)
    member = join(ONE, "cpu", timeout=30)  # no "initialize the default process group twice"
    assert not member.owned
    finish(member)
    assert dist.is_initialized()
    release(member)
    assert dist.is_initialized()

