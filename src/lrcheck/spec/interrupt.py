"""``lrcheck run --interrupt-at N [--interrupt-after-micro M] --resume CMD [--interrupt-signal
TERM|KILL] [--grace S]`` (``lrcheck.api.run_commands``' ``interrupt_at``,
``interrupt_after_micro``, ``resume``, ``interrupt_signal``, ``grace``; a suite's ``[[pair]]``
of commands): the options, checked. ``record.interrupt`` carries them
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
    """``--interrupt-at``, ``--interrupt-after-micro``, ``--resume``, ``--interrupt-signal`` and
    ``--grace``: the candidate interrupted once it made ``at`` updates (before update ``at``'s
    step; with ``micro``, after the ``micro``-th backward pass of update ``at``'s window, before
    the next: in the middle of the window), by ``signal``
    (``TERM``: SIGTERM, then SIGKILL after ``grace`` seconds; ``KILL``: at once), then the
    command line ``resume`` (split as a shell would)."""

    at: int
    resume: str
    signal: str = "TERM"
    grace: float = DEFAULT_GRACE_S
    micro: int | None = None

    @classmethod
    def given(cls, at: int | None, resume: str | None, sig: str = "TERM",
              grace: float = DEFAULT_GRACE_S, micro: int | None = None) -> Interrupt | None:
        """The options checked (None: no interrupt); a ``SpecError`` naming the bad value."""
        if micro is not None and (isinstance(micro, bool) or not isinstance(micro, int)
                                  or micro < 1):
            raise SpecError(f"--interrupt-after-micro must be a number of backward passes >= 1, "
                            f"got {micro!r}")
        if micro is not None and at is None:
            raise SpecError(f"--interrupt-after-micro {micro} needs --interrupt-at: the update "
                            "whose window to interrupt")
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
        return cls(at, resume, sig, float(grace), micro)

    def command(self, candidate: list[str]) -> list[str]:
        """The command line ``lrcheck run`` records in the candidate's place."""
        micro = [] if self.micro is None else ["--micro", str(self.micro)]
        return [sys.executable, "-m", "lrcheck.record.interrupt", "--at", str(self.at), *micro,
                "--signal", self.signal, "--grace", repr(self.grace), "--resume", self.resume,
                "--", *candidate]
