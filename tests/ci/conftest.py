"""The fake GitHub API (``fake_github.py``), served in a thread for one test."""

from __future__ import annotations

import threading

import pytest

from tests.ci.fake_github import FakeGitHub


@pytest.fixture
def github():
    server = FakeGitHub()
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)
