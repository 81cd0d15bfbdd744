"""What each check allows, and its defaults per floating-point type."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields

from lrcheck.errors import SpecError
from lrcheck.spec.choices import Amp, Dtype, choose

# (params, loss) relative tolerances per dtype. float32 is calibrated: over 16 pairs (4 tasks x
# sgd/adamw x accum 2/4, 5 epochs) the largest differences measured were 2.6e-6 (params) and
# 1.9e-5 (loss), so the defaults leave a margin of about 40x (docs/checks.md, "Tolerances,
# measured").
_DTYPE_TOL = {Dtype.FLOAT64: (1e-9, 1e-9), Dtype.FLOAT32: (1e-4, 1e-3)}
# --amp fp16 (float16 autocast): over 4 pairs (digits accum 2/4, breast-cancer, adamw; 5 epochs)
# the largest differences measured were 1.0e-2 (params) and 5.9e-3 (loss): about 5x margin.
# --amp bf16 (--framework deepspeed, bfloat16 model, float32 master weights): over 3 correct
# pairs with SGD (synthetic 1600, accum 2 and 4 at ZeRO 0, accum 2 at ZeRO 2; 5 epochs) the
# largest differences measured were 4.7e-2 (params) and 8.6e-3 (loss): about 2x and 6x margin.
# AdamW amplifies bfloat16's rounding to 0.55 (params) and 0.36 (loss), beyond any useful
# tolerance: those pairs pass against the reference's twin (docs/checks.md, "Tolerances,
# measured").
_AMP_TOL = {Amp.FP16: (5e-2, 3e-2), Amp.BF16: (1e-1, 5e-2)}


@dataclass(frozen=True)
class Tolerances:
    """What each check allows. ``lr``: absolute, scaled by ``max(1, |lr|)``; ``params`` and
    ``loss``: relative; ``metrics``: absolute on accuracy and macro-F1."""

    lr: float = 1e-12
    params: float = 1e-9
    loss: float = 1e-9
    metrics: float = 0.01

    @classmethod
    def for_dtype(cls, dtype: Dtype | str, amp: Amp | str = Amp.OFF,
                  **overrides: float | None) -> Tolerances:
        """Defaults for ``dtype`` (and ``amp``) with any non-None override applied."""
        by_dtype = _DTYPE_TOL[choose("--dtype", dtype, Dtype)]
        params, loss = _AMP_TOL.get(choose("--amp", amp, Amp), by_dtype)
        base: dict[str, float] = {"params": params, "loss": loss}
        base.update({k: v for k, v in overrides.items() if v is not None})
        tol = cls(**base)
        for name, value in asdict(tol).items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise SpecError(f"--tol-{name} must be a number >= 0, got {value!r}")
        return tol


@dataclass(frozen=True)
class ToleranceOverrides:
    """The ``--tol-*`` flags (a suite's ``tol_*``): each check's tolerance, None for the default
    of the dtype the candidate trains in (``Tolerances.for_dtype``). Checked when built."""

    lr: float | None = None
    params: float | None = None
    loss: float | None = None
    metrics: float | None = None

    def __post_init__(self) -> None:
        self.over(Dtype.FLOAT64)

    def over(self, dtype: Dtype | str, amp: Amp | str = Amp.OFF) -> Tolerances:
        """The tolerances of ``dtype`` (and ``amp``), these over them."""
        return Tolerances.for_dtype(dtype, amp, lr=self.lr, params=self.params, loss=self.loss,
                                    metrics=self.metrics)

    @classmethod
    def of(cls, given: Mapping[str, object]) -> ToleranceOverrides:
        """The overrides of the mapping ``given`` (check → tolerance); a key that is no check
        is a ``SpecError`` naming it."""
        names = [f.name for f in fields(cls)]
        unknown = [key for key in given if key not in names]
        if unknown:
            raise SpecError(f"tolerances: unknown check {unknown[0]!r}; the checks with a "
                            f"tolerance are {', '.join(names)}")
        # Each value is checked by __post_init__, whatever its type.
        build: Callable[..., ToleranceOverrides] = cls
        return build(**given)
