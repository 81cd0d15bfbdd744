"""Which rank failed, told by rank 0, when lrcheck runs inside torchrun on one node or several.

A rank that fails only stops itself; the others learn that a peer went away ("Connection closed
by peer" from gloo), not which one, nor why — and on several nodes the failing rank's message
is in another machine's log. So each rank leaves notes in the job's key-value store (the one
``env://`` set up, torchrun's own): where it runs when it joins, and its error when it fails.
Rank 0, having lost its peers, reads them: the rank whose error was not itself a lost peer is
the cause; a rank that left no error (killed, or its node lost) is named as having died.
Every store operation here is best effort: a store that is gone leaves rank 0's own error.
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from itertools import count
from typing import Any

from lrcheck.errors import RunError

# How long rank 0 waits for the other ranks' notes after losing its peers: a failing rank
# writes its note before it leaves, so this bounds only the wait for ranks that died silently.
NOTE_WAIT_S = 5.0
# A store operation that does not answer in this long is given up (its host may be gone).
STORE_TIMEOUT = timedelta(seconds=10)
# What gloo and nccl say when a peer process went away.
LOST_PEER = ("Connection closed by peer", "Connection reset by peer", "Broken pipe",
             "remote process exited", "NCCL communicator was aborted")
_JOINS = count()


def _store() -> Any:
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    store.set_timeout(STORE_TIMEOUT)
    return store


def lost_peer(message: str) -> bool:
    """Whether an error says only that another process of the group went away."""
    return any(text in message for text in LOST_PEER)


class Notes:
    """The notes of one group of ranks: ``rank`` of ``world``; each join of a process group
    (one per comparison) gets keys of its own."""

    def __init__(self, rank: int, world: int, node: int, nodes: int) -> None:
        self.rank, self.world = rank, world
        self.prefix = f"lrcheck/notes/{next(_JOINS)}"
        here = f"on node {node} of {nodes}, host {socket.gethostname()}, pid {os.getpid()}"
        self._set("where", here)

    def _set(self, kind: str, text: str) -> None:
        try:
            _store().set(f"{self.prefix}/{kind}/{self.rank}", text)
        except Exception:  # noqa: BLE001 - best effort: the store's host may be gone
            pass

    def _get(self, kind: str, rank: int) -> str | None:
        key = f"{self.prefix}/{kind}/{rank}"
        try:
            store = _store()
            return store.get(key).decode() if store.check([key]) else None
        except Exception:  # noqa: BLE001 - best effort, as _set
            return None

    def failed(self, message: str) -> None:
        """Leave this rank's error for rank 0."""
        self._set("failed", message)

    def blame(self, error: RunError, wait_s: float = NOTE_WAIT_S) -> RunError:
        """On rank 0, having lost its peers with ``error``: the error that names the rank at
        the root of it (``error`` itself elsewhere, or when nothing better is known)."""
        if self.rank != 0 or not lost_peer(str(error)):
            return error
        others = range(1, self.world)
        deadline = time.monotonic() + wait_s
        while True:
            notes = {rank: self._get("failed", rank) for rank in others}
            if all(notes.values()) or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        causes = [(rank, note) for rank, note in notes.items()
                  if note is not None and not lost_peer(note)]
        if causes:
            rank, note = causes[0]
            return RunError(f"{note} ({self._who(rank)}); rank 0 then lost its peers")
        silent = [rank for rank, note in notes.items() if note is None]
        if not silent:
            return error
        return RunError(f"{' and '.join(map(self._who, silent))} died without a word "
                        f"(killed, or its node was lost); then {error}")

    def _who(self, rank: int) -> str:
        return f"rank {rank} of {self.world}, {self._get('where', rank) or 'place not known'}"
