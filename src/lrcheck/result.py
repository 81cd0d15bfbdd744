"""The outcome of a comparison: the pair, both traces, the checks and where it ran.

``Report.to_dict()`` is ``result.json`` (docs/design.md, "result.json (schema_version 1)"): keep
its keys stable and add beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lrcheck.checks import CheckResult, verdict
from lrcheck.environment import Environment
from lrcheck.plan.judging import Judging
from lrcheck.spec import FilePair, Note, PairSpec, RunSpec
from lrcheck.trace import RecordedCommand, RunTrace
from lrcheck.words import Word

if TYPE_CHECKING:
    from lrcheck.logs.truth import LogFinding

SCHEMA_VERSION = 1


class Verdict(Word):
    """result.json's ``verdict``: ``fail`` if any check failed, else ``pass``; ``incomplete``
    for what an interrupted comparison had recorded."""

    PASS = "pass"
    FAIL = "fail"
    INCOMPLETE = "incomplete"


INCOMPLETE = Verdict.INCOMPLETE


class Kind(Word):
    """What a report compares, and so how it is shown (``reports.kinds.KINDS``): two trained
    runs, two schedules stepped without a model, or two Recorder files; result.json's
    ``mode``."""

    COMPARE = "compare"
    TRACE = "trace"
    DIFF = "diff"


@dataclass
class Report:
    pair: PairSpec | FilePair
    reference: RunTrace
    candidate: RunTrace
    checks: list[CheckResult]
    environment: Environment
    # A diff report's ``pair`` is a ``FilePair``.
    kind: Kind = Kind.COMPARE
    # How the effects were judged (``plan.judging.judging_mode``): result.json's ``judging``, for
    # the pairs lrcheck trains (None: a schedule's trace, or a diff of records).
    judging: Judging | None = None
    # What each run's own logs hold against its recording (``logs.truth``): a section of its
    # own, which the verdict does not read.
    logs: list[LogFinding] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        return Verdict(verdict(self.checks))

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.PASS

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def specs(self) -> tuple[RunSpec, RunSpec]:
        """The reference's and the candidate's ``RunSpec``: a report of two runs lrcheck ran
        (not a diff's, whose runs are files)."""
        if not isinstance(self.pair, PairSpec):
            raise TypeError(f"a {self.kind} report has no RunSpecs: {self.pair!r}")
        return self.pair.reference, self.pair.candidate

    def commands(self) -> tuple[RecordedCommand, RecordedCommand] | None:
        """The reference's and the candidate's command, where both runs were read from record
        folders (``lrcheck run``, or ``lrcheck diff`` of two folders)."""
        ref, cand = self.reference.command, self.candidate.command
        return None if ref is None or cand is None else (ref, cand)

    @property
    def notes(self) -> tuple[Note, ...]:
        """What a run was given and trains with otherwise (``spec.resolve``): the pair's."""
        return self.pair.notes if isinstance(self.pair, PairSpec) else ()

    def check(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, object]:
        return {**_result(self.verdict, self.pair, self.checks,
                          self.reference, self.candidate, self.environment),
                "mode": self.kind.value, **_judging(self.judging),
                **({"logs": [f.to_dict() for f in self.logs]} if self.logs else {})}


@dataclass
class IncompleteResult:
    """What an interrupted comparison had recorded: each run's updates so far (a finished run's
    whole trace), no checks, verdict ``incomplete``. ``to_dict`` keeps the keys of result.json
    (``mode`` among them) and adds ``incomplete``, the reason."""

    pair: PairSpec | FilePair
    reference: RunTrace
    candidate: RunTrace
    # None where it stopped before where it runs was known (a torchrun job's start-up).
    environment: Environment | None
    reason: str
    judging: Judging | None = None
    # What was being compared: a pair's training, or its schedules stepped without a model.
    kind: Kind = Kind.COMPARE

    verdict = INCOMPLETE
    exit_code = 130

    def to_dict(self) -> dict[str, object]:
        return {**_result(self.verdict, self.pair, [], self.reference, self.candidate,
                          self.environment),
                "mode": self.kind.value, **_judging(self.judging), "incomplete": self.reason}


def _judging(judging: Judging | None) -> dict[str, str]:
    return {} if judging is None else {"judging": judging.value}


def _result(verdict: Verdict, pair: PairSpec | FilePair, checks: list[CheckResult],
            reference: RunTrace, candidate: RunTrace, environment: Environment | None
            ) -> dict[str, object]:
    # A long simulated schedule is thinned in JSON: it keeps the updates where the runs part.
    pinned = [c.first_divergence for c in checks if c.first_divergence is not None]
    return {
        "schema_version": SCHEMA_VERSION,
        "verdict": verdict.value,
        "pair": {"name": pair.name, **pair.to_dict()},
        "checks": [c.to_dict() for c in checks],
        "runs": {"reference": reference.to_dict(pinned), "candidate": candidate.to_dict(pinned)},
        "environment": {} if environment is None else environment.to_dict(),
        **_notes(pair),
    }


def _notes(pair: PairSpec | FilePair) -> dict[str, list[dict[str, str]]]:
    """result.json's ``notes`` for the pairs lrcheck trains: what a run was given and trains
    with otherwise (``spec.resolve``)."""
    return {"notes": [n.to_dict() for n in pair.notes]} if isinstance(pair, PairSpec) else {}
