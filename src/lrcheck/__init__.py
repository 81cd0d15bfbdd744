"""lrcheck: prove (or disprove) that gradient accumulation and several processes train exactly
like one process with the same effective batch.

The public API; importing it does not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrcheck.errors import Interrupted, LrcheckError, RunError, SpecError
from lrcheck.plan.steps import ScheduleContext
from lrcheck.recorder import Recorder
from lrcheck.spec import PairSpec, RunOptions, RunSpec, Tolerances
from lrcheck.version import __version__

if TYPE_CHECKING:
    from lrcheck.result import Report

__all__ = ["compare", "trace_schedule", "diff", "save_report", "Recorder", "PairSpec", "RunSpec",
           "RunOptions", "Tolerances", "Report", "ScheduleContext", "LrcheckError", "SpecError",
           "RunError", "Interrupted", "__version__"]


if TYPE_CHECKING:  # their own signatures, to a type checker and an editor
    from lrcheck.api import compare, diff, save_report, trace_schedule
else:  # lazily, so that importing lrcheck does not import torch
    def compare(*args, **kwargs):
        """See ``lrcheck.api.compare``."""
        from lrcheck.api import compare as _compare

        return _compare(*args, **kwargs)

    def trace_schedule(*args, **kwargs):
        """See ``lrcheck.api.trace_schedule``."""
        from lrcheck.api import trace_schedule as _trace_schedule

        return _trace_schedule(*args, **kwargs)

    def diff(*args, **kwargs):
        """See ``lrcheck.api.diff``."""
        from lrcheck.api import diff as _diff

        return _diff(*args, **kwargs)

    def save_report(*args, **kwargs):
        """See ``lrcheck.api.save_report``."""
        from lrcheck.api import save_report as _save_report

        return _save_report(*args, **kwargs)


def __getattr__(name: str) -> object:
    if name == "Report":
        from lrcheck.result import Report

        return Report
    raise AttributeError(f"module 'lrcheck' has no attribute {name!r}")
