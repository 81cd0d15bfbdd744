"""``lrcheck run --interrupt-at N --resume CMD [--interrupt-signal TERM|KILL] [--grace S]``
(``lrcheck.api.run_commands``' ``interrupt_at``, ``resume``, ``interrupt_signal``, ``grace``; a
suite's ``[[pair]]`` of commands): the options, checked. ``record.interrupt`` carries them
out."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass

from lrcheck.errors import SpecError

SIGNALS = ("TERM", "KILL")  # record.interrupt has them too
DEFAULT_GRACE_S = 30.0


@dataclass(frozen=True)
class Interrupt:
    """``--interrupt-at``, ``--resume``, ``--interrupt-signal`` and ``--grace``: the candidate
    interrupted once it made ``at`` updates (before update ``at``'s step), by ``signal``
    (``TERM``: SIGTERM, then SIGKILL after ``grace`` seconds; ``KILL``: at once), then the
    command line ``resume`` (split as a shell would)."""

    at: int
    resume: str
    signal: str = "TERM"
    grace: float = DEFAULT_GRACE_S

    @classmethod
    def given(cls, at: int | None, resume: str | None, sig: str = "TERM",
              grace: float = DEFAULT_GRACE_S) -> Interrupt | None:
        """The options checked (None: no interrupt); a ``SpecError`` naming the bad value."""
        if at is None and resume is None:
            return None
        if at is None or resume is None:
            raise SpecError("--interrupt-at and --resume go together: the update to interrupt "
                            f"the candidate before, and the command that resumes it (got "
                            f"--interrupt-at {at!r}, --resume {resume!r})")
        if isinstance(at, bool) or not isinstance(at, int) or at < 1:
            raise SpecError(f"--interrupt-at must be a number of updates >= 1, got {at!r}")
        if sig not in SIGNALS:
            raise SpecError(f"--interrupt-signal must be one of {', '.join(SIGNALS)}, got "
                            f"{sig!r}")
        if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not grace >= 0:
            raise SpecError(f"--grace must be a number of seconds >= 0, got {grace!r}")
        try:
            argv = shlex.split(resume)
        except ValueError as exc:
            raise SpecError(f"the resume command {resume!r} does not split: {exc}") from None
        if not argv:
            raise SpecError("the resume command line is empty: give the command that resumes "
                            "the candidate from its checkpoint, quoted")
        return cls(at, resume, sig, float(grace))

    def command(self, candidate: list[str]) -> list[str]:
        """The command line ``lrcheck run`` records in the candidate's place."""
        return [sys.executable, "-m", "lrcheck.record.interrupt", "--at", str(self.at),
                "--signal", self.signal, "--grace", repr(self.grace), "--resume", self.resume,
                "--", *candidate]
