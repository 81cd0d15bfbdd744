"""Which pair of a suite a ``--jobs`` worker runs next (``suite.parallel``): pure, imports no torch.

The unit of work is one pair. A reference that several pairs share (a reference group,
``shard.groups``) is trained once, by the pair a sequential ``run.run_pairs`` trains it with:
the group's first in the file, or, when that one ended without it (a crash, bad input), the
next. Until the reference is there, no other pair of the group starts, and that pair waits for
its cores. Its worker sends the trained reference (its ``RunTrace``, pickled) as soon as it has
it (a reference trained on rank 0 of a candidate's torchrun job: when the job ends), and the
group's other pairs then run in any worker, given the reference instead of training it. A
noise-floor twin one of them trains is passed on the same way (pairs already running train
their own, the same run). Nothing is sent for a group with no pair left to start.

Pairs start costliest first while their cores are free (a world-2 pair counts two, at most
``jobs``): each group's trainer before the other pairs, costliest group first, as it unblocks
the rest of its group; then the others by ``shard.entry_cost``. The suite keeps a group's
traces only until the group's last pair ends.
"""


from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lrcheck.spec import CommandPair, PairSpec, RunSpec
from lrcheck.suite.shard import entry_cost, groups
from lrcheck.suite.spec import Suite

# A group: its reference's spec, or the pair of commands that is a group of its own.
GroupKey = RunSpec | CommandPair


@dataclass
class PairQueue:
    """The pairs of ``suite`` not yet started, and the traces the running ones have sent."""

    suite: Suite
    jobs: int
    todo: list[int] = field(init=False)
    traces: dict[GroupKey, dict[RunSpec, bytes]] = field(init=False, default_factory=dict)
    training: set[GroupKey] = field(init=False, default_factory=set)  # reference on its way
    left: Counter[GroupKey] = field(init=False, default_factory=Counter)  # pairs not ended
    _group: dict[int, GroupKey] = field(init=False, default_factory=dict)
    _cores: dict[int, int] = field(init=False, default_factory=dict)
    _order: dict[int, tuple[int, float, int]] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        order = self._order
        for group in groups(self.suite):
            first, *rest = group.indices
            order[first] = (0, -group.cost, first)
            for index in rest:
                order[index] = (1, -entry_cost(self.suite.entries[index]), index)
            for index in group.indices:
                self._group[index] = group.reference
                self._cores[index] = min(self.jobs, _cores(self.suite.entries[index].pair))
            self.left[group.reference] = len(group.indices)
        self.todo = sorted(order, key=order.__getitem__)

    def cores(self, index: int) -> int:
        """The cores the pair at ``index`` counts for while it runs."""
        return self._cores[index]

    def take(self, free: int) -> int | None:
        """The next pair that can start on ``free`` cores (taken off the queue), or None: none
        fits, or the ones left wait for a reference."""
        for index in self.todo:
            key = self._group[index]
            if not self._ready(key, index) or self._cores[index] > free:
                continue
            self.todo.remove(index)
            if self._untrained(key):
                self.training.add(key)
            return index
        return None

    def put_back(self, index: int) -> None:
        """The pair at ``index``, taken, was not started after all (its worker had died): in
        line again, in its place, and its reference no longer on its way when it trains it."""
        if self._untrained(self._group[index]):  # then it was the pair to train it
            self.training.discard(self._group[index])
        self.todo = sorted([*self.todo, index], key=self._order.__getitem__)

    def given(self, index: int) -> dict[RunSpec, bytes]:
        """What the worker of the pair at ``index`` is given: its group's trained runs."""
        return dict(self.traces.get(self._group[index], {}))

    def shares(self, index: int) -> bool:
        """Whether what the pair at ``index`` trains is wanted: a pair of its group is still
        to start."""
        key = self._group[index]
        return any(self._group[i] == key for i in self.todo)

    def trained(self, index: int, spec: RunSpec, trace: bytes) -> None:
        """The worker of the pair at ``index`` has trained ``spec`` (its reference, or a twin)."""
        key = self._group[index]
        if self.left[key]:  # else the group has ended: nothing will want it
            self.traces.setdefault(key, {})[spec] = trace
        if spec == key:
            self.training.discard(key)

    def ended(self, index: int) -> None:
        """The pair at ``index`` has ended, whatever became of it."""
        key = self._group[index]
        self.training.discard(key)  # without its reference: the next pair tries
        self.left[key] -= 1
        if not self.left[key]:
            self.traces.pop(key, None)

    def _untrained(self, key: GroupKey) -> bool:
        return isinstance(key, RunSpec) and key not in self.traces.get(key, {})

    def _ready(self, key: GroupKey, index: int) -> bool:
        """A pair can start when its reference is trained, or when it is the group's pair that
        trains it: none of the group is training it and it is the group's first left in the
        file."""
        if not self._untrained(key):
            return True
        return key not in self.training and index == min(
            i for i in self.todo if self._group[i] == key)


def _cores(pair: PairSpec | CommandPair) -> int:
    """The processes a pair's runs use at once; a pair of commands counts one (a command that
    launches several processes is not seen before it runs)."""
    if isinstance(pair, CommandPair):
        return 1
    return max(pair.reference.world, pair.candidate.world)

