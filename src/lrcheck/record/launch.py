"""``lrcheck record``: run a command with lrcheck's recording in every Python process it starts,
and describe the record folder it wrote (``run.json``).

The recording is injected, not imported by the user's code: ``boot/`` holds a
``sitecustomize.py`` put first on ``PYTHONPATH`` and switched on by ``PYTHON_LRCHECK_RECORD_DIR``
(``record.startup``). It never changes what the command computes, and the command's exit code
is kept."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from lrcheck.errors import RunError, SpecError
from lrcheck.procs.marks import marked
from lrcheck.procs.owner import ENV_OWNER, identity
from lrcheck.record.roles import ENV_DIR
from lrcheck.record.startup import ENV_DETERMINISTIC, ENV_EVERY, ENV_LIB, ENV_SAMPLES
from lrcheck.spec import determinism

if TYPE_CHECKING:
    from lrcheck.logs.truth import LogFinding

BOOT = Path(__file__).with_name("boot")
DESCRIPTION = "run.json"
LOG = "output.log"
TAIL_LINES = 20
# A fingerprint and gradient norm cost about 3 AdamW steps (21 ms for 2.1 M parameters on this
# CPU, against 7 ms for the step): every 50 updates keeps them near 3 % of a loop whose update
# takes 16 ms (BENCHMARKS.md, "Recording overhead of `lrcheck record`"). LR-only recording
# costs ~17 µs per update.
DEFAULT_EVERY = 50
# Python's flags that keep sitecustomize from running or PYTHONPATH from being read.
_BLOCKING = {"I": "-I (isolated mode ignores PYTHONPATH and site)",
             "E": "-E (ignores PYTHON* variables, PYTHONPATH among them)",
             "S": "-S (does not import site, so no sitecustomize runs)"}
# Carried by every process of a recorded command (inherited), so that stopping the command finds
# all of them, wherever they were re-parented to (a PYTHON* name, as the other settings).
ENV_RUN = "PYTHON_LRCHECK_RECORD_RUN"
STOP_POLL_S = 0.05
_OURS = re.compile(r"^(rank\d+(-p\d+)?(-opt\d+)?\.jsonl?|(lockstep|ema)-rank\d+(-p\d+)?\.jsonl"
                   r"|run\.json|output\.log|\.torch-\d+)$")


@dataclass(frozen=True)
class RecordedRun:
    """What one recorded command left: its folder, its exit code (negative: ended by that
    signal), the updates of each Recorder file, the last lines it printed (where captured), and
    whether lrcheck was interrupted while it ran; ``logs``: its own log held against the
    record (``record.logged``)."""

    folder: Path
    command: tuple[str, ...]
    exit_code: int
    updates: dict[str, int]
    seconds: float
    tail: tuple[str, ...] = ()
    interrupted: bool = False
    torch_processes: int = 0
    processes: list[dict[str, Any]] = field(default_factory=list)
    logs: tuple[LogFinding, ...] = ()

    @property
    def how_it_ended(self) -> str:
        return self.ended_as(self.exit_code)

    @staticmethod
    def ended_as(code: int) -> str:
        """An exit code in words (negative: the signal that ended it)."""
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def nothing_recorded(self) -> str:
        """Why no update was recorded, in words (what the processes showed)."""
        off = next((p["recording_off"] for p in self.processes
                    if isinstance(p.get("recording_off"), dict)), None)
        if off is not None:
            return (f"its recording was switched off before its first update (the training "
                    f"went on): {off.get('reason')}")
        if not self.torch_processes:
            return ("no Python process it started imported torch (a command that is not "
                    "Python, or a launcher that starts Python with -I/-E/-S or a filtered "
                    "environment, is not recorded)")
        return (f"{self.torch_processes} Python process(es) imported torch but none called "
                "optimizer.step()")


def check_command(command: Sequence[str]) -> list[str]:
    """``command`` with its program found on PATH; a ``SpecError`` for nothing to run, a program
    that cannot be found, or a Python flag that would keep the recording out."""
    if not command:
        raise SpecError("nothing to record: give the command after '--', e.g. "
                        "lrcheck record -- python train.py")
    found = shutil.which(command[0])
    if found is None:
        raise SpecError(f"command not found: {command[0]!r} (not an executable file, nor on "
                        "PATH)")
    if re.fullmatch(r"python[\d.]*", Path(command[0]).name):
        for arg in command[1:]:
            if not arg.startswith("-") or arg in ("-m", "-c") or arg.startswith("--"):
                break
            for letter in arg[1:]:
                if letter in _BLOCKING:
                    raise SpecError(f"{command[0]} {arg}: the flag {_BLOCKING[letter]}, which "
                                    "keeps lrcheck's recording out of the process; drop it")
    return [found, *command[1:]]


def environment(folder: Path, samples: int | None, every: int,
                base: dict[str, str] | None = None, deterministic: bool = False) -> dict[str, str]:
    """The command's environment: ``base`` (default: this process's) with ``boot/`` first on
    ``PYTHONPATH``, the recording's settings, and a token of its own (``ENV_RUN``); with
    ``deterministic``, ``--deterministic``'s environment variables where ``base`` does not set
    them (one it sets is the user's, kept, and the description says so) and the switch for its
    flags (``ENV_DETERMINISTIC``); and this process as their owner (``procs.owner``: they end
    once it is gone, however it ended)."""
    env = dict(os.environ if base is None else base)
    if deterministic:
        env = {**determinism.environment(env), ENV_DETERMINISTIC: "1"}
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join([str(BOOT), *([path] if path else [])])
    env[ENV_DIR] = str(folder.resolve())
    env[ENV_EVERY] = str(every)
    env[ENV_SAMPLES] = "" if samples is None else str(samples)
    env[ENV_LIB] = str(Path(__file__).resolve().parents[2])  # the folder holding lrcheck/
    env[ENV_RUN] = uuid.uuid4().hex
    env[ENV_OWNER] = identity() or ""  # its processes end when this one is gone
    return env


def prepare_folder(out: Path) -> Path:
    """``out`` made (and emptied of a previous recording's files); a ``SpecError`` when it
    cannot be written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        for old in out.iterdir():
            if _OURS.match(old.name):
                old.unlink()
        probe = out / ".lrcheck-probe"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise SpecError(f"--out {str(out)!r} cannot be written: {exc.strerror or exc}") from None
    return out


def record_command(command: Sequence[str], out: Path, *, samples: int | None = None,
                   every: int = DEFAULT_EVERY, echo: TextIO | None = None,
                   capture: bool = False, extra: dict[str, str] | None = None,
                   deterministic: bool = False) -> RecordedRun:
    """Run ``command`` recorded into ``out``. ``capture``: read its output (stdout and stderr
    together) to keep the last lines and ``output.log``, passing it on to ``echo`` (None:
    silent); otherwise it writes to this process's terminal. Ctrl-C (or SIGTERM) while it runs
    is passed on to the command, which is given time to end; what was recorded is kept.
    ``deterministic``: with ``--deterministic``'s settings (``environment``)."""
    if samples is not None and samples < 1:
        raise SpecError(f"--samples must be a whole number >= 1, got {samples!r}")
    if every < 0:
        raise SpecError(f"--fingerprint-every must be >= 0 (0: none), got {every!r}")
    argv = check_command(command)
    folder = prepare_folder(out)
    env = {**environment(folder, samples, every, deterministic=deterministic), **(extra or {})}
    started = time.monotonic()
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM (errors.Stopped)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE if capture else None,
                            stderr=subprocess.STDOUT if capture else None, text=capture,
                            errors="replace" if capture else None)
    try:
        if capture:
            pass_on(proc, folder / LOG, tail, echo)
        code = proc.wait()
    except KeyboardInterrupt as stop:
        interrupted = stop
        code = _stop(proc, env[ENV_RUN])
    run = finish_folder(folder, tuple(command), code, time.monotonic() - started, tail,
                        interrupted is not None, samples, every, deterministic)
    if interrupted is not None:
        raise interrupted
    return run


def pass_on(proc: subprocess.Popen[str], log: Path, tail: deque[str], echo: TextIO | None,
            prefix: str = "", lock: threading.Lock | None = None) -> None:
    """The command's output into ``log`` and ``tail``, and on to ``echo`` (each line after
    ``prefix``, under ``lock`` where two commands share it)."""
    assert proc.stdout is not None
    with log.open("w", encoding="utf-8") as file:
        for line in proc.stdout:
            file.write(line)
            tail.append(line.rstrip("\n"))
            if echo is not None:
                with lock or contextlib.nullcontext():
                    echo.write(prefix + line)
                    echo.flush()


def command_failed(side: str, command: Sequence[str], how: str,
                   tail: Sequence[str]) -> RunError:
    """The error of a recorded command that failed: its side, its line, how it ended and its
    last lines."""
    last = "\n".join(list(tail)[-8:])
    text = f"the {side} command {shlex.join(command)} failed ({how})"
    return RunError(f"{text}; its last lines:\n{last}" if last else text)


def _stop(proc: subprocess.Popen[Any], token: str) -> int:
    """The command after Ctrl-C: it had the SIGINT too where it shares the terminal; else it
    gets one now; SIGTERM after 10 s, SIGKILL after 5 more, each to every process of the
    command (``signal_command``). The waits end once the command and every process of it have
    ended."""
    for sig, wait in stop_plan(interrupt=True):
        if command_ended(proc, token):
            break
        signal_command(proc, sig, token)
        try:
            _wait_ended(proc, token, wait)
            break
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            continue
    return proc.wait()


def stop_plan(interrupt: bool) -> tuple[tuple[signal.Signals, float], ...]:
    """The signals that stop a recorded command, each with the seconds it is given: after
    Ctrl-C (``interrupt``) SIGINT, then SIGTERM after 10 s and SIGKILL after 5 more; else
    SIGTERM, and SIGKILL after 5 s."""
    stop = ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0))
    return ((signal.SIGINT, 10.0), *stop) if interrupt else stop


