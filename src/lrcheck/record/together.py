"""Two commands recorded side by side, in lockstep (``lrcheck run``; ``record.lockstep`` is
what their processes do at each update). Each command writes its own record folder, as
``lrcheck record`` does; the two share an exchange folder (in ``/dev/shm`` where there is one),
which holds at most a few states (in a spare folder in the report folder, on the disk, where
they do not fit there: ``record.exchange``) and is removed at the end; each holds its owner,
lrcheck's process, and one whose owner is gone (lrcheck was killed) is swept at the next start
(``procs.owner``).

Neither command is left waiting for the other: when one ends, however it ended, its marker
releases the other's waits; a command that fails stops the other (SIGTERM, SIGKILL after 5
s) and is a ``RunError`` naming it; so is one that makes no update for ``timeout`` seconds
once updates have begun."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TextIO

from lrcheck.errors import RunError
from lrcheck.procs.owner import claim, sweep
from lrcheck.record.launch import (
    ENV_RUN,
    LOG,
    STOP_POLL_S,
    TAIL_LINES,
    RecordedRun,
    check_command,
    command_ended,
    command_failed,
    count_lines,
    environment,
    finish_folder,
    pass_on,
    prepare_folder,
    signal_command,
    stop_plan,
)
from lrcheck.record.roles import ENV_DENSE, ENV_EXCHANGE, ENV_ROLE, ENV_SPARE, ended
from lrcheck.spec import RUN_STALL_S

PREFIX = "lrcheck-lockstep-"


def scratch() -> str | None:
    """Where the exchange goes: a memory-backed folder where there is one (its states go there
    only where they fit: ``record.exchange``)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _exchange(out: Path) -> tuple[Path, Path | None]:
    """The exchange folder and, where it is in memory, a spare one on the disk of the report
    folder ``out``, both claimed by this process; first, those that a killed lrcheck left are
    swept."""
    out.mkdir(parents=True, exist_ok=True)
    for parent in {scratch(), tempfile.gettempdir(), str(out)}:
        if parent is not None:
            sweep(Path(parent), PREFIX)
    exchange = Path(tempfile.mkdtemp(prefix=PREFIX, dir=scratch()))
    if scratch() is None:
        claim(exchange)
        return exchange, None
    spare = Path(tempfile.mkdtemp(prefix=PREFIX, dir=out))
    claim(spare)
    claim(exchange, also=[spare])  # a later run of another report folder sweeps it too
    return exchange, spare


# torchrun's summary of a failure: "rank      : 1 (local_rank: 1)" under "Root Cause (first
# observed failure)" (the ranks it stopped after it are listed before, under "Failures").
_ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)\b")


class _Side:
    def __init__(self, name: str, argv: list[str], command: Sequence[str], folder: Path,
                 env: dict[str, str], echo: TextIO | None, lock: threading.Lock) -> None:
        self.name, self.command, self.folder = name, tuple(command), folder
        self.token = env[ENV_RUN]
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, errors="replace")
        self.code: int | None = None
        self.thread = threading.Thread(
            target=pass_on, args=(self.proc, folder / LOG, self.tail, echo, f"{name}│ ", lock),
            daemon=True)
        self.thread.start()

    def ranks(self) -> str:
        """Which rank failed: torchrun's root cause where its output says it, else the rank
        whose record stopped first, where the command ran several."""
        lines = list(self.tail)
        root = next((i for i, line in enumerate(lines) if "Root Cause" in line), None)
        for line in lines[root:] if root is not None else ():
            found = _ROOT_RANK.match(line)
            if found:
                return f"; rank {found[1]} failed first, as torchrun says"
        counts = {int(path.stem[4:]): count_lines(path)
                  for path in self.folder.glob("rank*.jsonl") if path.stem[4:].isdigit()}
        if len(counts) < 2 or len(set(counts.values())) < 2:
            return ""
        rank = min(counts, key=lambda r: (counts[r], r))
        return (f"; rank {rank} of {len(counts)} stopped first, after "
                f"{counts[rank]} update(s)")

    def progress(self) -> int:
        """How far its records have grown (bytes): what the stall timeout watches."""
        return sum(p.stat().st_size for p in self.folder.glob("rank*.jsonl"))

    def failure(self) -> RunError:
        how = RecordedRun.ended_as(self.code if self.code is not None else -9)
        return command_failed(self.name, self.command, how + self.ranks(), self.tail)


