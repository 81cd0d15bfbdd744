"""The memory a run's recording will need, against what the machine has left: a run that cannot
fit is bad input, refused before anything trains, rather than a crash seconds (or hours) in.

Pure standard library: the estimates themselves live beside what they estimate
(``recording.recording_bytes``, ``simulate.TRACE_BYTES_PER_UPDATE``).
"""

from __future__ import annotations

import os

from lrcheck.errors import SpecError

MEMINFO = "/proc/meminfo"
# cgroup v2: the limit of the container (or service) this process runs in, and what it uses.
CGROUP_FILES = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current")
UNITS = ("B", "kB", "MB", "GB", "TB", "PB", "EB")


def human_bytes(count: int) -> str:
    """``1693120000000`` → ``1.69 TB`` (decimal units, three significant digits)."""
    value, unit = float(count), 0
    while value >= 999.5 and unit < len(UNITS) - 1:
        value, unit = value / 1000, unit + 1
    return f"{value:.3g} {UNITS[unit]}"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read()
    except (OSError, ValueError):
        return None


def available_bytes() -> int | None:
    """Memory a new allocation can still get without swapping: the kernel's ``MemAvailable``
    (or free pages where there is no /proc/meminfo), lowered to what a cgroup v2 memory limit
    leaves; None when neither can be read."""
    available = None
    for line in (_read(MEMINFO) or "").splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    if available is None:
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError):
            pass
    limit, used = (_read(path) for path in CGROUP_FILES)
    if limit and used and limit.strip().isdigit() and used.strip().isdigit():
        left = max(0, int(limit) - int(used))
        available = left if available is None else min(available, left)
    return available


def check_fits(needed: int, what: str, fix: str) -> None:
    """A ``SpecError`` when ``what`` needs more than ``available_bytes()``."""
    available = available_bytes()
    if available is not None and needed > available:
        raise SpecError(f"{what} needs about {human_bytes(needed)} of memory, and "
                        f"{human_bytes(available)} is available; {fix}")
