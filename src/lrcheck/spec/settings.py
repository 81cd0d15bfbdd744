"""The settings only some frameworks have, declared once, as data (``SETTINGS``).

Each ``Setting`` is a ``RunSpec`` field (its default is taken from here), a suite key (the
field's name), a command-line option of ``lrcheck compare`` (its flag and help, from here: the
command's parameter names the setting, ``tests/cli/test_compare.py`` holds every setting to one),
a mark in a pair's folder name, and the frameworks it applies to, which the registry page and
``lrcheck list`` show beside ``Framework.settings``. ``RunSpec`` refuses a setting changed for a
framework it does not apply to, and a pair of two frameworks gives the reference its defaults.

A new framework setting is one entry here, its ``RunSpec`` field (a line), its ``lrcheck
compare`` parameter (a line) and the adapter that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from lrcheck.errors import SpecError
from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.spec.choices import Choice, LightningSampler, TrainerLoss, choose

T = TypeVar("T")

# DeepSpeed's ZeRO stages (--zero-stage): 0 none, 1 optimizer state, 2 and gradients, 3 and
# parameters partitioned over the processes.
ZERO_STAGES = (0, 1, 2, 3)


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One framework setting. ``flag`` is the option as messages and ``Framework.settings`` name
    it (``--no-even-batches`` for a switch that is on by default); ``mark`` is how a pair's
    folder name says it differs from its default (``{}``: the value); ``choices`` the values it
    takes (a ``Choice`` Enum, or a tuple named ``values_are``; None: any of its type)."""

    name: str
    default: T
    flag: str
    help: str
    mark: str
    frameworks: tuple[str, ...]
    choices: type[Choice] | tuple[Any, ...] | None = None
    values_are: str = ""

    @property
    def switch(self) -> bool:
        """A true-or-false setting: a flag on the command line, ``true``/``false`` in a suite."""
        return isinstance(self.default, bool)

    @property
    def param_decls(self) -> tuple[str, ...]:
        """The option's names for typer: a switch's flag (``--x``, or ``--x/--no-x`` where it is
        on by default); none for a valued option, whose name is the parameter's."""
        if not self.switch:
            return ()
        if self.default:
            return (f"--{self.name.replace('_', '-')}/{self.flag}",)
        return (self.flag,)

    def checked(self, value: object) -> object:
        """``value`` as the setting holds it (a ``Choice`` member for a name), or a
        ``SpecError`` naming the flag and what it takes."""
        if isinstance(self.choices, tuple):
            if isinstance(value, bool) or value not in self.choices:
                raise SpecError(f"{self.flag} must be one of {self.values_are} "
                                f"{', '.join(map(str, self.choices))}, got {value!r}")
            return value
        if self.choices is not None:
            return choose(self.flag, value, self.choices)
        return value


def _names(choices: type[Choice]) -> str:
    return ", ".join(choices)


DROP_LAST = Setting(
    "drop_last", False, "--drop-last",
    "A framework's DataLoader(drop_last=True): each process drops its epoch's last, short "
    "micro-batch.", "drop-last", ("transformers", "lightning"))
TRAINER_LOSS = Setting(
    "trainer_loss", TrainerLoss.MEAN, "--trainer-loss",
    f"--framework transformers: how the Trainer scales a micro-batch's loss: "
    f"{_names(TrainerLoss)} (mean: a model whose forward takes no num_items_in_batch, each "
    "micro-batch mean divided by the window's micro-batches; num-items: the forward takes "
    "num_items_in_batch and sums over the window's items).", "loss-{}", ("transformers",),
    TrainerLoss)
EVEN_BATCHES = Setting(
    "even_batches", True, "--no-even-batches",
    "--framework transformers or accelerate: Accelerate's even_batches, which fills the last "
    "round of batches from the start of the data so every process gets one.", "uneven",
    ("accelerate", "transformers"))
LIGHTNING_SAMPLER = Setting(
    "lightning_sampler", LightningSampler.DISTRIBUTED, "--lightning-sampler",
    f"--framework lightning: {_names(LightningSampler)} (distributed: Lightning's "
    "use_distributed_sampler=True wraps lrcheck's order in a DistributedSampler, which pads "
    "uneven processes; own: use_distributed_sampler=False, each process gets its share of "
    "lrcheck's order).", "sampler-{}", ("lightning",), LightningSampler)
ZERO_STAGE = Setting(
    "zero_stage", 0, "--zero-stage",
    "--framework deepspeed: the ZeRO stage, 0 (none), 1 (optimizer state), 2 (and gradients) "
    "or 3 (and parameters partitioned over the processes).", "zero{}", ("deepspeed",),
    ZERO_STAGES, "DeepSpeed's ZeRO stages")
SCHEDULER_STEPPED_TOO = Setting(
    "scheduler_stepped_too", False, "--scheduler-stepped-too",
    "--framework deepspeed: the loop also calls scheduler.step() after every engine.step(), "
    "though the engine steps the schedule it was given itself: the users' mistake, to see it "
    "caught.", "scheduler-stepped-too", ("deepspeed",))

SETTINGS: tuple[Setting[Any], ...] = (DROP_LAST, TRAINER_LOSS, EVEN_BATCHES, LIGHTNING_SAMPLER,
                                      ZERO_STAGE, SCHEDULER_STEPPED_TOO)
SETTINGS_BY_NAME: dict[str, Setting[Any]] = {s.name: s for s in SETTINGS}


def settings_for(framework: str) -> tuple[str, ...]:
    """The flags that apply to ``framework``: lrcheck's general ones its registry entry names
    (``Framework.settings``), then its own settings from ``SETTINGS``."""
    own = tuple(s.flag for s in SETTINGS if framework in s.frameworks)
    return (*FRAMEWORKS[framework].settings, *own)

