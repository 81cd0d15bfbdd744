"""Where a comparison ran: result.json's ``environment`` (docs/design.md, "result.json"), as a
typed record.

``Environment.to_dict()`` writes the keys in the order result.json has always had them and
leaves out what a report does not know (a diff of two files knows only lrcheck's version);
``from_dict`` reads it back (a torchrun job's rank 0 hands it over in ``environment.json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The keys before the frameworks' versions and after them, in result.json's order.
_HEAD = ("lrcheck", "torch", "device", "world_size", "python", "platform", "threads")
_TAIL = ("noise_floor", "launch", "deterministic")


@dataclass(frozen=True)
class Environment:
    """``lrcheck``'s version and the ``device``; for trained or simulated runs also torch's
    version, the candidate's ``world_size``, Python's version, the ``platform`` and the CPU
    ``threads`` training used; ``frameworks``: ``{module: version}`` of each framework the
    runs trained through (written as keys of their own: ``"transformers": "5.24.0"``);
    ``noise_floor``: how the noise floor was measured, when it was; ``launch``: where each role
    ran (``{"reference": "in-process", ...}``); ``deterministic``: with ``--deterministic``,
    each of its settings and the value in effect (``spec.determinism.described``), else
    None, left out."""

    lrcheck: str
    device: str
    torch: str | None = None
    world_size: int | None = None
    python: str | None = None
    platform: str | None = None
    threads: int | None = None
    frameworks: dict[str, str] = field(default_factory=dict)
    noise_floor: str | None = None
    launch: dict[str, str] | None = None
    deterministic: dict[str, object] | None = None

    def to_dict(self) -> dict[str, object]:
        head = {name: getattr(self, name) for name in _HEAD}
        tail = {name: getattr(self, name) for name in _TAIL}
        return {**{k: v for k, v in head.items() if v is not None}, **self.frameworks,
                **{k: v for k, v in tail.items() if v is not None}}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Environment:
        """The record ``to_dict`` wrote: any other key with a string value is a framework's
        version."""
        launch, deterministic = _object(data, "launch"), _object(data, "deterministic")
        return cls(
            lrcheck=_required(data, "lrcheck"), device=_required(data, "device"),
            torch=_str(data, "torch"), world_size=_int(data, "world_size"),
            python=_str(data, "python"), platform=_str(data, "platform"),
            threads=_int(data, "threads"),
            frameworks={k: v for k, v in data.items()
                        if k not in _HEAD and k not in _TAIL and isinstance(v, str)},
            noise_floor=_str(data, "noise_floor"),
            launch=None if launch is None else {str(k): str(v) for k, v in launch.items()},
            deterministic=deterministic)


def _object(data: Mapping[str, object], name: str) -> dict[str, object] | None:
    value = data.get(name)
    if value is not None and not isinstance(value, dict):
        raise ValueError(f"environment: {name} is {value!r}, not an object")
    return None if value is None else {str(k): v for k, v in value.items()}


def _str(data: Mapping[str, object], name: str) -> str | None:
    return None if data.get(name) is None else _required(data, name)


def _required(data: Mapping[str, object], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise ValueError(f"environment: {name} is {value!r}, not a string")
    return value


def _int(data: Mapping[str, object], name: str) -> int | None:
    value = data.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"environment: {name} is {value!r}, not a whole number")
    return value
