"""What a run is asked for, and what it trains with: ``resolve(spec) -> (RunSpec, notes)``.

A ``RunSpec`` holds what it was given, validated (a bad value is a ``SpecError`` there); some
frameworks then train otherwise whatever they are asked — Ludwig in float32, a framework that
owns the epoch with its own end of epoch (``tail`` flush) — and ``resolve`` returns a new spec
with those values and a ``Note`` for each value it changed, which ``PairSpec.build`` keeps and
result.json's ``notes`` and the report show. ``RESOLUTIONS`` is the list, as data, from the
framework registry's flags (``Framework.dtype``, ``owns_epoch``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lrcheck.plan.frameworks import FRAMEWORKS, Framework
from lrcheck.spec.choices import Choice, Dtype, Tail
from lrcheck.spec.run import RunSpec


@dataclass(frozen=True)
class Note:
    """A setting a run was given (``given``), the value it trains with (``used``), and why."""

    setting: str
    flag: str
    given: str
    used: str
    why: str

    @property
    def text(self) -> str:
        """``--framework ludwig trains in float32: --dtype float64 changed to float32``."""
        return f"{self.why}: {self.flag} {self.given} changed to {self.used}"

    def to_dict(self) -> dict[str, str]:
        """result.json's ``notes`` entry: the fields, and ``note``, the sentence."""
        return {"setting": self.setting, "flag": self.flag, "given": self.given,
                "used": self.used, "why": self.why, "note": self.text}

    @classmethod
    def from_dict(cls, data: dict[str, str]) -> Note:
        return cls(data["setting"], data["flag"], data["given"], data["used"], data["why"])


@dataclass(frozen=True)
class Resolution:
    """A setting that a framework decides itself: ``value`` is what the framework trains with
    (None: what it is given), ``why`` says so, after the flag that chose the framework."""

    setting: str
    flag: str
    value: Callable[[Framework], Choice | None]
    why: Callable[[Framework], str]


RESOLUTIONS = (
    Resolution("dtype", "--dtype",
               lambda f: None if f.dtype is None else Dtype(f.dtype),
               lambda f: f"trains in {f.dtype}"),
    # The framework ends each epoch itself; lrcheck feeds it every sample of the epoch.
    Resolution("tail", "--tail",
               lambda f: Tail.FLUSH if f.owns_epoch else None,
               lambda f: "ends each epoch itself"),
)


def resolve(spec: RunSpec, framework_flag: str = "--framework"
            ) -> tuple[RunSpec, tuple[Note, ...]]:
    """``spec`` with the values its framework trains with, and a note for each one changed
    (``framework_flag``: how the note names the framework, ``--ref-framework`` for a
    reference). A resolved spec resolves to itself, with no notes."""
    framework = FRAMEWORKS[spec.framework]
    changes: dict[str, object] = {}
    notes: list[Note] = []
    for rule in RESOLUTIONS:
        used, given = rule.value(framework), getattr(spec, rule.setting)
        if used is not None and used != given:
            changes[rule.setting] = used
            notes.append(Note(rule.setting, rule.flag, str(given), str(used),
                              f"{framework_flag} {framework.name} {rule.why(framework)}"))
    if not changes:
        return spec, ()
    return spec.replace(**changes), tuple(notes)


def is_resolved(spec: RunSpec) -> bool:
    """``spec`` holds what its framework trains with (``resolve`` changes nothing)."""
    return resolve(spec)[0] is spec
