"""What a suite found: per pair, its report (or why it has none), whether it met its expectation,
and its regressions against a baseline; for the suite, the exit code.

``SuiteResult.to_dict()`` is ``suite.json`` (schema_version 1): keep its keys stable and add
beside them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lrcheck.checks import FAIL
from lrcheck.environment import Environment
from lrcheck.result import Report, Verdict
from lrcheck.suite.shard import ShardInfo
from lrcheck.suite.spec import Suite, SuiteEntry
from lrcheck.trace import METRICS, metric_values
from lrcheck.words import Word

SCHEMA_VERSION = 1


class PairStatus(Word):
    """What became of a pair of a suite: ``ok`` (it met its expectation, no regression),
    ``unexpected``, ``regression``, ``error`` (no report); after Ctrl-C, ``incomplete`` (the
    pair that was running, its partial result.json saved) and ``not_run`` (those after it)."""

    OK = "ok"
    UNEXPECTED = "unexpected"
    REGRESSION = "regression"
    ERROR = "error"
    INCOMPLETE = "incomplete"
    NOT_RUN = "not_run"


OK, UNEXPECTED, REGRESSION, ERROR = (PairStatus.OK, PairStatus.UNEXPECTED,
                                     PairStatus.REGRESSION, PairStatus.ERROR)
INCOMPLETE, NOT_RUN = PairStatus.INCOMPLETE, PairStatus.NOT_RUN
STATUSES = tuple(PairStatus)
INTERRUPTED_EXIT = 130


@dataclass(frozen=True)
class Regression:
    """A change against the baseline: ``what`` is ``lr`` (an LR trace changed), ``accuracy`` or
    ``f1_macro`` (dropped)."""

    what: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "detail": self.detail}


@dataclass
class PairOutcome:
    """One pair of a suite after it ran. ``baseline`` is ``compared``, ``new`` (not in the
    baseline) or ``none`` (no baseline given). ``interrupted`` says why Ctrl-C stopped the pair;
    ``not_run``: the suite was interrupted before it; ``partial_saved``: what the interrupted
    pair had recorded is saved in its folder (``result.json``, verdict ``incomplete``)."""

    entry: SuiteEntry
    report: Report | None = None
    error: str | None = None
    error_code: int = 0
    interrupted: str | None = None
    stopped_by: str = "interrupted (Ctrl-C)"  # with interrupted: Ctrl-C, or SIGTERM/SIGHUP
    not_run: bool = False
    partial_saved: bool = False
    regressions: list[Regression] = field(default_factory=list)
    baseline: str = "none"
    shared_reference: bool = False
    seconds: float = 0.0
    # The PNGs drawn into its folder (``lrcheck suite --plots``); None: every plot of its kind.
    pngs: tuple[str, ...] | None = None

    @property
    def verdict(self) -> Verdict | PairStatus:
        """The report's verdict, or ``incomplete``, ``not_run`` or ``error``."""
        if self.report is not None:
            return self.report.verdict
        return self.status

    @property
    def met(self) -> bool:
        return self.report is not None and self.verdict == self.entry.expect

    @property
    def status(self) -> PairStatus:
        """``ok``; ``not_run`` or ``incomplete`` after Ctrl-C; else the worst of ``error``,
        ``unexpected`` and ``regression``."""
        if self.not_run:
            return NOT_RUN
        if self.interrupted is not None:
            return INCOMPLETE
        if self.report is None:
            return ERROR
        if not self.met:
            return UNEXPECTED
        return REGRESSION if self.regressions else OK

    @property
    def exit_code(self) -> int:
        if self.not_run or self.interrupted is not None:
            return INTERRUPTED_EXIT
        if self.report is None:
            return self.error_code
        return 0 if self.met and not self.regressions else 1

    @property
    def folder(self) -> str | None:
        """The pair's report folder, relative to the suite's, when something is saved there."""
        return self.entry.name if self.report is not None or self.partial_saved else None

    @property
    def failed_checks(self) -> list[str]:
        return [c.name for c in self.report.checks if c.status == FAIL] if self.report else []

    @property
    def reason(self) -> str:
        """One line: why the pair is what its status says."""
        if self.not_run:
            return "not run: interrupted"
        if self.interrupted is not None:
            return self.interrupted
        if self.report is None:
            return f"no result: {self.error}"
        parts = []
        if self.met and not self.regressions:
            parts.append("passed as expected" if self.verdict == Verdict.PASS else
                         f"failed as expected ({', '.join(self.failed_checks)})")
        elif not self.met and self.entry.expect == FAIL:
            parts.append("expected fail but passed: every check passed, so this known-bad "
                         "configuration is no longer detected")
        elif not self.met:
            first = next(c for c in self.report.checks if c.status == FAIL)
            parts.append(f"expected pass but failed ({', '.join(self.failed_checks)}): "
                         f"{first.name}: {first.detail}")
        if self.regressions:
            parts.append("regression against the baseline: " +
                         "; ".join(r.detail for r in self.regressions))
        return "; ".join(parts)

    def deltas(self) -> dict[str, float | None]:
        """max |ΔLR| of the ``lr`` check, and candidate − reference accuracy and macro-F1."""
        if self.report is None:
            return {"max_abs_dlr": None, "accuracy": None, "f1_macro": None}
        ref, cand = (metric_values(self.report.reference.metrics),
                     metric_values(self.report.candidate.metrics))
        diff = {k: cand[k] - ref[k] if k in ref and k in cand else None for k, _ in METRICS}
        return {"max_abs_dlr": self.report.check("lr").max_abs_diff, **diff}

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.entry.name,
            "origin": self.entry.origin,
            "expect": self.entry.expect,
            "verdict": self.verdict.value,
            "status": self.status.value,
            "met": self.met,
            "reason": self.reason,
            "folder": self.folder,
            "checks": [c.to_dict() for c in self.report.checks] if self.report else [],
            "deltas": self.deltas(),
            "metrics": (self.report.candidate.metrics.to_dict()
                        if self.report and self.report.candidate.metrics else None),
            "baseline": self.baseline,
            "regressions": [r.to_dict() for r in self.regressions],
            "error": self.error,
            "shared_reference": self.shared_reference,
            "seconds": round(self.seconds, 3),
            "pair": self.entry.pair.to_dict(),
        }


