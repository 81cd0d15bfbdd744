"""A suite split into reference groups, and the groups split into shards, before anything trains.

A *reference group* is the pairs of a suite that share a reference (the same frozen ``RunSpec``),
which is trained once: a group is never split across ``--shard`` machines (``--jobs`` workers on
one machine hand the trained reference on: ``suite.queue``). A group is named by the hash of its
reference's spec, which does not depend on where its pairs stand in the file.

``split(suite, n)`` gives every group a shard: groups in decreasing ``cost`` (ties by hash), each
to the shard with the least cost so far (ties: the shard the group's hash points to, then the
next ones). The split depends only on the suite's pairs, not on their order in the file nor the
machine; a shard's cost is at most the ideal (total / n) plus the costliest group. Adding a pair
changes only the places of the groups cheaper than its group.

Pure: imports no torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass

from lrcheck.errors import SpecError
from lrcheck.plan.judging import Judging
from lrcheck.spec import CommandPair, PairSpec, RunSpec
from lrcheck.spec.run import samples_per_epoch
from lrcheck.suite.spec import Suite, SuiteEntry

SHARD_ENV = "LRCHECK_SHARD"
# What starting the processes of a multi-process run costs, in the micro-batch steps of
# ``run_cost`` (torchrun, the process group, torch imported in every rank: about 3 s on CPU,
# where a digits micro-batch step is about 1 ms).
LAUNCH_COST = 3000.0
# A pair of a user's own commands: its cost cannot be computed before it runs; two launches.
COMMAND_COST = 2 * LAUNCH_COST
_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Group:
    """The pairs (indices into the suite's entries, in file order) that share ``reference``."""

    key: str
    reference: RunSpec | CommandPair
    indices: tuple[int, ...]
    cost: float
    cores: int


@dataclass(frozen=True)
class ShardInfo:
    """Which shard of which suite a run is: shard ``index`` (1-based) of ``count``; ``suite``: the
    digest of the whole suite's pairs (``suite_digest``); ``entries`` and ``plan``: every pair of
    the suite and the shard it belongs to, so that a merge knows what a lost shard held."""

    index: int
    count: int
    suite: str
    entries: tuple[SuiteEntry, ...]
    plan: tuple[int, ...]

    def to_dict(self) -> dict[str, object]:
        return {"index": self.index, "count": self.count, "suite_digest": self.suite,
                "plan": [{"name": e.name, "shard": shard, "origin": e.origin,
                          "expect": e.expect, "noise_floor": e.pair.noise_floor,
                          "pair": e.pair.to_dict(),
                          "notes": [n.to_dict() for n in getattr(e.pair, "notes", ())]}
                         for e, shard in zip(self.entries, self.plan, strict=True)]}

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def spec_key(spec: RunSpec) -> str:
    """A short hash of ``spec`` that is the same on every machine and every run."""
    text = json.dumps(spec.to_dict(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def suite_digest(suite: Suite) -> str:
    """The hash of every pair of ``suite`` (name, settings, expectation), in no order: two runs
    of the same suite file have the same digest wherever they run."""
    pairs = sorted(json.dumps({"name": e.name, "pair": e.pair.to_dict(), "expect": e.expect,
                               "noise_floor": e.pair.noise_floor}, sort_keys=True)
                   for e in suite.entries)
    return hashlib.sha256("\n".join(pairs).encode()).hexdigest()[:16]


def run_cost(spec: RunSpec) -> float:
    """What training ``spec`` costs, in micro-batch steps of one process: each rank's
    micro-batches of every epoch, plus starting the processes of a multi-process run. lrcheck's
    models are tiny, so a step costs about the same whatever its batch size."""
    steps = spec.epochs * -(-samples_per_epoch(spec) // (spec.bs * spec.world))
    return steps + (LAUNCH_COST if spec.world > 1 else 0.0)


def entry_cost(entry: SuiteEntry) -> float:
    """The candidate's run, and the noise-floor twin of the reference where the pair is judged
    against one (``plan.judging.judging_mode``; it may not be needed, and is counted)."""
    pair = entry.pair
    if not isinstance(pair, PairSpec):
        return COMMAND_COST  # what a user's commands cost is not known before they run
    twin = pair.judging is Judging.TWIN
    return run_cost(pair.candidate) + (run_cost(pair.reference) if twin else 0.0)


def groups(suite: Suite) -> list[Group]:
    """The suite's reference groups, in the order of their first pair in the file. A group's
    ``cores`` are the most processes one of its runs uses at once."""
    found: dict[RunSpec | CommandPair, list[int]] = {}
    for index, entry in enumerate(suite.entries):
        pair = entry.pair
        found.setdefault(pair.reference if isinstance(pair, PairSpec) else pair,
                         []).append(index)
    return [_group(suite, ref, indices) for ref, indices in found.items()]


def _group(suite: Suite, ref: RunSpec | CommandPair, indices: list[int]) -> Group:
    """The group of the pairs at ``indices`` that share the reference ``ref``; a pair of
    commands is a group of its own, on one core (a command that launches several processes
    is not seen before it runs)."""
    if isinstance(ref, CommandPair):
        digest = hashlib.sha256(json.dumps(ref.to_dict(), sort_keys=True).encode())
        return Group(digest.hexdigest()[:16], ref, tuple(indices), COMMAND_COST, 1)
    worlds = [p.candidate.world for i in indices
              if isinstance(p := suite.entries[i].pair, PairSpec)]
    return Group(spec_key(ref), ref, tuple(indices),
                 run_cost(ref) + sum(entry_cost(suite.entries[i]) for i in indices),
                 max([ref.world, *worlds]))


def split(suite: Suite, count: int) -> list[list[Group]]:
    """The groups of each of ``count`` shards (see the module's docstring); a shard may be empty
    when there are fewer groups than shards."""
    if count < 1:
        raise SpecError(f"--shard: the number of shards must be >= 1, got {count}")
    shards: list[list[Group]] = [[] for _ in range(count)]
    loads = [0.0] * count
    for group in sorted(groups(suite), key=lambda g: (-g.cost, g.key)):
        start = int(group.key, 16) % count
        order = [(start + i) % count for i in range(count)]
        chosen = min(order, key=lambda s: loads[s])  # the first of the least loaded, from start
        shards[chosen].append(group)
        loads[chosen] += group.cost
    return shards


def parse_shard(text: str, where: str = "--shard") -> tuple[int, int]:
    """``"2/3"`` → ``(2, 3)``: shard 2 of 3, 1-based as Playwright and Jest count."""
    match = _SHARD.fullmatch(text)
    if not match:
        raise SpecError(f"{where} {text!r}: expected k/n, such as 1/3 (shard k of n, from 1)")
    index, count = int(match[1]), int(match[2])
    if not 1 <= index <= count:
        raise SpecError(f"{where} {text!r}: k must be between 1 and n ({count}), got {index}")
    return index, count


def shard_from(option: str | None) -> tuple[int, int] | None:
    """``--shard`` when given, else ``$LRCHECK_SHARD`` when set (a CI matrix), else None."""
    if option is not None:
        return parse_shard(option)
    env = os.environ.get(SHARD_ENV, "").strip()
    return parse_shard(env, f"${SHARD_ENV}") if env else None


def shard_of(suite: Suite, index: int, count: int) -> tuple[Suite, ShardInfo]:
    """The pairs of shard ``index`` of ``count`` as a suite of their own (in file order), and
    what the shard's report records of it."""
    plan = [0] * len(suite.entries)
    for number, shard in enumerate(split(suite, count), 1):
        for i in (i for g in shard for i in g.indices):
            plan[i] = number
    mine = tuple(e for e, shard in zip(suite.entries, plan, strict=True) if shard == index)
    info = ShardInfo(index, count, suite_digest(suite), suite.entries, tuple(plan))
    return Suite(suite.path, mine), info


def plan_lines(suite: Suite, shard: tuple[int, int] | None) -> list[str]:
    """``--list``: a line per shard (one, without ``shard``) with its cost, then a line per
    reference group: its hash, cost, processes and pairs; the chosen shard marked."""
    count = 1 if shard is None else shard[1]
    total = sum(g.cost for g in groups(suite))
    lines = [f"{suite.path}: {len(suite.entries)} pairs in {len(groups(suite))} reference "
             f"groups, cost {total:.0f} (micro-batch steps)"]
    for number, part in enumerate(split(suite, count), 1):
        pairs = sum(len(g.indices) for g in part)
        mark = " ← this shard" if shard is not None and number == shard[0] else ""
        if shard is not None:
            lines.append(f"shard {number}/{count}: {pairs} pairs, {len(part)} groups, cost "
                         f"{sum(g.cost for g in part):.0f}{mark}")
        for group in sorted(part, key=lambda g: g.indices[0]):
            names = ", ".join(suite.entries[i].name for i in group.indices)
            lines.append(f"  group {group.key}: cost {group.cost:.0f}, {group.cores} "
                         f"process{'es' * (group.cores > 1)}: {names}")
    return lines
