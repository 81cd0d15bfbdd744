"""Two recorded runs compared (above ``record/``, which records and reads them, and ``checks/``,
which judge them): ``lrcheck diff`` of two Recorder files or record folders, and
``lrcheck run`` of two command lines, recorded then diffed. ``lrcheck.api`` forwards to these;
a suite's command pairs (``spec.CommandPair``) run through ``run_commands`` too."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import shlex
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TextIO

from lrcheck.checks.status import FAIL, WARN, strictly
from lrcheck.errors import Interrupted, SpecError, stop_words
from lrcheck.plan.judging import RecordedJudging
from lrcheck.record.launch import DEFAULT_EVERY, RecordedRun, command_failed, record_command
from lrcheck.record.logged import findings, write_findings
from lrcheck.record.roles import ENV_NUDGE
from lrcheck.record.together import record_together
from lrcheck.result import Report
from lrcheck.spec import FilePair, Tolerances
from lrcheck.spec.run_options import RunOptions
from lrcheck.words import plural

if TYPE_CHECKING:
    from lrcheck.logs.model import Reading

P = ParamSpec("P")
NO_OPTIONS = RunOptions()  # lrcheck run's defaults


def diff_runs(reference: str | Path, candidate: str | Path, *,
              tolerances: Tolerances | None = None, twin: Path | None = None,
              strict: bool = False, stated: Reading | None = None) -> Report:
    """``lrcheck.diff``'s report of the two runs (files, record folders, or two runs' own
    logs: ``logs.pairs``); ``twin``: the record folder of the reference command's twin, the
    floor of free-running effects; ``strict``: effects judged only up to some update fail
    there (``checks.strictly``); ``stated``: how to read two logs (``--tag``, ``--log-steps``),
    a ``SpecError`` for two recordings."""
    from lrcheck.checks import recorded_checks
    from lrcheck.checks.logs import log_checks
    from lrcheck.checks.sides import side_checks
    from lrcheck.environment import Environment
    from lrcheck.logs.pairs import logs_pair, read_pair
    from lrcheck.record.sides import read_emas, read_facts, read_sides
    from lrcheck.result import Kind
    from lrcheck.version import __version__

    pair = FilePair(str(reference), str(candidate),
                    **({} if tolerances is None else {"tolerances": tolerances}))
    environment = Environment(lrcheck=__version__, device="none")
    if logs_pair(Path(reference), Path(candidate)):  # two runs' own logs (logs.pairs)
        logs, (ref, cand) = read_pair(Path(reference), Path(candidate), stated)
        checks = log_checks(*logs, (ref, cand), pair.tolerances)
        return Report(pair, ref, cand, strictly(checks) if strict else checks, environment,
                      kind=Kind.DIFF)
    if stated is not None and stated.stated:
        raise SpecError(f"--tag and --log-steps say how to read logs; {reference} and "
                        f"{candidate} are recordings, not logs")
    sides = read_sides(Path(reference), Path(candidate))
    facts = read_facts(Path(reference), Path(candidate), twin,  # judging, lr's causes
                       None if sides[1].run is None else sides[1].run.boundaries)
    more, incomplete = side_checks(*sides, pair.tolerances.params, pair.tolerances.lr,
                                   facts.judging.through)
    checks = recorded_checks(sides[0].trace, sides[1].trace, pair.tolerances, more, incomplete,
                             facts, read_emas(Path(reference), Path(candidate), twin))
    if strict:
        checks = strictly(checks)
    environment = replace(environment, deterministic=_deterministic(Path(candidate)))
    return Report(pair, sides[0].trace, sides[1].trace, checks, environment, kind=Kind.DIFF)


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


def _keeping_what_was_recorded(run: Callable[P, Report]) -> Callable[P, Report]:
    """``run`` (``run_commands``), where Ctrl-C or SIGTERM is an ``Interrupted`` carrying what
    the commands had recorded (result.json's verdict ``incomplete``), as ``compare``'s is."""
    @functools.wraps(run)
    def kept(*args: P.args, **kwargs: P.kwargs) -> Report:
        try:
            return run(*args, **kwargs)
        except KeyboardInterrupt as stop:
            given = inspect.signature(run).bind(*args, **kwargs).arguments
            folders = {side: Path(given["out"]) / side for side in ("reference", "candidate")}
            options = given.get("options")
            raise _interrupted(stop, folders, options.tolerances
                               if isinstance(options, RunOptions) else None) from None

    return kept


def _interrupted(stop: KeyboardInterrupt, folders: dict[str, Path],
                 tolerances: Tolerances | None) -> Interrupted:
    """What an interrupted ``run`` had recorded (each side's updates so far, in its record
    folder) as an ``IncompleteResult`` for result.json, verdict ``incomplete``."""
    from lrcheck.environment import Environment
    from lrcheck.record.folder import read_folder
    from lrcheck.result import IncompleteResult, Kind
    from lrcheck.trace import RunTrace
    from lrcheck.version import __version__

    how = stop_words(stop)
    traces = {}
    for side in ("reference", "candidate"):
        try:
            records = read_folder(folders[side]).records
        except (SpecError, OSError, ValueError):
            records = []
        trace = RunTrace.from_records(records, str(folders[side]))
        traces[side] = replace(trace, stopped=f"{how} after {plural(len(records), 'update')}")
    reason = (f"{how} while the commands ran; reference {traces['reference'].stopped}, "
              f"candidate {traces['candidate'].stopped}")
    pair = FilePair(str(folders["reference"]), str(folders["candidate"]),
                    **({} if tolerances is None else {"tolerances": tolerances}))
    result = IncompleteResult(pair, traces["reference"], traces["candidate"],
                              Environment(lrcheck=__version__, device="none"), reason,
                              kind=Kind.DIFF)
    return Interrupted(reason, result, how=how)


@_keeping_what_was_recorded
def run_commands(reference: str, candidate: str, out: str | Path,
                 options: RunOptions = NO_OPTIONS, *, echo: TextIO | None = None) -> Report:
    """``lrcheck.run_commands``: both command lines recorded into ``out``/reference and
    ``out``/candidate, then diffed, and each run's own logs (``options.ref_logs``,
    ``options.logs``, else where its trainer logged: ``record.logged``; read as ``tags`` and
    ``log_steps`` say) held against its record, in the report's logs section. By default side
    by side, the candidate in lockstep with the reference (``record.together``; ``timeout``:
    seconds without an update before both are stopped as hung); ``free``: one after the other,
    each free-running. A pair that ran free (asked to, or where lockstep could not load:
    shards) and whose effects go beyond their tolerance is judged against a twin: the
    reference command run again into ``out``/twin, its parameters nudged by one ulp at its
    first step (``strict``: effects judged only up to the update where the twin decorrelated
    fail there). A command that fails is a ``RunError`` with its exit code and last lines.
    ``deterministic``: every command with ``--deterministic``'s settings. ``interrupt_at``
    and ``resume``: the candidate interrupted and resumed (``record.interrupt``), its
    processes joined into one timeline. ``echo``: where the commands' output goes."""
    from lrcheck.logs.read import reading

    stated = reading(options.tags, options.log_steps)
    commands = {side: split_command(side, line)
                for side, line in (("reference", reference), ("candidate", candidate))}
    if (interrupt := options.interrupt) is not None:
        commands["candidate"] = interrupt.command(commands["candidate"])
    every = DEFAULT_EVERY if options.fingerprint_every is None else options.fingerprint_every
    folders = {side: Path(out) / side for side in ("reference", "candidate", "twin")}
    samples, deterministic = options.samples, options.deterministic
    if options.free:
        for side, argv in commands.items():
            _record_alone(side, argv, folders[side], samples, every, echo,
                          deterministic=deterministic)
    else:
        for run in record_together(commands, Path(out), samples=samples, every=every,
                                   echo=echo, timeout=options.timeout,
                                   deterministic=deterministic,
                                   dense=interrupt is not None).values():
            _stepped(run)
    from lrcheck.record.sides import read_judging

    report = diff_runs(folders["reference"], folders["candidate"],
                       tolerances=options.tolerances, strict=options.strict)
    if not _needs_twin(report, read_judging(folders["candidate"])[0]):
        if (folders["twin"] / "run.json").exists():  # an earlier run's, in a reused folder
            shutil.rmtree(folders["twin"], ignore_errors=True)
    else:
        # Beside a pair recorded together, whose reference fingerprinted every update
        # (``record.process``), the twin does too.
        _record_alone("twin of the reference", commands["reference"], folders["twin"],
                      samples, every if options.free else 1, echo, {ENV_NUDGE: "1"},
                      deterministic)
        report = diff_runs(folders["reference"], folders["candidate"],
                           tolerances=options.tolerances, twin=folders["twin"],
                           strict=options.strict)
    report.logs = [*findings(folders["reference"], "reference", options.ref_logs, stated),
                   *findings(folders["candidate"], "candidate", options.logs, stated)]
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


def _needs_twin(report: Report, judging: RecordedJudging) -> bool:
    """Whether the effects (``params``, ``grad-norm``) of the updates judged free-running
    (``judging.free_from`` on: all, or those after lockstep stopped) go beyond their tolerance
    where no cause (``lr``, ``updates``, ``optimizer``) already differs, at or before them."""
    checks = {c.name: c for c in report.checks}
    start = judging.free_from
    if start is None:  # in lockstep throughout
        return False
    effects = [c.first_divergence for name in ("params", "grad-norm")
               if (c := checks.get(name)) is not None and c.status in (FAIL, WARN)
               and c.first_divergence is not None and c.first_divergence >= start
               and "not comparable:" not in c.detail]
    if not effects:
        return False
    causes = [c.first_divergence for name in ("lr", "updates", "optimizer", "ranks (reference)",
                                              "ranks (candidate)")
              if (c := checks.get(name)) is not None and c.status == FAIL]
    known = [k for k in causes if k is not None]
    return not causes or (bool(known) and min(known) > min(effects))
