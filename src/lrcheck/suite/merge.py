"""The shards of one suite (``lrcheck suite FILE --shard k/n``, each in its own folder) read back
into one ``SuiteResult``, as if the whole suite had run in one place.

Each shard's ``suite.json`` records the digest of the whole suite and every pair's shard
(``shard.ShardInfo``). Shards of different suites, or of different splits, and a pair that two
shards both have, are bad input (``SpecError``). A pair that no shard has — its shard was lost or
not given — is an ``error`` outcome naming its shard, so a merge that misses one never passes.
Each pair's report is read back from its ``result.json``, so that ``--baseline`` compares the
merged result exactly as it compares a suite run in one place.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from lrcheck.checks.status import CheckResult, Status
from lrcheck.environment import Environment
from lrcheck.errors import SpecError
from lrcheck.plan.judging import Judging
from lrcheck.result import Kind, Report
from lrcheck.spec import CommandPair, FilePair, Note, PairSpec, RunSpec, Tolerances
from lrcheck.suite.baseline import BaselineRecord, regressions
from lrcheck.suite.outcome import ERROR, INCOMPLETE, NOT_RUN, PairOutcome, SuiteResult
from lrcheck.suite.spec import Suite, SuiteEntry
from lrcheck.trace import RunTrace

LOST_EXIT = 3  # as a crashed run: the shard's job died, or its folder was not handed over


@dataclass(frozen=True)
class ShardRun:
    """One shard's folder and its ``suite.json``."""

    folder: Path
    data: dict[str, Any]

    @property
    def shard(self) -> dict[str, Any]:
        shard: dict[str, Any] = self.data["shard"]
        return shard

    @property
    def label(self) -> str:
        return f"{self.shard['index']}/{self.shard['count']}"


