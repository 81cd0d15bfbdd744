"""Frozen specs: built once from flags (or a suite file), validated, and carried unchanged to the
runner, the checks, the report and ``result.json``. ``run``: one training configuration;
``settings``: the settings only some frameworks have, declared once; ``resolve``: a run as its
framework trains it, with a note for each value changed; ``pair``: what a comparison checks;
``compare_options`` and ``run_options``: the options of ``lrcheck compare`` and ``lrcheck run``,
one record each; ``choices``: the fixed sets a setting chooses from and the checks every option
goes through; ``tolerances``: what each check allows.

Nothing here imports torch: ``lrcheck --help`` and spec validation stay fast.
"""

from __future__ import annotations

from lrcheck.spec.choices import (
    Amp,
    Choice,
    Device,
    Dtype,
    LightningSampler,
    LossNorm,
    Optimizer,
    Tail,
    TrainerLoss,
    check_timeout,
)
from lrcheck.spec.compare_options import CompareOptions
from lrcheck.spec.pair import (
    CommandPair,
    FilePair,
    PairSpec,
    reference_framework,
)
from lrcheck.spec.resolve import Note, resolve
from lrcheck.spec.run import (
    ACCELERATE_POLICY_NOTE,
    DEFAULT_TIMEOUT_S,
    DIFF_DTYPE,
    REFERENCE_POLICY,
    RUN_STALL_S,
    TRACE_DEFAULTS,
    RunSpec,
    resumed_against_itself,
    samples_per_epoch,
)
from lrcheck.spec.run_options import RunOptions
from lrcheck.spec.settings import SETTINGS, Setting, settings_for
from lrcheck.spec.tolerances import ToleranceOverrides, Tolerances

__all__ = ["RunSpec", "PairSpec", "FilePair", "CommandPair", "RunOptions", "CompareOptions",
           "Tolerances", "ToleranceOverrides",
           "Choice", "Tail", "LossNorm", "Dtype",
           "Device", "Amp", "Optimizer", "TrainerLoss", "LightningSampler", "REFERENCE_POLICY",
           "DEFAULT_TIMEOUT_S", "RUN_STALL_S", "TRACE_DEFAULTS", "DIFF_DTYPE", "SETTINGS",
           "Setting", "settings_for", "Note", "resolve",
           "ACCELERATE_POLICY_NOTE", "check_timeout",
           "reference_framework", "resumed_against_itself",
           "samples_per_epoch"]