def record_together(commands: Mapping[str, Sequence[str]], out: Path, *, samples: int | None,
                    every: int, echo: TextIO | None = None,
                    timeout: float | None = RUN_STALL_S,
                    deterministic: bool = False, dense: bool = False
                    ) -> dict[str, RecordedRun]:
    """Record ``commands`` (``{"reference": argv, "candidate": argv}``) side by side into
    ``out/<side>``, the candidate in lockstep with the reference; their ``RecordedRun``s. A
    command that fails or stalls is a ``RunError`` (the other stopped); Ctrl-C stops both,
    keeps their records and raises ``KeyboardInterrupt``. ``deterministic``: both with
    ``--deterministic``'s settings (``record.launch.environment``); ``dense``: the reference
    fingerprints every update (``roles.ENV_DENSE``: an interrupted candidate's resume runs
    free)."""
    argvs = {side: check_command(command) for side, command in commands.items()}
    exchange, spare = _exchange(out)
    lock = threading.Lock()
    sides: dict[str, _Side] = {}
    started = time.monotonic()
    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM (errors.Stopped)
    problem: RunError | None = None
    try:
        for name, argv in argvs.items():
            folder = prepare_folder(out / name)
            env = environment(folder, samples, every, deterministic=deterministic)
            env[ENV_EXCHANGE], env[ENV_ROLE] = str(exchange), name
            env[ENV_SPARE] = "" if spare is None else str(spare)
            if dense and name == "reference":
                env[ENV_DENSE] = "1"
            sides[name] = _Side(name, argv, commands[name], folder, env, echo, lock)
        problem = _watch(sides, exchange, timeout)
    except KeyboardInterrupt as stop:
        interrupted = stop
        _stop_all(sides.values(), interrupt=True)
    finally:
        _stop_all(sides.values(), interrupt=False)
        for side in sides.values():
            side.thread.join(5)
        for made in (exchange, spare):
            if made is not None:
                shutil.rmtree(made, ignore_errors=True)
    seconds = time.monotonic() - started
    runs = {name: finish_folder(side.folder, side.command, side.proc.wait(), seconds,
                                side.tail, interrupted is not None, samples, every,
                                deterministic)
            for name, side in sides.items()}
    if interrupted is not None:
        raise interrupted
    if problem is not None:
        raise problem
    return runs


def _stop_all(sides: Iterable[_Side], *, interrupt: bool) -> None:
    """Stop every command still running, all at once (``launch.stop_plan``'s signals, each sent
    to all before any is waited for)."""
    sides = list(sides)
    for sig, wait in stop_plan(interrupt):
        alive = [side for side in sides if not command_ended(side.proc, side.token)]
        if not alive:
            break
        for side in alive:
            signal_command(side.proc, sig, side.token)
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            try:
                time.sleep(STOP_POLL_S)
            except KeyboardInterrupt:  # a second Ctrl-C: go on stopping
                continue
            alive = [side for side in alive if not command_ended(side.proc, side.token)]
    for side in sides:
        side.code = side.proc.wait() if side.code is None else side.code


def _watch(sides: dict[str, _Side], exchange: Path, timeout: float | None) -> RunError | None:
    """Wait for both commands; the failure that stopped them, or None."""
    last, moved = -1, time.monotonic()
    while any(side.code is None for side in sides.values()):
        for side in sides.values():
            if side.code is None and (code := side.proc.poll()) is not None:
                side.code = code
                ended(exchange, side.name).touch()
                if code != 0:
                    _stop_all(sides.values(), interrupt=False)
                    return side.failure()
        size = sum(side.progress() for side in sides.values())
        now = time.monotonic()
        if size != last:
            last, moved = size, now
        elif timeout and size and now - moved > timeout:
            stuck = min(sides.values(), key=lambda s: (s.code is not None, s.progress()))
            _stop_all(sides.values(), interrupt=False)
            return RunError(f"no update in either command for {timeout:g} s: the {stuck.name} "
                            f"command {shlex.join(stuck.command)} hung (stopped both; "
                            "--timeout sets how long to wait)")
        time.sleep(0.05)
    return None