def signal_command(proc: subprocess.Popen[Any], sig: signal.Signals, token: str) -> None:
    """``sig`` to a recorded command and, but for SIGINT (which a launcher passes on as it
    means to), to every process of it still running (each carries ``token``, ``ENV_RUN``,
    where /proc shows it), so that a wrapper that does not pass signals on (``bash`` with
    ``trap '' TERM``) leaves nothing running."""
    tree = [] if sig == signal.SIGINT else marked(token, ENV_RUN)
    if proc.poll() is None:
        proc.send_signal(sig)
    for pid in set(tree) - {proc.pid}:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def command_ended(proc: subprocess.Popen[Any], token: str) -> bool:
    """Whether ``proc`` has ended and no process carries ``token``."""
    return proc.poll() is not None and not marked(token, ENV_RUN)


def _wait_ended(proc: subprocess.Popen[Any], token: str, seconds: float) -> None:
    """Until ``command_ended``; ``TimeoutExpired`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not command_ended(proc, token):
        if time.monotonic() >= deadline:
            raise subprocess.TimeoutExpired(proc.args, seconds)
        time.sleep(STOP_POLL_S)


def finish_folder(folder: Path, command: tuple[str, ...], code: int, seconds: float,
            tail: deque[str], interrupted: bool, samples: int | None, every: int,
            deterministic: bool = False) -> RecordedRun:
    """The folder's ``run.json``, written from what the processes left (``deterministic``:
    whether ``--deterministic`` was on; each process's description says what was in effect)."""
    processes = []
    for path in sorted(folder.glob("rank*.json")):
        try:
            processes.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            processes.append({"file": path.name, "unreadable": True})
    updates = {path.name: count_lines(path) for path in sorted(folder.glob("rank*.jsonl"))}
    run = RecordedRun(folder, command, code, updates, seconds, tuple(tail), interrupted,
                      _torch_markers(folder), processes)
    worlds = [p.get("world", 1) for p in processes]
    document = {
        "kind": "lrcheck-record", "schema_version": 1, "command": list(command),
        "exit_code": code, "ended": run.how_it_ended, "interrupted": interrupted,
        "seconds": round(seconds, 3), "samples_per_update": samples,
        "fingerprint_every": every, "deterministic": deterministic,
        "world_size": max(worlds, default=1),
        "updates": updates, "torch_processes": run.torch_processes, "processes": processes,
        "versions": {"python": sys.version.split()[0], "lrcheck": _version(),
                     "torch": next((p["torch"] for p in processes if "torch" in p), None)}}
    (folder / DESCRIPTION).write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    return run


def _torch_markers(folder: Path) -> int:
    """How many processes installed the recording (each left an empty ``.torch-<pid>`` when it
    imported torch); the markers are removed once counted (``run.json`` keeps the count)."""
    markers = list(folder.glob(".torch-*"))
    for marker in markers:
        marker.unlink(missing_ok=True)
    return len(markers)


def count_lines(path: Path) -> int:
    with path.open("rb") as file:
        return sum(1 for line in file if line.strip())


def _version() -> str:
    from lrcheck.version import __version__

    return __version__
