"""Never orphan: what lrcheck starts ends when lrcheck is gone, however it ended (the OOM
killer's or a CI timeout's SIGKILL among them), and what it leaves on disk is swept.

lrcheck names itself in the environment of every command it records (``ENV_OWNER``: its pid
and its start time, so that a pid used again by another process is not taken for it). Each
Python process of the command (``record.startup``, at the start of every one) watches that
owner from a daemon thread (``watch``): once the owner is gone it stops itself as lrcheck's
stop plans do — SIGTERM, SIGKILL after ``GRACE_S`` — so a launcher (torchrun) and each of its
workers end, each by its own watch. A folder lrcheck owns for the length of a run (the lockstep
exchange) holds its owner (``claim``); one whose owner is gone is removed at the next start
(``sweep``)."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

ENV_OWNER = "PYTHON_LRCHECK_OWNER"
OWNER_FILE = "owner"
ALSO_FILE = "also"  # the folders swept with it: one per line
POLL_S = 0.5
GRACE_S = 5.0
_PROC = Path("/proc")


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped by its parent, does not count)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def identity(pid: int | None = None) -> str | None:
    """``pid:start`` of a running process (default: this one; ``start``: its start time in
    clock ticks since boot, /proc/<pid>/stat's 22nd field); None without /proc."""
    pid = os.getpid() if pid is None else pid
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return f"{pid}:{stat.rsplit(')', 1)[1].split()[19]}"


def gone(owner: str) -> bool:
    """Whether the process ``owner`` (``identity``'s form) has ended; not for a malformed one."""
    pid, _, _ = owner.partition(":")
    if not pid.isdigit():
        return False
    return not alive(int(pid)) or identity(int(pid)) != owner


def claim(folder: Path, also: list[Path] | None = None) -> None:
    """``folder`` marked as this process's, for ``sweep``; ``also``: folders elsewhere (claimed
    too) swept with it."""
    me = identity()
    if me is not None:
        (folder / OWNER_FILE).write_text(me, encoding="utf-8")
        if also:
            (folder / ALSO_FILE).write_text("".join(f"{p}\n" for p in also), encoding="utf-8")


def sweep(parent: Path, prefix: str) -> list[Path]:
    """The folders ``parent/prefix*`` whose owner (``claim``) has ended, removed; the list."""
    removed = []
    for folder in parent.glob(f"{prefix}*") if parent.is_dir() else ():
        try:
            owner = (folder / OWNER_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if gone(owner):
            removed.extend(_with_owner(owner, _also(folder)))
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _also(folder: Path) -> list[Path]:
    try:
        return [Path(line) for line in (folder / ALSO_FILE).read_text().splitlines() if line]
    except OSError:
        return []


def _with_owner(owner: str, folders: list[Path]) -> list[Path]:
    """Those of ``folders`` that ``owner`` claimed, removed."""
    removed = []
    for folder in folders:
        try:
            mine = (folder / OWNER_FILE).read_text(encoding="utf-8").strip() == owner
        except OSError:
            continue
        if mine:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def _end_self() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)


def _watching(owner: str) -> None:
    while not gone(owner):
        time.sleep(POLL_S)
    _end_self()


def watch() -> threading.Thread | None:
    """A daemon thread that ends this process once its owner (``ENV_OWNER``) is gone; None
    where no owner is named or it cannot be watched (no /proc)."""
    owner = os.environ.get(ENV_OWNER, "")
    if not owner or identity() is None:
        return None
    thread = threading.Thread(target=_watching, args=(owner,), name="lrcheck-owner",
                              daemon=True)
    thread.start()
    return thread
