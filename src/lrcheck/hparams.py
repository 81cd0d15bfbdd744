"""The optimizer as a cause: its class, its hyperparameters per param group and its state's
keys, as ``lrcheck record`` writes them in the Recorder lines (``record.process``) and the
``optimizer`` check (``checks.optimizer``) compares them at every update.

A line holds ``optimizer`` (the class, on the first line), ``hparams`` (per setting, its value
in each param group) and ``state_keys`` (per param group, the keys of its parameters' state),
each only where it changed since the previous line: a reader carries them forward
(``OptimizerSettings.from_records``).

What counts (``counts``): every setting of a param group that is a number, a flag or a tuple of
numbers — momentum, dampening, nesterov, betas, eps, weight_decay, amsgrad, maximize, a custom
optimizer's own — except those of ``IGNORED``. Pure: no torch."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lrcheck.errors import SpecError

CLASS, SETTINGS, STATE = "optimizer", "hparams", "state_keys"
# Not compared: the LR (the ``lr`` check's); how the maths is run, not what it computes
# (foreach, fused: the same update in another order of sums; capturable, differentiable); a
# scheduler's own settings (its effect is the LR or the momentum, which are compared); the step
# counter some optimizers keep in the group (DeepSpeed's FusedAdam: the cadence's ``opt_step``).
IGNORED = frozenset({"params", "lr", "foreach", "fused", "capturable", "differentiable",
                     "initial_lr", "max_lr", "min_lr", "base_lr", "max_momentum",
                     "base_momentum", "step", "name"})
Value = float | bool | tuple[float, ...]


def counts(key: str, value: object) -> bool:
    """Whether a param group's setting ``key`` is compared (see the module's docstring)."""
    if key in IGNORED:
        return False
    if isinstance(value, (tuple, list)):
        return bool(value) and all(isinstance(v, (int, float)) for v in value)
    return isinstance(value, (int, float))


def _value(raw: object, where: str, key: str) -> Value:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, (int, float)) and math.isfinite(raw):
        return float(raw)
    if isinstance(raw, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                     for v in raw):
        return tuple(float(v) for v in raw)
    raise SpecError(f"{where}: the optimizer setting {key!r} must be a number, a flag or a list "
                    f"of numbers in each param group, got {raw!r}")


def read_settings(item: Mapping[str, object], where: str) -> dict[str, object]:
    """The optimizer's keys of one Recorder line, checked (``where``: the file and line)."""
    out: dict[str, object] = {}
    if CLASS in item:
        if not isinstance(item[CLASS], str):
            raise SpecError(f"{where}: {CLASS!r} must be the optimizer's class name, got "
                            f"{item[CLASS]!r}")
        out[CLASS] = item[CLASS]
    if SETTINGS in item:
        found = item[SETTINGS]
        if not isinstance(found, dict) or not all(isinstance(v, list) for v in found.values()):
            raise SpecError(f"{where}: {SETTINGS!r} must map each setting to its value in every "
                            f"param group, got {found!r}")
        out[SETTINGS] = {str(k): tuple(_value(v, where, k) for v in values)
                         for k, values in found.items()}
    if STATE in item:
        found = item[STATE]
        if not isinstance(found, list) or not all(
                isinstance(g, list) and all(isinstance(k, str) for k in g) for g in found):
            raise SpecError(f"{where}: {STATE!r} must list the state's keys of every param "
                            f"group, got {found!r}")
        out[STATE] = tuple(tuple(g) for g in found)
    return out


Settings = Mapping[str, tuple[Value, ...]]


@dataclass(frozen=True)
class OptimizerSettings:
    """What a run recorded of its optimizer: its class (``cls``, "" where not recorded), and
    per update its settings (setting → value per param group) and its state's keys per param
    group (empty before the first step made any)."""

    cls: str
    settings: tuple[Settings, ...]
    state: tuple[tuple[tuple[str, ...], ...], ...]

    @property
    def short(self) -> str:
        """The class's own name (``SGD``), or "the optimizer" where not recorded."""
        return self.cls.rsplit(".", 1)[-1] or "the optimizer"

    @classmethod
    def from_records(cls, records: Sequence[Mapping[str, Any]]) -> OptimizerSettings | None:
        """The records' optimizer keys, each carried forward to the lines that do not repeat
        it; None where no line has any (a Recorder file its own code wrote)."""
        if not any(SETTINGS in r or STATE in r for r in records):
            return None
        settings: Settings = {}
        state: tuple[tuple[str, ...], ...] = ()
        per_update: list[Settings] = []
        states = []
        for record in records:
            settings = record.get(SETTINGS, settings)
            state = record.get(STATE, state)
            per_update.append(settings)
            states.append(state)
        name = next((str(r[CLASS]) for r in records if CLASS in r), "")
        return cls(name, tuple(per_update), tuple(states))
