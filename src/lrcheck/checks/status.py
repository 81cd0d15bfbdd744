"""What a check found: its status, its result record, and the verdict over all checks."""

from __future__ import annotations

from dataclasses import dataclass

from lrcheck.words import Word


class Status(Word):
    """How a check ended (docs/design.md, "The checks and their tolerances"): its value is what
    result.json and the reports write."""

    PASS = "pass"
    FAIL = "fail"
    WARN = "warn"
    SKIP = "skip"


PASS, FAIL, WARN, SKIP = Status.PASS, Status.FAIL, Status.WARN, Status.SKIP
CHECK_NAMES = ("updates", "data", "weights", "lr", "params", "loss", "metrics")
# The smallest scale a relative gap is divided by: a gap of exact zeros stays 0, not NaN.
TINY = 1e-300


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    max_abs_diff: float | None
    first_divergence: int | None
    detail: str
    max_rel_diff: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "status": self.status.value, "max_abs_diff": self.max_abs_diff,
                "first_divergence": self.first_divergence, "detail": self.detail,
                "max_rel_diff": self.max_rel_diff}


def verdict(checks: list[CheckResult]) -> Status:
    """``fail`` if any check failed, else ``pass``."""
    return FAIL if any(c.status == FAIL for c in checks) else PASS


# How a warning begins where the effects could be judged only up to some update (a twin that
# decorrelated): what ``strictly`` turns into a failure.
JUDGED_UP_TO = "effects judged up to update"


def strictly(checks: list[CheckResult]) -> list[CheckResult]:
    """``checks`` with every warning that effects were judged only up to some update made a
    failure there (``lrcheck run --strict``)."""
    return [CheckResult(c.name, FAIL, c.max_abs_diff, c.first_divergence,
                        f"--strict: {c.detail}", c.max_rel_diff)
            if c.status == WARN and c.detail.startswith(JUDGED_UP_TO) else c for c in checks]
