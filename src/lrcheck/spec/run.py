"""One training configuration, ``RunSpec``, and the constants its defaults come from."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import lrcheck.spec.settings as declared
from lrcheck.errors import SpecError
from lrcheck.experiments.schedulers import SCHEDULERS, is_factory_ref
from lrcheck.experiments.tasks import GENERATED_SAMPLES, MIN_SAMPLES, TASKS
from lrcheck.plan.frameworks import FRAMEWORKS, PLAIN
from lrcheck.plan.policies import POLICIES
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
    at_least,
    choose,
    one_of,
)

REFERENCE_POLICY = "per-update"
# Seconds a multi-process run may go without finishing an update: ``lrcheck compare --timeout``
# and ``lrcheck.compare(timeout=...)``.
DEFAULT_TIMEOUT_S = 300.0
# Seconds without a new update in either command of ``lrcheck run`` in lockstep, once updates
# have begun, before both are stopped as hung (``lrcheck run --timeout``): longer than
# DEFAULT_TIMEOUT_S, since a user's script may evaluate between two updates.
RUN_STALL_S = 600.0
# A Recorder file does not say its dtype; users mostly train in float32 (or lower), so ``lrcheck
# diff`` allows float32's loss tolerance unless told otherwise.
DIFF_DTYPE = Dtype.FLOAT32
# What ``--policy accelerate``, the spelling before ``--framework``, is now.
ACCELERATE_POLICY_NOTE = "--policy accelerate is now --framework accelerate --ref-framework plain"


@dataclass(frozen=True)
class RunSpec:
    """One training configuration. ``world`` is the number of processes; ``device`` may still be
    ``auto`` here and is resolved by the runner. ``samples`` sizes a generated task's data set
    (None: ``GENERATED_SAMPLES``); a task whose data set ships with its package has its own
    size and keeps None, and a pair refuses one given (``PairSpec``). The defaults are
    ``lrcheck compare``'s, which ``lrcheck.compare()`` and a suite's ``[[pair]]`` share: the
    command line takes them from here."""

    task: str = "digits"
    bs: int = 16
    accum: int = 2
    world: int = 1
    epochs: int = 5
    scheduler: str = "cosine"
    warmup: float = 0.1
    lr: float = 0.05
    optimizer: Optimizer = Optimizer.SGD
    policy: str = REFERENCE_POLICY
    tail: Tail = Tail.DROP
    loss_norm: LossNorm = LossNorm.GLOBAL
    seed: int = 0
    dtype: Dtype = Dtype.FLOAT64
    device: Device = Device.AUTO
    samples: int | None = None
    amp: Amp = Amp.OFF
    inject_overflow: tuple[int, ...] = ()
    resume_at: int | None = None
    resume_at_micro: int | None = None
    framework: str = PLAIN
    # ``--deterministic``: the settings of spec/determinism.py applied while the run trains, and
    # recorded in result.json's environment.
    deterministic: bool = False
    # The settings only some frameworks have: declared, with their defaults, in spec/settings.py
    # (``SETTINGS``; tests/spec/test_settings.py holds these fields to it).
    drop_last: bool = declared.DROP_LAST.default
    trainer_loss: TrainerLoss = declared.TRAINER_LOSS.default
    even_batches: bool = declared.EVEN_BATCHES.default
    lightning_sampler: LightningSampler = declared.LIGHTNING_SAMPLER.default
    zero_stage: int = declared.ZERO_STAGE.default
    scheduler_stepped_too: bool = declared.SCHEDULER_STEPPED_TOO.default
    # The noise-floor twin of a reference (never typed by a user): the same run with each
    # update's samples fed in reverse order and every initial weight one unit in the last
    # place higher, so it differs from the reference by rounding alone (checks.check_effect).
    twin: bool = False

    def __post_init__(self) -> None:
        if self.policy == "accelerate":  # the spelling before --framework
            warnings.warn(ACCELERATE_POLICY_NOTE, FutureWarning, stacklevel=3)
            object.__setattr__(self, "policy", REFERENCE_POLICY)
            object.__setattr__(self, "framework", "accelerate")
        one_of("--task", self.task, list(TASKS))
        for flag, value, low in (("--bs", self.bs, 1), ("--accum", self.accum, 1),
                                 ("--nproc", self.world, 1), ("--epochs", self.epochs, 1)):
            at_least(flag, value, low)
        self._check_samples()
        at_least("--seed", self.seed, 0)
        if not (self.scheduler in SCHEDULERS or is_factory_ref(self.scheduler)):
            raise SpecError(
                f"--scheduler {self.scheduler!r} is not known; choose one of: "
                f"{', '.join(SCHEDULERS)}, or give a factory as 'pkg.module:make' or 'file.py:make'"
            )
        if not (isinstance(self.warmup, (int, float)) and 0.0 <= self.warmup < 1.0):
            raise SpecError("--warmup must be a fraction of the run in [0, 1), "
                            f"got {self.warmup!r}")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise SpecError(f"--lr must be a positive number, got {self.lr!r}")
        self._choose("optimizer", Optimizer)
        one_of("--policy", self.policy, list(POLICIES))
        self._choose("tail", Tail)
        self._check_framework()
        for name, choices in (("loss_norm", LossNorm), ("dtype", Dtype), ("device", Device),
                              ("amp", Amp)):
            self._choose(name, choices)
        self._check_amp_and_resume()
        if not isinstance(self.deterministic, bool):
            raise SpecError(f"--deterministic is on or off, got {self.deterministic!r}")

    def _choose(self, name: str, choices: type[Choice]) -> None:
        """Field ``name`` as the member of ``choices`` it names (a string is accepted)."""
        flag = "--" + name.replace("_", "-")
        object.__setattr__(self, name, choose(flag, getattr(self, name), choices))

    def _check_amp_and_resume(self) -> None:
        object.__setattr__(self, "inject_overflow", tuple(self.inject_overflow))
        for k in self.inject_overflow:
            at_least("--inject-overflow", k, 0)
        if self.amp == Amp.FP16 and self.dtype != Dtype.FLOAT32:
            raise SpecError("--amp fp16 autocasts float32 to float16; add --dtype float32")
        if self.amp == Amp.BF16 and self.dtype != Dtype.FLOAT32:
            raise SpecError("--amp bf16 trains a bfloat16 model on float32 master weights; add "
                            "--dtype float32")
        for flag, value in (("--resume-at", self.resume_at),
                            ("--resume-at-micro", self.resume_at_micro)):
            if value is not None:
                at_least(flag, value, 0)
        if self.resume_at is not None and self.resume_at_micro is not None:
            raise SpecError("give --resume-at or --resume-at-micro, not both")
        if self.inject_overflow and self.amp != Amp.FP16:
            raise SpecError("--inject-overflow needs --amp fp16: a GradScaler is what skips the "
                            "step")

    def _check_samples(self) -> None:
        """A generated task has enough samples for its split; a task of a fixed size is left
        with the value it was given (a suite checks ``samples`` before it knows the task)."""
        task = TASKS[self.task]
        if self.samples is None:
            if task.generated:
                object.__setattr__(self, "samples", GENERATED_SAMPLES)
            return
        at_least("--samples", self.samples, MIN_SAMPLES)
        if task.generated and self.samples < task.min_samples:
            raise SpecError(f"--samples must be a whole number >= {task.min_samples} for --task "
                            f"{self.task}: its test split, a fifth of the samples, holds each "
                            f"class; got {self.samples!r}")

    def _check_framework(self) -> None:
        """The framework is known, its settings apply to it, and what lrcheck's own loop alone
        does (policies, resume, AMP) is asked of that loop only."""
        one_of("--framework", self.framework, list(FRAMEWORKS))
        self._check_amp_applies()
        for setting in declared.SETTINGS:
            object.__setattr__(self, setting.name, setting.checked(getattr(self, setting.name)))
        for setting in declared.SETTINGS:
            if (getattr(self, setting.name) != setting.default
                    and self.framework not in setting.frameworks):
                raise SpecError(f"{setting.flag} applies to --framework "
                                f"{' or '.join(setting.frameworks)}, not {self.framework}")
        if self.framework == PLAIN:
            return
        framework = FRAMEWORKS[self.framework]
        refused = (framework.refuses_dtype or {}).get(str(self.dtype))
        if refused is not None:
            raise SpecError(f"--framework {self.framework} cannot train --dtype {self.dtype} "
                            f"here: {refused}")
        own_loop: list[tuple[str, object, object]] = [
            ("--resume-at-micro", self.resume_at_micro, None)]
        if not framework.own_loop:
            own_loop.append(("--policy", self.policy, REFERENCE_POLICY))
        if not framework.resumes:
            own_loop.append(("--resume-at", self.resume_at, None))
        for flag, value, default in own_loop:
            if value != default:
                raise SpecError(f"{flag} applies to lrcheck's own loop (--framework plain); "
                                f"--framework {self.framework} decides that itself")
        if framework.single_process and self.world > 1:
            raise SpecError(f"--framework {self.framework} trains in one process here: "
                            f"--nproc {self.world} does not apply")
        if framework.own_model and TASKS[self.task].tokens:
            raise SpecError(f"--framework {self.framework} builds its model from number features: "
                            f"--task {self.task} has token sequences; choose a tabular task")
        # What the framework trains with whatever it is asked (Ludwig: float32; its own end of
        # epoch, tail flush) is spec.resolve's, with a note; carry it cannot do.
        if framework.owns_epoch and self.tail == Tail.CARRY:
            raise SpecError(f"--framework {self.framework} ends each epoch itself: --tail "
                            "carry does not apply (see --drop-last)")
        if framework.schedulers is not None and self.scheduler not in framework.schedulers:
            raise SpecError(f"--framework {self.framework} runs its own schedules; --scheduler "
                            f"{self.scheduler!r} has none there: choose one of "
                            f"{', '.join(framework.schedulers)}")

    def _check_amp_applies(self) -> None:
        """``--amp`` names a mode the framework trains, or is refused with the reason."""
        self._choose("amp", Amp)
        framework = FRAMEWORKS[self.framework]
        if self.amp == Amp.OFF or self.amp in framework.amps:
            return
        refused = (framework.refuses_amp or {}).get(str(self.amp))
        if refused is not None:
            raise SpecError(f"--framework {self.framework} cannot train --amp {self.amp} here: "
                            f"{refused}")
        where = [f.name for f in FRAMEWORKS.values() if self.amp in f.amps]
        raise SpecError(f"--amp {self.amp} applies to --framework {' or '.join(where)}, "
                        f"not {self.framework}")

    @property
    def effective_batch(self) -> int:
        """``bs·accum·world``: the samples behind one optimizer update."""
        return self.bs * self.accum * self.world

    @property
    def trained_by(self) -> str:
        """How the run trains, in a report's words: lrcheck's own loop's policy, or the
        framework with its settings that differ from their defaults."""
        if self.framework == PLAIN:
            return self.policy
        changed = [setting.flag.removeprefix("--")
                   + ("" if setting.switch else f" {getattr(self, setting.name)}")
                   for setting in declared.SETTINGS
                   if getattr(self, setting.name) != setting.default]
        return ", ".join([self.framework, *changed])

    @property
    def label(self) -> str:
        """A short name such as ``bs16x2`` or ``bs8x2x2w``."""
        text = f"bs{self.bs}"
        if self.accum > 1:
            text += f"x{self.accum}"
        if self.world > 1:
            text += f"x{self.world}w"
        return text

    def to_dict(self) -> dict[str, object]:
        """The fields as JSON has them: a choice as its plain string, a tuple as a list."""
        data = {name: value.value if isinstance(value, Choice) else value
                for name, value in asdict(self).items()}
        data["inject_overflow"] = list(self.inject_overflow)
        return data

    def replace(self, **changes: object) -> RunSpec:
        """This run with ``changes``, each checked by ``__post_init__`` whatever its type."""
        rebuild: Callable[..., RunSpec] = replace
        return rebuild(self, **changes)



# ``lrcheck trace`` and ``lrcheck.trace_schedule``: what a schedule-only run is when told nothing
# but its samples (the other fields are ``RunSpec``'s defaults). The task is a placeholder: a
# trace has no data, only ``samples`` per epoch.
TRACE_DEFAULTS = RunSpec(task="synthetic", bs=8, accum=1, epochs=1, device=Device.CPU)

def samples_per_epoch(spec: RunSpec) -> int:
    """A simulated schedule's training samples per epoch (``lrcheck trace``): ``spec.samples``,
    or the training split of a task of a fixed size, which has none."""
    return TASKS[spec.task].train_size() if spec.samples is None else spec.samples


def resumed_against_itself(spec: RunSpec) -> bool:
    """``spec`` resumes through its framework's own resume (``--framework ludwig --resume-at
    K``), whose reference is the same run uninterrupted rather than the big batch."""
    return spec.resume_at is not None and FRAMEWORKS[spec.framework].resumes
