"""The two sides of a lockstep pair (``lrcheck run``) and their settings, read by every
process of each command (``record.process``, ``record.lockstep``) and set by
``record.together``: names only, importing nothing."""

from __future__ import annotations

from pathlib import Path

# The exchange folder both commands share, and this command's side in it. PYTHON* names, as
# the recording's other settings (record/startup.py).
# The record folder of a recorded process (``lrcheck record --out DIR``; record.startup).
ENV_DIR = "PYTHON_LRCHECK_RECORD_DIR"
ENV_EXCHANGE = "PYTHON_LRCHECK_LOCKSTEP_DIR"
ENV_ROLE = "PYTHON_LRCHECK_LOCKSTEP_ROLE"
REFERENCE, CANDIDATE = "reference", "candidate"
# A folder on the report's disk where the reference may put the exchange's states when they do
# not fit in the exchange folder (``record.lockstep.place``), and how long one side waits for the
# other at one update (seconds; ``record.lockstep.WAIT_S`` unless set).
ENV_SPARE = "PYTHON_LRCHECK_LOCKSTEP_SPARE"
ENV_WAIT = "PYTHON_LRCHECK_LOCKSTEP_WAIT"
# A twin of the reference (``lrcheck run`` free-running): its parameters are nudged by one unit
# in the last place just before its first optimizer step.
ENV_NUDGE = "PYTHON_LRCHECK_RECORD_NUDGE"
# Set for the resume command of ``lrcheck run --interrupt-at`` (``record.interrupt``): its
# processes are later processes of their ranks, which run free, whatever their file names.
ENV_RESUMED = "PYTHON_LRCHECK_RESUMED"
# Set for the reference of an interrupted pair: it fingerprints every update, since its
# candidate's resumed process runs free from a restore point nobody knows in advance.
ENV_DENSE = "PYTHON_LRCHECK_DENSE"


def ended(exchange: Path, side: str) -> Path:
    """The marker that says ``side`` of a lockstep pair has ended: it releases the other's
    waits."""
    return exchange / f"{side}.ended"
