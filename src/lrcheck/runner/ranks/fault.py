"""A test-only fault switch: ``LRCHECK_FAULT=RANK:UPDATE`` makes rank RANK of a multi-process
candidate raise right after update UPDATE; ``RANK:UPDATE:hang`` makes it stop there for good
(and say so in a file: ``_tell_hang``). The tests of "failure is loud, fast and clean" use it;
nobody else should set it."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lrcheck.errors import SpecError

FAULT_ENV = "LRCHECK_FAULT"


class InjectedFault(RuntimeError):
    """What a worker raises when the fault switch names it."""


@dataclass(frozen=True)
class Fault:
    rank: int
    update: int
    hang: bool = False

    def trip(self, rank: int, update: int) -> None:
        """Raise (or hang) when this is the named rank just past the named update."""
        if (rank, update) != (self.rank, self.update):
            return
        if self.hang:
            _tell_hang(rank)
            while True:  # stopped only by a signal: what --timeout is for
                time.sleep(60)
        raise InjectedFault(f"{FAULT_ENV}={self.rank}:{self.update} made rank {rank} raise "
                            f"after update {update}")


def _tell_hang(rank: int) -> None:
    """Leave ``fault-hang-rank{rank}.pid`` (this process's id) in the temporary folder: how a
    test finds a rank inside a torchrun job it did not launch, once it is known to be stuck."""
    path = Path(tempfile.gettempdir()) / f"fault-hang-rank{rank}.pid"
    path.write_text(str(os.getpid()))


def parse_fault(text: str) -> Fault:
    """``RANK:UPDATE`` or ``RANK:UPDATE:hang``."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] != "hang"):
            raise ValueError
        rank, update = int(parts[0]), int(parts[1])
        if rank < 0 or update < 0:
            raise ValueError
    except ValueError:
        raise SpecError(f"{FAULT_ENV}={text!r} is not RANK:UPDATE or RANK:UPDATE:hang "
                        "(whole numbers >= 0), e.g. 1:3") from None
    return Fault(rank, update, hang=len(parts) == 3)


def fault_from_env(environ: Mapping[str, str]) -> Fault | None:
    text = environ.get(FAULT_ENV, "")
    return parse_fault(text) if text else None


def fault_hook(role: str, rank: int,
               environ: Mapping[str, str]) -> Callable[[Any, int], None] | None:
    """An ``on_update`` for rank ``rank`` that trips the switch, armed on the candidate only."""
    fault = fault_from_env(environ) if role == "candidate" else None
    if fault is None:
        return None
    return lambda record, total: fault.trip(rank, record.step)
