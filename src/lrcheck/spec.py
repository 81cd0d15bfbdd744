"""Frozen specs: built once from flags (or a suite file), validated, and carried unchanged to the
runner, the checks, the report and ``result.json``.

Nothing here imports torch: ``lrcheck --help`` and spec validation stay fast.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from lrcheck.errors import SpecError
from lrcheck.experiments.schedulers import SCHEDULERS, is_factory_ref
from lrcheck.experiments.tasks import GENERATED_SAMPLES, MIN_SAMPLES, TASKS
from lrcheck.plan.frameworks import FRAMEWORKS, PLAIN
from lrcheck.plan.policies import POLICIES
from lrcheck.plan.steps import batch_breakdown

TAILS = ("drop", "flush", "carry")
LOSS_NORMS = ("global", "mean")
DTYPES = ("float64", "float32")
DEVICES = ("auto", "cpu", "cuda")
AMPS = ("off", "fp16")
OPTIMIZERS = ("sgd", "adamw")
# --trainer-loss: how the Transformers Trainer scales a micro-batch's loss. ``mean``: the model's
# forward takes no ``num_items_in_batch`` (a model of one's own), so the Trainer divides each
# micro-batch's mean by the micro-batches in the window; ``num-items``: the forward takes it and
# sums over the window's items (transformers' models, trainer.py ``_get_num_items_in_batch``).
TRAINER_LOSSES = ("mean", "num-items")
# --lightning-sampler: ``distributed``, Lightning's default (use_distributed_sampler=True): it
# wraps lrcheck's sampler in a DistributedSampler, which pads uneven ranks; ``own``: every rank
# gets its own share of lrcheck's order (use_distributed_sampler=False).
LIGHTNING_SAMPLERS = ("distributed", "own")
# Settings that only some frameworks have: (flag, default, the frameworks it applies to).
_FRAMEWORK_SETTINGS = {
    "drop_last": ("--drop-last", False, ("transformers", "lightning")),
    "trainer_loss": ("--trainer-loss", "mean", ("transformers",)),
    "even_batches": ("--no-even-batches", True, ("transformers", "accelerate")),
    "lightning_sampler": ("--lightning-sampler", "distributed", ("lightning",)),
}

REFERENCE_POLICY = "per-update"
# Seconds a multi-process run may go without finishing an update: ``lrcheck compare --timeout``
# and ``lrcheck.compare(timeout=...)``.
DEFAULT_TIMEOUT_S = 300.0
# ``lrcheck trace`` and ``lrcheck.trace_schedule``: what a schedule-only run is when told nothing
# but its samples (the other fields are ``RunSpec``'s). The task is a placeholder: a trace has no
# data, only ``samples`` per epoch.
TRACE_DEFAULTS: dict[str, Any] = {"task": "synthetic", "bs": 8, "accum": 1, "epochs": 1,
                                  "device": "cpu"}
# A Recorder file does not say its dtype; users mostly train in float32 (or lower), so ``lrcheck
# diff`` allows float32's loss tolerance unless told otherwise.
DIFF_DTYPE = "float32"


def _one_of(flag: str, value: str, choices: tuple[str, ...] | list[str]) -> None:
    if value not in choices:
        raise SpecError(f"{flag} {value!r} is not known; choose one of: {', '.join(choices)}")


def _at_least(flag: str, value: int, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise SpecError(f"{flag} must be a whole number >= {low}, got {value!r}")


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
    optimizer: str = "sgd"
    policy: str = REFERENCE_POLICY
    tail: str = "drop"
    loss_norm: str = "global"
    seed: int = 0
    dtype: str = "float64"
    device: str = "auto"
    samples: int | None = None
    amp: str = "off"
    inject_overflow: tuple[int, ...] = ()
    resume_at: int | None = None
    resume_at_micro: int | None = None
    framework: str = PLAIN
    drop_last: bool = False
    trainer_loss: str = "mean"
    even_batches: bool = True
    lightning_sampler: str = "distributed"
    # The noise-floor twin of a reference (never typed by a user): the same run with each
    # update's samples fed in reverse order and every initial weight one unit in the last
    # place higher, so it differs from the reference by rounding alone (checks.check_effect).
    twin: bool = False

    def __post_init__(self) -> None:
        if self.policy == "accelerate":  # the spelling before --framework
            warnings.warn("--policy accelerate is now --framework accelerate (against "
                          "--ref-framework plain, as before)", FutureWarning, stacklevel=3)
            object.__setattr__(self, "policy", REFERENCE_POLICY)
            object.__setattr__(self, "framework", "accelerate")
        _one_of("--task", self.task, list(TASKS))
        _at_least("--bs", self.bs, 1)
        _at_least("--accum", self.accum, 1)
        _at_least("--nproc", self.world, 1)
        _at_least("--epochs", self.epochs, 1)
        self._check_samples()
        _at_least("--seed", self.seed, 0)
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
        _one_of("--optimizer", self.optimizer, OPTIMIZERS)
        _one_of("--policy", self.policy, list(POLICIES))
        _one_of("--tail", self.tail, TAILS)
        self._check_framework()
        _one_of("--loss-norm", self.loss_norm, LOSS_NORMS)
        _one_of("--dtype", self.dtype, DTYPES)
        _one_of("--device", self.device, DEVICES)
        _one_of("--amp", self.amp, AMPS)
        object.__setattr__(self, "inject_overflow", tuple(self.inject_overflow))
        for k in self.inject_overflow:
            _at_least("--inject-overflow", k, 0)
        if self.amp == "fp16" and self.dtype != "float32":
            raise SpecError("--amp fp16 autocasts float32 to float16; add --dtype float32")
        for flag, value in (("--resume-at", self.resume_at),
                            ("--resume-at-micro", self.resume_at_micro)):
            if value is not None:
                _at_least(flag, value, 0)
        if self.resume_at is not None and self.resume_at_micro is not None:
            raise SpecError("give --resume-at or --resume-at-micro, not both")
        if self.inject_overflow and self.amp != "fp16":
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
        _at_least("--samples", self.samples, MIN_SAMPLES)
        if task.generated and self.samples < task.min_samples:
            raise SpecError(f"--samples must be a whole number >= {task.min_samples} for --task "
                            f"{self.task}: its test split, a fifth of the samples, holds each "
                            f"class; got {self.samples!r}")

    def _check_framework(self) -> None:
        """The framework is known, its settings apply to it, and what lrcheck's own loop alone
        does (policies, resume, AMP) is asked of that loop only."""
        _one_of("--framework", self.framework, list(FRAMEWORKS))
        _one_of("--trainer-loss", self.trainer_loss, TRAINER_LOSSES)
        _one_of("--lightning-sampler", self.lightning_sampler, LIGHTNING_SAMPLERS)
        for name, (flag, default, frameworks) in _FRAMEWORK_SETTINGS.items():
            if getattr(self, name) != default and self.framework not in frameworks:
                raise SpecError(f"{flag} applies to --framework {' or '.join(frameworks)}, "
                                f"not {self.framework}")
        if self.framework == PLAIN:
            return
        framework = FRAMEWORKS[self.framework]
        own_loop = [("--policy", self.policy, REFERENCE_POLICY), ("--amp", self.amp, "off"),
                    ("--resume-at-micro", self.resume_at_micro, None)]
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
        if framework.dtype is not None:
            # The framework trains in this type whatever it is asked (Ludwig: float32): the
            # run's spec, its report and its tolerances say so.
            object.__setattr__(self, "dtype", framework.dtype)
        if framework.owns_epoch:
            # The framework ends each epoch itself; lrcheck feeds it every sample of the epoch.
            if self.tail == "carry":
                raise SpecError(f"--framework {self.framework} ends each epoch itself: --tail "
                                "carry does not apply (see --drop-last)")
            object.__setattr__(self, "tail", "flush")
        if framework.schedulers is not None and self.scheduler not in framework.schedulers:
            raise SpecError(f"--framework {self.framework} runs its own schedules; --scheduler "
                            f"{self.scheduler!r} has none there: choose one of "
                            f"{', '.join(framework.schedulers)}")

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
        changed = [f"{flag.removeprefix('--')}"
                   + ("" if isinstance(default, bool) else f" {getattr(self, name)}")
                   for name, (flag, default, _) in _FRAMEWORK_SETTINGS.items()
                   if getattr(self, name) != default]
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

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["inject_overflow"] = list(self.inject_overflow)
        return data

    def replace(self, **changes: Any) -> RunSpec:
        return replace(self, **changes)


# (params, loss) relative tolerances per dtype. float32 is calibrated: over 16 pairs (4 tasks x
# sgd/adamw x accum 2/4, 5 epochs) the largest differences measured were 2.6e-6 (params) and
# 1.9e-5 (loss), so the defaults leave a margin of about 40x (README, "Tolerances").
_DTYPE_TOL = {"float64": (1e-9, 1e-9), "float32": (1e-4, 1e-3)}
# --amp fp16 (float16 autocast): over 4 pairs (digits accum 2/4, breast-cancer, adamw; 5 epochs)
# the largest differences measured were 1.0e-2 (params) and 5.9e-3 (loss): about 5x margin.
_AMP_TOL = {"fp16": (5e-2, 3e-2)}


@dataclass(frozen=True)
class Tolerances:
    """What each check allows. ``lr``: absolute, scaled by ``max(1, |lr|)``; ``params`` and
    ``loss``: relative; ``metrics``: absolute on accuracy and macro-F1."""

    lr: float = 1e-12
    params: float = 1e-9
    loss: float = 1e-9
    metrics: float = 0.01

    @classmethod
    def for_dtype(cls, dtype: str, amp: str = "off", **overrides: float | None) -> Tolerances:
        """Defaults for ``dtype`` (and ``amp``) with any non-None override applied."""
        _one_of("--dtype", dtype, DTYPES)
        params, loss = _AMP_TOL.get(amp) or _DTYPE_TOL[dtype]
        base: dict[str, float] = {"params": params, "loss": loss}
        base.update({k: v for k, v in overrides.items() if v is not None})
        tol = cls(**base)
        for name, value in asdict(tol).items():
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise SpecError(f"--tol-{name} must be a number >= 0, got {value!r}")
        return tol


@dataclass(frozen=True)
class PairSpec:
    """The candidate under test and the reference it must train like."""

    reference: RunSpec
    candidate: RunSpec
    tolerances: Tolerances = field(default_factory=Tolerances)
    # Where the candidate cannot run in lockstep with the reference (a framework's own loop),
    # its parameters and loss are judged against a twin of the reference trained for the noise
    # floor; False (``--fast``) skips that run and judges them against the tolerances alone.
    noise_floor: bool = True

    def __post_init__(self) -> None:
        ref, cand = self.reference, self.candidate
        task = TASKS[cand.task]
        if not task.generated and cand.samples is not None:
            generated = " or ".join(name for name, t in TASKS.items() if t.generated)
            raise SpecError(f"--samples {cand.samples} does not apply to --task {cand.task}, "
                            f"which has a fixed size ({task.size} samples); --samples sizes "
                            f"--task {generated}")
        if ref.effective_batch != cand.effective_batch:
            given = (f"--ref-bs {ref.bs} · --ref-nproc {ref.world} = {ref.effective_batch}"
                     if ref.world > 1 else f"--ref-bs {ref.bs}")
            fix = (f"set --ref-bs {cand.effective_batch // ref.world}"
                   if cand.effective_batch % ref.world == 0
                   else f"no --ref-bs matches with --ref-nproc {ref.world}")
            raise SpecError(f"{given} differs from the candidate's effective batch, "
                            f"{batch_breakdown(cand.bs, cand.accum, cand.world)}; {fix}")
        if not task.generated and cand.effective_batch > task.train_size():
            # Told here, in the candidate's flags: the runner checks each run's plan against its
            # data too, but the reference's first, whose batch the user did not type.
            raise SpecError(f"the training set of --task {cand.task} has {task.train_size()} "
                            "samples, fewer than one effective batch "
                            f"({batch_breakdown(cand.bs, cand.accum, cand.world)}); lower --bs "
                            "or --accum")
        if resumed_against_itself(cand) and ref == cand.replace(resume_at=None):
            pass  # the framework's own resume against the same run uninterrupted
        elif ref.accum != 1 or ref.policy != REFERENCE_POLICY:
            raise SpecError(
                f"the reference must run accum 1 with policy {REFERENCE_POLICY!r}, "
                f"got accum {ref.accum!r}, policy {ref.policy!r}"
            )
        for one, other in ((ref, cand), (cand, ref)):
            if FRAMEWORKS[one.framework].own_model and other.framework != one.framework:
                raise SpecError(f"--framework {one.framework} builds its own model and data "
                                f"order: compare it with itself, not with {other.framework} "
                                f"(--ref-framework {one.framework})")
        shared = ["task", "epochs", "scheduler", "warmup", "lr", "optimizer", "seed", "dtype",
                  "device", "samples", "loss_norm", "amp", "inject_overflow"]
        if ref.framework == cand.framework:  # else each has its own end of epoch
            shared += ["tail", *_FRAMEWORK_SETTINGS]
        for name in shared:
            if getattr(ref, name) != getattr(cand, name):
                raise SpecError(
                    f"reference and candidate must share {name!r}: "
                    f"{getattr(ref, name)!r} != {getattr(cand, name)!r}"
                )

    @classmethod
    def build(cls, candidate: RunSpec, ref_bs: int | None = None, ref_world: int = 1,
              tolerances: Tolerances | None = None,
              ref_framework: str | None = None, noise_floor: bool = True) -> PairSpec:
        """The pair for ``candidate``: the reference is the same run with ``bs = ref_bs``
        (default: the candidate's effective batch over ``ref_world``), accum 1, policy
        ``per-update``, in ``ref_framework`` (default: the candidate's; ``plain`` for
        ``--framework accelerate`` given the old way, as ``--policy accelerate``)."""
        _at_least("--ref-nproc", ref_world, 1)
        if ref_bs is None:
            ref_bs = max(1, candidate.effective_batch // ref_world)
        _at_least("--ref-bs", ref_bs, 1)
        framework = candidate.framework if ref_framework is None else ref_framework
        _one_of("--ref-framework", framework, list(FRAMEWORKS))
        changes: dict[str, Any] = {}
        if framework != candidate.framework:  # the reference keeps its own framework's defaults
            changes = {name: default for name, (_, default, _) in _FRAMEWORK_SETTINGS.items()}
        if framework == candidate.framework and resumed_against_itself(candidate):
            # The framework's own resume, checked against the same run without it.
            reference = candidate.replace(resume_at=None)
        else:
            reference = candidate.replace(bs=ref_bs, accum=1, world=ref_world,
                                          policy=REFERENCE_POLICY, resume_at=None,
                                          resume_at_micro=None, framework=framework, **changes)
        return cls(reference, candidate,
                   tolerances or Tolerances.for_dtype(candidate.dtype, candidate.amp),
                   noise_floor)

    @property
    def name(self) -> str:
        """A file-system-safe name for the pair, e.g. ``digits-cosine-bs16x2-vs-bs32``."""
        cand = self.candidate
        parts = [cand.task, _safe(cand.scheduler), cand.label]
        if cand.framework != PLAIN:
            parts.append(cand.framework)
        if cand.policy != REFERENCE_POLICY:
            parts.append(cand.policy)
        if cand.tail != "drop":
            parts.append(f"tail-{cand.tail}")
        if cand.loss_norm != "global":
            parts.append(f"norm-{cand.loss_norm}")
        if cand.dtype != "float64":
            parts.append(cand.dtype)
        # Every other setting that differs from its default, so that different pairs do not
        # share a report folder.
        default = RunSpec()
        marks = {"epochs": "e{}", "optimizer": "{}", "lr": "lr{:g}", "warmup": "warmup{:g}",
                 "seed": "seed{}", "samples": "n{}", "amp": "{}", "device": "{}",
                 "resume_at": "resume{}", "resume_at_micro": "resume-micro{}"}
        for field_name, mark in marks.items():
            value = getattr(cand, field_name)
            if field_name == "samples":
                if value is not None and value != GENERATED_SAMPLES:
                    parts.append(mark.format(value))
            elif value != getattr(default, field_name):
                parts.append(mark.format(value))
        if cand.inject_overflow:
            parts.append("overflow" + ".".join(map(str, cand.inject_overflow)))
        settings = {"drop_last": "drop-last", "trainer_loss": "loss-{}",
                    "even_batches": "uneven", "lightning_sampler": "sampler-{}"}
        for field_name, mark in settings.items():
            if getattr(cand, field_name) != getattr(default, field_name):
                parts.append(mark.format(getattr(cand, field_name)))
        ref = self.reference
        against = ref.label if ref.framework == cand.framework else f"{ref.framework}-{ref.label}"
        return "-".join(parts) + f"-vs-{against}"

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference.to_dict(), "candidate": self.candidate.to_dict(),
                "tolerances": asdict(self.tolerances)}


@dataclass(frozen=True)
class FilePair:
    """``lrcheck diff``: two Recorder files, the reference and the candidate, by path. It stands
    where a ``PairSpec`` stands in a report of runs lrcheck trained itself."""

    reference: str
    candidate: str
    tolerances: Tolerances = field(default_factory=lambda: Tolerances.for_dtype(DIFF_DTYPE))

    @property
    def name(self) -> str:
        """E.g. ``cand-vs-ref`` for ``ref.jsonl`` and ``cand.jsonl``."""
        stems = (_safe(Path(p).stem) for p in (self.candidate, self.reference))
        return "-vs-".join(stems)

    def to_dict(self) -> dict[str, Any]:
        return {"reference": self.reference, "candidate": self.candidate,
                "tolerances": asdict(self.tolerances)}


def samples_per_epoch(spec: RunSpec) -> int:
    """A simulated schedule's training samples per epoch (``lrcheck trace``): ``spec.samples``,
    or the training split of a task of a fixed size, which has none."""
    return TASKS[spec.task].train_size() if spec.samples is None else spec.samples


def resumed_against_itself(spec: RunSpec) -> bool:
    """``spec`` resumes through its framework's own resume (``--framework ludwig --resume-at
    K``), whose reference is the same run uninterrupted rather than the big batch."""
    return spec.resume_at is not None and FRAMEWORKS[spec.framework].resumes


def reference_framework(policy: str, ref_framework: str | None) -> str | None:
    """``PairSpec.build``'s ``ref_framework`` for a candidate given ``policy`` and, maybe,
    ``--ref-framework``: ``--policy accelerate``, the spelling before ``--framework``, compared
    Accelerate with lrcheck's own loop, and still does."""
    if ref_framework is None and policy == "accelerate":
        return PLAIN
    return ref_framework


def _safe(text: str) -> str:
    keep = [c if c.isalnum() or c in "-_." else "_" for c in text.rsplit("/", 1)[-1]]
    return "".join(keep).strip("_.") or "custom"
