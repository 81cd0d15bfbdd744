"""The outcome of a comparison: the pair, both traces, the checks and where it ran.

``Report.to_dict()`` is ``result.json`` (schema_version 1, DESIGN.md): keep its keys stable and
add beside them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lrcheck.checks import PASS, CheckResult, verdict
from lrcheck.spec import PairSpec
from lrcheck.trace import RunTrace

SCHEMA_VERSION = 1


@dataclass
class Report:
    pair: PairSpec
    reference: RunTrace
    candidate: RunTrace
    checks: list[CheckResult]
    environment: dict[str, Any]
    # "compare": both runs trained; "trace": schedules stepped without a model (lrcheck trace).
    mode: str = "compare"

    @property
    def verdict(self) -> str:
        return verdict(self.checks)

    @property
    def ok(self) -> bool:
        return self.verdict == PASS

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    @property
    def subject(self) -> str:
        """What was run: the task, or for a trace the schedule alone."""
        if self.mode == "trace":
            return f"schedule only, {self.pair.candidate.samples:,} samples per epoch"
        return f"task {self.pair.candidate.task}"

    def check(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "verdict": self.verdict,
            "mode": self.mode,
            "pair": {"name": self.pair.name, **self.pair.to_dict()},
            "checks": [c.to_dict() for c in self.checks],
            "runs": {"reference": self.reference.to_dict(),
                     "candidate": self.candidate.to_dict()},
            "environment": self.environment,
        }

    def save(self, out: str | Path) -> Path:
        """Write result.json, report.md and the plots into ``out``; returns the folder."""
        from lrcheck.reports.files import write_report

        return write_report(self, Path(out))
