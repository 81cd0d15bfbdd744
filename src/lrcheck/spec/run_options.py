"""``lrcheck run``'s options as one frozen record. The command line, ``lrcheck.run_commands``,
``lrcheck.testing.assert_runs_equivalent``, the pytest fixture ``lrcheck_runs`` and a suite's
``[[pair]]`` of commands all build a ``RunOptions`` (the keyword entry points through
``RunOptions.of``), and ``command_pair.run_commands`` takes it: an option added here reaches all
five (tests/spec/test_run_options.py holds each entry point to every field)."""

from __future__ import annotations

import difflib
import os
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from lrcheck.errors import SpecError
from lrcheck.spec.interrupt import DEFAULT_GRACE_S, Interrupt
from lrcheck.spec.run import DIFF_DTYPE, RUN_STALL_S
from lrcheck.spec.tolerances import Tolerances

# A command line, or a list of arguments (quoted into one as a shell would split it).
Command = str | Sequence[str | os.PathLike[str]]


@dataclass(frozen=True)
class RunOptions:
    """Everything ``lrcheck run`` takes besides the two command lines and the report folder
    (``lrcheck.api.run_commands`` says what each does). Checked when built: a bad value is a
    ``SpecError`` naming it, as the flag's; ``timeout`` 0 is None (no limit); ``tags`` a tuple of
    ``"lr=LearningRate"``; ``resume``, given as a list of arguments, one command line."""

    samples: int | None = None
    fingerprint_every: int | None = None
    tolerances: Tolerances = field(default_factory=lambda: Tolerances.for_dtype(DIFF_DTYPE))
    free: bool = False
    strict: bool = False
    timeout: float | None = RUN_STALL_S
    deterministic: bool = False
    ref_logs: Path | None = None
    logs: Path | None = None
    tags: tuple[str, ...] = ()
    log_steps: str | None = None
    interrupt_at: int | None = None
    interrupt_after_micro: int | None = None
    resume: str | None = None
    interrupt_signal: str = "TERM"
    grace: float = DEFAULT_GRACE_S

    def __post_init__(self) -> None:
        _count("--samples", self.samples, 1)
        _count("--fingerprint-every", self.fingerprint_every, 0)
        if not isinstance(self.tolerances, Tolerances):
            raise SpecError(f"tolerances must be a Tolerances, got {self.tolerances!r}")
        for name in ("free", "strict", "deterministic"):
            if not isinstance(getattr(self, name), bool):
                raise SpecError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.timeout is not None and (isinstance(self.timeout, bool) or not isinstance(
                self.timeout, (int, float)) or not self.timeout >= 0):
            raise SpecError(f"--timeout must be a number of seconds >= 0 (0: wait for ever), "
                            f"got {self.timeout!r}")
        for name in ("ref_logs", "logs"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), Path):
                raise SpecError(f"{name} must be a path, got {getattr(self, name)!r}")
        if self.log_steps is not None and not isinstance(self.log_steps, str):
            raise SpecError(f"--log-steps must be a string, got {self.log_steps!r}")
        _ = self.interrupt

    @property
    def interrupt(self) -> Interrupt | None:
        """``interrupt_at``, ``interrupt_after_micro``, ``resume``, ``interrupt_signal`` and
        ``grace`` as one ``Interrupt`` (None: the candidate runs through)."""
        return Interrupt.given(self.interrupt_at, self.resume, self.interrupt_signal, self.grace,
                               self.interrupt_after_micro)

    @classmethod
    def of(cls, options: RunOptions | None = None, /, *, caller: str,
           **keywords: object) -> RunOptions:
        """``options`` (default: every default) with ``keywords`` over it, each a field of
        these, in the forms a Python caller writes them: ``tags`` as a list or a mapping
        (``{"lr": "LearningRate"}``), ``resume`` and the logs' paths as lists of arguments or
        paths, ``tolerances`` None for the default. A keyword that is no field is a
        ``SpecError`` naming ``lrcheck.caller``, the nearest field and all of them."""
        if options is not None and not isinstance(options, RunOptions):
            raise SpecError(f"lrcheck.{caller}: options must be a RunOptions, got "
                            f"{type(options).__name__}; give the options as keywords, or "
                            "RunOptions(samples=32, ...)")
        unknown = [key for key in keywords if key not in OPTION_NAMES]
        if unknown:
            raise unknown_keywords(caller, unknown, OPTION_NAMES,
                                   f"it takes lrcheck run's options: {', '.join(OPTION_NAMES)}")
        given = {key: _typed(key, value) for key, value in keywords.items()
                 if not (key == "tolerances" and value is None)}
        base = options if options is not None else cls()
        # Each value is checked by __post_init__, at run time, whatever its type.
        build: Callable[..., RunOptions] = cls
        return build(**{f.name: getattr(base, f.name) for f in fields(base)} | given)


