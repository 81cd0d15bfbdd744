"""lrcheck: prove (or disprove) that gradient accumulation and several processes train exactly
like one process with the same effective batch.

The public API; importing it does not import torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from lrcheck.errors import Interrupted, LrcheckError, RunError, SpecError
from lrcheck.plan.steps import ScheduleContext
from lrcheck.recorder import Recorder
from lrcheck.spec import (
    CompareOptions,
    PairSpec,
    RunOptions,
    RunSpec,
    ToleranceOverrides,
    Tolerances,
)
from lrcheck.version import __version__

if TYPE_CHECKING:  # exported lazily: __getattr__
    from lrcheck.api import compare, diff, save_report, trace_schedule
    from lrcheck.result import Report

__all__ = ["compare", "trace_schedule", "diff", "save_report", "Recorder", "PairSpec", "RunSpec",
           "RunOptions", "CompareOptions", "Tolerances", "ToleranceOverrides", "Report",
           "ScheduleContext", "LrcheckError", "SpecError", "RunError", "Interrupted",
           "__version__"]

# The names exported lazily, by the module that holds them: importing lrcheck.api is cheap, but
# not free, and lrcheck.result imports numpy; neither is needed by a process that only records.
_LAZY = {"compare": "lrcheck.api", "trace_schedule": "lrcheck.api", "diff": "lrcheck.api",
         "save_report": "lrcheck.api", "Report": "lrcheck.result"}


def __getattr__(name: str) -> object:
    """``lrcheck.compare`` and the others of ``_LAZY``: the object itself, from the module that
    holds it, imported on first use (looked up there each time, as a test that replaces it
    there expects)."""
    if name not in _LAZY:
        raise AttributeError(f"module 'lrcheck' has no attribute {name!r}")
    value: object = getattr(importlib.import_module(_LAZY[name]), name)
    return value