@dataclass
class SuiteResult:
    suite: Suite
    outcomes: list[PairOutcome]
    seconds: float = 0.0
    baseline_path: str | None = None
    # Pairs of the baseline that this suite does not have (renamed or removed).
    baseline_missing: list[str] = field(default_factory=list)
    environment: Environment | None = None
    # Why the suite stopped early ("interrupted (Ctrl-C) during pair 2 of 3 ('b')"), or None.
    interrupted: str | None = None
    # Which shard of which suite this is (``--shard k/n``), or None for a whole suite.
    shard: ShardInfo | None = None
    # A merge of shards: the shards merged ("2/3" → its folder) and the pairs no shard had.
    merged: dict[str, str] | None = None
    missing: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every pair of the suite ran to its end: not interrupted, none missing from a merge."""
        return self.interrupted is None and not self.missing

    @property
    def exit_code(self) -> int:
        """0 every pair met its expectation without regressions; 1 one did not; 2 bad input in
        a pair; 3 a run crashed (the highest wins); 130 interrupted."""
        if self.interrupted is not None:
            return INTERRUPTED_EXIT
        return max((o.exit_code for o in self.outcomes), default=0)

    @property
    def verdict(self) -> Verdict:
        if self.interrupted is not None:
            return Verdict.INCOMPLETE
        return Verdict.PASS if self.exit_code == 0 else Verdict.FAIL

    def environment_dict(self) -> dict[str, object]:
        return {} if self.environment is None else self.environment.to_dict()

    def counts(self) -> dict[str, int]:
        statuses = [o.status for o in self.outcomes]
        return {"pairs": len(statuses), **{s.value: statuses.count(s) for s in STATUSES}}

    def to_dict(self) -> dict[str, object]:
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "lrcheck-suite",
            "suite": self.suite.path,
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "interrupted": self.interrupted,
            "counts": self.counts(),
            "baseline": self.baseline_path,
            "baseline_missing": self.baseline_missing,
            "pairs": [o.to_dict() for o in self.outcomes],
            "environment": self.environment_dict(),
            "seconds": round(self.seconds, 3),
            **({"shard": {**self.shard.to_dict(), "exit_codes": {
                o.entry.name: o.exit_code for o in self.outcomes}}} if self.shard else {}),
            **({"merge": {"shards": self.merged, "missing": self.missing}}
               if self.merged is not None else {}),
        }