OPTION_NAMES = tuple(f.name for f in fields(RunOptions))


def _typed(key: str, value: object) -> object:
    """``value`` of the keyword ``key`` in the field's own type, where a caller may write it
    otherwise."""
    if key == "tags":
        return tags_given(value)
    if key == "resume" and isinstance(value, Sequence) and not isinstance(value, str):
        return shlex.join(str(word) for word in value)
    if key in ("logs", "ref_logs") and isinstance(value, (str, os.PathLike)):
        return Path(value)
    if key == "timeout" and value == 0:
        return None
    return value


def tags_given(value: object) -> tuple[str, ...]:
    """``--tag``'s values as a tuple of ``"quantity=tag"``: from a list of those, or a
    mapping of quantity to tag; None is none."""
    if value is None:
        return ()
    if isinstance(value, Mapping):
        return tuple(f"{quantity}={tag}" for quantity, tag in value.items())
    if isinstance(value, str) or not isinstance(value, Sequence) or not all(
            isinstance(item, str) for item in value):
        raise SpecError(f"tags must be a list of 'quantity=tag' or a mapping of quantity to "
                        f"tag, got {value!r}")
    return tuple(value)


def command_line(command: Command) -> str:
    """``command`` as one command line: a string as it is, a list of arguments quoted."""
    if isinstance(command, str):
        return command
    return shlex.join(os.fspath(word) for word in command)


def unknown_keywords(name: str, unknown: list[str], accepted: tuple[str, ...],
                     takes: str) -> SpecError:
    """The error for the keywords ``unknown`` that ``lrcheck.name`` does not take: each named,
    the accepted one nearest the first, and ``takes``, what it does take."""
    close = difflib.get_close_matches(unknown[0], accepted, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    words = (f"keyword {unknown[0]!r}" if len(unknown) == 1
             else f"keywords {', '.join(map(repr, unknown))}")
    return SpecError(f"lrcheck.{name}: unknown {words}{hint}; {takes}")


def _count(flag: str, value: object, least: int) -> None:
    """A ``SpecError`` where ``value`` is neither None nor a whole number >= ``least``."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < least):
        raise SpecError(f"{flag} must be a whole number >= {least}, got {value!r}")


def options_to_dict(options: RunOptions) -> dict[str, object]:
    """``options`` as a suite's pair of commands gives them in result.json and suite.json:
    ``samples``, ``tolerances`` and ``deterministic`` always, ``interrupt`` as one object, the
    others where not their default."""
    default = RunOptions()
    given: dict[str, object] = {
        name: str(value) if isinstance(value, Path) else list(value)
        if isinstance(value, tuple) else value
        for name in ("fingerprint_every", "free", "strict", "timeout", "ref_logs", "logs",
                     "tags", "log_steps")
        if (value := getattr(options, name)) != getattr(default, name)}
    interrupt = options.interrupt
    return {"samples": options.samples, "tolerances": asdict(options.tolerances),
            "deterministic": options.deterministic, **given,
            **({} if interrupt is None else {"interrupt": {
                key: value for key, value in asdict(interrupt).items()
                if not (key == "micro" and value is None)}})}


def options_from_dict(data: Mapping[str, Any]) -> RunOptions:
    """The ``RunOptions`` that ``options_to_dict`` gave as ``data``."""
    stop = data.get("interrupt")
    keywords = {key: data[key] for key in OPTION_NAMES if key in data and key != "tolerances"}
    if stop is not None:
        keywords.update(interrupt_at=stop["at"], resume=stop["resume"],
                        interrupt_signal=stop["signal"], grace=stop["grace"],
                        interrupt_after_micro=stop.get("micro"))
    return RunOptions.of(caller="suite", tolerances=Tolerances(**data["tolerances"]),
                         **keywords)