def read_shard(folder: Path) -> ShardRun:
    """The shard in ``folder``; bad input when it has no suite.json of a shard."""
    where = f"shard folder {str(folder)!r}"
    try:
        data = json.loads((folder / "suite.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{where} has no suite.json; give the --out folder of "
                        "'lrcheck suite FILE --shard k/n'") from None
    except (OSError, ValueError) as exc:
        raise SpecError(f"{where}: suite.json cannot be read: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != "lrcheck-suite":
        raise SpecError(f"{where}: suite.json is not an lrcheck suite's")
    if not isinstance(data.get("shard"), dict):
        raise SpecError(f"{where} holds a whole suite, not a shard: only the shards of "
                        "'lrcheck suite FILE --shard k/n' are merged")
    return ShardRun(folder, data)


def check_shards(shards: list[ShardRun]) -> None:
    """Refuse shards of different suites (or splits) and a pair that two shards have."""
    if not shards:
        raise SpecError("suite merge: give at least one shard folder")
    first = shards[0]
    for other in shards[1:]:
        a, b = first.shard, other.shard
        if (a["suite_digest"], a["count"]) != (b["suite_digest"], b["count"]):
            raise SpecError(
                f"shards of different suites: {str(first.folder)!r} is shard {first.label} of "
                f"{first.data['suite']!r} (digest {a['suite_digest']}), {str(other.folder)!r} "
                f"is shard {other.label} of {other.data['suite']!r} (digest "
                f"{b['suite_digest']}); merge the shards of one run of one suite")
    seen: dict[str, ShardRun] = {}
    for run in shards:
        for pair in run.data["pairs"]:
            if pair["name"] in seen:
                raise SpecError(
                    f"pair {pair['name']!r} is present twice: in {str(seen[pair['name']].folder)!r}"
                    f" (shard {seen[pair['name']].label}) and in {str(run.folder)!r} (shard "
                    f"{run.label}); give each shard's folder once")
            seen[pair["name"]] = run


def merge_shards(shards: list[ShardRun], *,
                 baseline: dict[str, BaselineRecord] | None = None,
                 baseline_path: str | None = None) -> SuiteResult:
    """One result of the suite the ``shards`` (``check_shards`` first) are parts of, in the
    suite file's order, compared with ``baseline`` when given."""
    check_shards(shards)
    first = shards[0]
    entries = [_entry(p) for p in first.shard["plan"]]
    shard_of = {p["name"]: p["shard"] for p in first.shard["plan"]}
    found = {pair["name"]: (run, pair) for run in shards for pair in run.data["pairs"]}
    outcomes = []
    for entry in entries:
        if entry.name in found:
            outcomes.append(_outcome(entry, *found[entry.name]))
        else:
            outcomes.append(PairOutcome(
                entry, error=f"missing: its shard, {shard_of[entry.name]}/"
                             f"{first.shard['count']}, was not merged", error_code=LOST_EXIT))
        if baseline is not None and outcomes[-1].report is not None:
            rec = baseline.get(entry.name)
            outcomes[-1].baseline = "new" if rec is None else "compared"
            outcomes[-1].regressions = regressions(outcomes[-1].report, rec) if rec else []
    stopped = [f"shard {run.label}: {run.data['interrupted']}" for run in shards
               if run.data.get("interrupted")]
    names = {e.name for e in entries}
    return SuiteResult(
        Suite(first.data["suite"], tuple(entries)), outcomes,
        seconds=max(float(run.data.get("seconds", 0.0)) for run in shards),
        baseline_path=baseline_path, baseline_missing=sorted(set(baseline or {}) - names),
        environment=_environment(first, entries),
        interrupted="; ".join(stopped) or None,
        merged={run.label: str(run.folder) for run in sorted(
            shards, key=lambda r: int(r.shard["index"]))},
        missing=[e.name for e in entries if e.name not in found])


def _entry(plan: dict[str, Any]) -> SuiteEntry:
    pair = plan["pair"]
    if pair.get("kind") == "commands":
        return SuiteEntry(plan["name"], CommandPair.from_dict(pair), plan["expect"],
                          plan["origin"])
    return SuiteEntry(plan["name"], PairSpec(_spec(pair["reference"]), _spec(pair["candidate"]),
                                             Tolerances(**pair["tolerances"]),
                                             noise_floor=bool(plan["noise_floor"]),
                                             notes=tuple(Note.from_dict(n) for n in
                                                         plan.get("notes", []))),
                      plan["expect"], plan["origin"])


def _spec(data: dict[str, Any]) -> RunSpec:
    return RunSpec(**{**data, "inject_overflow": tuple(data["inject_overflow"])})


def _outcome(entry: SuiteEntry, run: ShardRun, pair: dict[str, Any]) -> PairOutcome:
    """The pair as its shard recorded it, its report read back from its folder."""
    outcome = PairOutcome(entry, shared_reference=bool(pair["shared_reference"]),
                          seconds=float(pair["seconds"]))
    status, folder = pair["status"], pair["folder"]
    code = int(run.shard.get("exit_codes", {}).get(entry.name, LOST_EXIT))
    if status == NOT_RUN:
        outcome.not_run = True
    elif status == INCOMPLETE:
        outcome.interrupted, outcome.partial_saved = pair["reason"], folder is not None
    elif status == ERROR:
        outcome.error, outcome.error_code = pair["error"], code
    else:
        try:
            outcome.report = read_report(run.folder / folder / "result.json",
                                         _report_pair(entry.pair, run.folder / folder))
            outcome.pngs = _pngs(run.folder / folder)
        except SpecError as exc:
            outcome.error, outcome.error_code = str(exc), LOST_EXIT
    return outcome


def _pngs(folder: Path) -> tuple[str, ...]:
    """The PNGs a pair's report drew in ``folder``: those its result.json lists (``files``,
    ``reports.files.FILES_KEY``) that are there."""
    try:
        listed = json.loads((folder / "result.json").read_text(encoding="utf-8")).get("files")
    except (OSError, ValueError, AttributeError):
        return ()
    return tuple(name for name in listed or () if isinstance(name, str)
                 and name.endswith(".png") and (folder / name).is_file())


def _environment(first: ShardRun, entries: list[SuiteEntry]) -> Environment | None:
    """The merged suite's environment: the first shard's (none where it recorded none), with
    the world size of the whole suite."""
    data = first.data.get("environment") or {}
    if not data:
        return None
    try:
        recorded = Environment.from_dict(data)
    except ValueError as exc:
        raise SpecError(f"{str(first.folder)!r}: suite.json's {exc}") from None
    return replace(recorded, world_size=max((e.pair.candidate.world for e in entries
                                             if isinstance(e.pair, PairSpec)), default=1))


def _report_pair(pair: PairSpec | CommandPair, folder: Path) -> PairSpec | FilePair:
    """What the pair's report holds as its pair: a pair of commands' is the diff of the two
    record folders in ``folder``, as ``lrcheck run`` wrote it."""
    if isinstance(pair, PairSpec):
        return pair
    return FilePair(str(folder / "reference"), str(folder / "candidate"), pair.tolerances)


def read_report(path: Path, pair: PairSpec | FilePair) -> Report:
    """The report of ``pair`` saved at ``path`` (result.json), its parameters left out."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        runs = {role: RunTrace.from_dict(data["runs"][role], np.empty((0, 0)))
                for role in ("reference", "candidate")}
        checks = [CheckResult(c["name"], Status(c["status"]), c["max_abs_diff"],
                              c["first_divergence"], c["detail"], c.get("max_rel_diff"))
                  for c in data["checks"]]
        environment = Environment.from_dict(data["environment"])
        judging = Judging(data["judging"]) if "judging" in data else None
    except FileNotFoundError:
        raise SpecError(f"its report {str(path)!r} is missing from the shard's folder") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SpecError(f"its report {str(path)!r} cannot be read: {exc!r}") from None
    kind = Kind.COMPARE if isinstance(pair, PairSpec) else Kind.DIFF
    return Report(pair, runs["reference"], runs["candidate"], checks, environment, kind, judging)
