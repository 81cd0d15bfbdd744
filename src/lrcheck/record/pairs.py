"""Two recorded runs compared: ``lrcheck diff`` of two Recorder files or record folders, and
``lrcheck run`` of two command lines, recorded then diffed. ``lrcheck.api`` forwards to these;
a suite's command pairs (``spec.CommandPair``) run through ``run_commands`` too."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from lrcheck.checks.status import FAIL, WARN, strictly
from lrcheck.errors import SpecError
from lrcheck.record.launch import DEFAULT_EVERY, RecordedRun, command_failed, record_command
from lrcheck.record.logged import findings, write_findings
from lrcheck.record.roles import ENV_NUDGE
from lrcheck.record.together import record_together
from lrcheck.result import Report
from lrcheck.spec import RUN_STALL_S, FilePair, Tolerances

if TYPE_CHECKING:
    from lrcheck.logs.model import Reading


def diff_runs(reference: str | Path, candidate: str | Path, *,
              tolerances: Tolerances | None = None, twin: Path | None = None,
              strict: bool = False, stated: Reading | None = None) -> Report:
    """``lrcheck.diff``'s report of the two runs (files, record folders, or two runs' own
    logs: ``logs.pairs``); ``twin``: the record folder of the reference command's twin, the
    floor of free-running effects; ``strict``: effects judged only up to some update fail
    there (``checks.strictly``); ``stated``: how to read two logs (``--tag``, ``--log-steps``),
    a ``SpecError`` for two recordings."""
    from lrcheck.checks import recorded_checks
    from lrcheck.environment import Environment
    from lrcheck.logs.pairs import logs_pair, read_pair
    from lrcheck.record.sides import read_emas, read_facts, read_sides
    from lrcheck.result import Kind
    from lrcheck.version import __version__

    pair = FilePair(str(reference), str(candidate),
                    **({} if tolerances is None else {"tolerances": tolerances}))
    environment = Environment(lrcheck=__version__, device="none")
    if logs_pair(Path(reference), Path(candidate)):  # two runs' own logs (logs.pairs)
        ref, cand, checks = read_pair(Path(reference), Path(candidate), pair.tolerances,
                                      stated)
        return Report(pair, ref, cand, strictly(checks) if strict else checks, environment,
                      kind=Kind.DIFF)
    if stated is not None and stated.stated:
        raise SpecError(f"--tag and --log-steps say how to read logs; {reference} and "
                        f"{candidate} are recordings, not logs")
    ref, cand, more, incomplete = read_sides(Path(reference), Path(candidate),
                                             pair.tolerances.params, pair.tolerances.lr)
    checks = recorded_checks(ref, cand, pair.tolerances, more, incomplete,
                             read_facts(Path(reference), Path(candidate), twin,
                                        pair.tolerances.params),
                             read_emas(Path(reference), Path(candidate), twin))
    if strict:
        checks = strictly(checks)
    environment = replace(environment, deterministic=_deterministic(Path(candidate)))
    return Report(pair, ref, cand, checks, environment, kind=Kind.DIFF)


def _deterministic(folder: Path) -> dict[str, object] | None:
    """What ``--deterministic`` set in the first process of a record folder (its rank 0's
    description; every process's is in ``run.json``), where it was on."""
    try:
        found = json.loads((folder / "rank0.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    entry = found.get("deterministic") if isinstance(found, dict) else None
    return entry if isinstance(entry, dict) else None


def record_run(command: Sequence[str], out: str | Path, *, samples: int | None = None,
               fingerprint_every: int | None = None, echo: TextIO | None = None,
               capture: bool = False, deterministic: bool = False,
               logs: str | Path | None = None, stated: Reading | None = None) -> RecordedRun:
    """``lrcheck.record``: ``command`` recorded into ``out`` (``deterministic``: with
    ``--deterministic``'s settings); a command that ended well but made no optimizer update is
    a ``SpecError`` saying what it saw. Its log (``logs``, else where its trainer logged) held
    against the record: ``RecordedRun.logs``, and logs.json."""
    run = _stepped(record_command(
        command, Path(out), samples=samples,
        every=DEFAULT_EVERY if fingerprint_every is None else fingerprint_every,
        echo=echo, capture=capture, deterministic=deterministic))
    found = findings(Path(out), "recorded", _path(logs), stated) if run.updates else []
    if found:
        write_findings(Path(out), found)
    return dataclasses.replace(run, logs=tuple(found))


def _stepped(run: RecordedRun) -> RecordedRun:
    """``run``, or a ``SpecError`` where it ended well but made no optimizer update."""
    if run.exit_code == 0 and not run.updates:
        raise SpecError(f"{shlex.join(run.command)}: ended well but made no optimizer update: "
                        f"{run.nothing_recorded()}")
    return run


def split_command(side: str, line: str) -> list[str]:
    """``line`` split as a shell would; a line that does not split, or is empty, is a
    ``SpecError``."""
    try:
        argv = shlex.split(line)
    except ValueError as exc:
        raise SpecError(f"the {side} command {line!r} does not split: {exc}") from None
    if not argv:
        raise SpecError(f"the {side} command line is empty ({line!r}): give both quoted, e.g. "
                        "lrcheck run 'python train.py --bs 32' "
                        "'python train.py --bs 16 --accum 2'")
    return argv


def run_commands(reference: str, candidate: str, out: str | Path, *,
                 samples: int | None = None, fingerprint_every: int | None = None,
                 echo: TextIO | None = None, tolerances: Tolerances | None = None,
                 free: bool = False, timeout: float | None = RUN_STALL_S,
                 strict: bool = False, deterministic: bool = False,
                 ref_logs: str | Path | None = None,
                 logs: str | Path | None = None, stated: Reading | None = None) -> Report:
    """``lrcheck.run_commands``: both command lines recorded into ``out``/reference and
    ``out``/candidate, then diffed, and each run's own logs (``ref_logs``, ``logs``, else
    where its trainer logged: ``record.logged``) held against its record, in the report's
    logs section. By default side by side, the candidate in lockstep with
    the reference (``record.together``; ``timeout``: seconds without an update before both are
    stopped as hung); ``free``: one after the other, each free-running. A pair that ran free
    (asked to, or where lockstep could not load: shards) and whose effects go beyond their
    tolerance is judged against a twin: the reference command run again into ``out``/twin,
    its parameters nudged by one ulp at its first step (``strict``: effects judged only up to
    the update where the twin decorrelated fail there). A command that fails is a
    ``RunError`` with its exit code and last lines. ``deterministic``: every command with
    ``--deterministic``'s settings."""
    if timeout is not None and not timeout >= 0:
        raise SpecError(f"--timeout must be a number of seconds >= 0 (0: wait for ever), got "
                        f"{timeout!r}")
    commands = {side: split_command(side, line)
                for side, line in (("reference", reference), ("candidate", candidate))}
    every = DEFAULT_EVERY if fingerprint_every is None else fingerprint_every
    folders = {side: Path(out) / side for side in ("reference", "candidate", "twin")}
    if free:
        for side, argv in commands.items():
            _record_alone(side, argv, folders[side], samples, every, echo,
                          deterministic=deterministic)
    else:
        for run in record_together(commands, Path(out), samples=samples, every=every,
                                   echo=echo, timeout=timeout,
                                   deterministic=deterministic).values():
            _stepped(run)
    report = diff_runs(folders["reference"], folders["candidate"], tolerances=tolerances,
                       strict=strict)
    if not _needs_twin(report):
        if (folders["twin"] / "run.json").exists():  # an earlier run's, in a reused folder
            shutil.rmtree(folders["twin"], ignore_errors=True)
    else:
        _record_alone("twin of the reference", commands["reference"], folders["twin"],
                      samples, every, echo, {ENV_NUDGE: "1"}, deterministic)
        report = diff_runs(folders["reference"], folders["candidate"], tolerances=tolerances,
                           twin=folders["twin"], strict=strict)
    report.logs = [*findings(folders["reference"], "reference", _path(ref_logs), stated),
                   *findings(folders["candidate"], "candidate", _path(logs), stated)]
    return report


def _path(given: str | Path | None) -> Path | None:
    return None if given is None else Path(given)


def _record_alone(side: str, argv: list[str], folder: Path, samples: int | None, every: int,
                  echo: TextIO | None, extra: dict[str, str] | None = None,
                  deterministic: bool = False) -> RecordedRun:
    """One command recorded on its own; a ``RunError`` where it fails."""
    run = _stepped(record_command(argv, folder, samples=samples, every=every, echo=echo,
                                  capture=True, extra=extra, deterministic=deterministic))
    if run.exit_code != 0:
        raise command_failed(side, argv, run.how_it_ended, run.tail)
    return run


def _needs_twin(report: Report) -> bool:
    """Whether a free-running pair's effects (``params``, ``grad-norm``) go beyond their
    tolerance where no cause (``lr``, ``updates``) already differs, at or before them."""
    checks = {c.name: c for c in report.checks}
    if "grads" in checks:  # in lockstep
        return False
    effects = [c.first_divergence for name in ("params", "grad-norm")
               if (c := checks.get(name)) is not None and c.status in (FAIL, WARN)
               and c.first_divergence is not None and "not comparable:" not in c.detail]
    if not effects:
        return False
    causes = [c.first_divergence for name in ("lr", "updates", "ranks (reference)",
                                              "ranks (candidate)")
              if (c := checks.get(name)) is not None and c.status == FAIL]
    known = [k for k in causes if k is not None]
    return not causes or (bool(known) and min(known) > min(effects))
