"""The pair a comparison checks: the candidate under test and the reference it must train like
(``PairSpec``, which ``spec.compare_options.CompareOptions`` builds), two Recorder files
(``FilePair``), or two commands of a user's own training (``CommandPair``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lrcheck.errors import SpecError
from lrcheck.experiments.tasks import GENERATED_SAMPLES, TASKS
from lrcheck.plan.frameworks import FRAMEWORKS, PLAIN
from lrcheck.plan.judging import Judging, judging_mode
from lrcheck.plan.steps import batch_breakdown
from lrcheck.spec.choices import Dtype, LossNorm, Tail, at_least, one_of
from lrcheck.spec.resolve import Note, is_resolved, resolve
from lrcheck.spec.run import (
    DIFF_DTYPE,
    REFERENCE_POLICY,
    RunSpec,
    resumed_against_itself,
)
from lrcheck.spec.run_options import RunOptions, options_from_dict, options_to_dict
from lrcheck.spec.settings import SETTINGS
from lrcheck.spec.tolerances import ToleranceOverrides, Tolerances


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
    # What the runs were given and train with otherwise (``spec.resolve``): result.json's
    # ``notes``, shown by the report.
    notes: tuple[Note, ...] = ()

    def __post_init__(self) -> None:
        ref, cand = self.reference, self.candidate
        for role, spec in (("reference", ref), ("candidate", cand)):
            if not is_resolved(spec):
                raise SpecError(f"the {role}'s RunSpec is not resolved (--framework "
                                f"{spec.framework} trains otherwise): build the pair with "
                                "PairSpec.build, or pass spec.resolve(spec)[0]")
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
                  "device", "samples", "loss_norm", "amp", "inject_overflow", "deterministic"]
        if ref.framework == cand.framework:  # else each has its own end of epoch
            shared += ["tail", *(setting.name for setting in SETTINGS)]
        for name in shared:
            if getattr(ref, name) != getattr(cand, name):
                raise SpecError(
                    f"reference and candidate must share {name!r}: "
                    f"{getattr(ref, name)!r} != {getattr(cand, name)!r}"
                )

    @classmethod
    def build(cls, candidate: RunSpec, ref_bs: int | None = None, ref_world: int = 1,
              tolerances: Tolerances | ToleranceOverrides | None = None,
              ref_framework: str | None = None, noise_floor: bool = True) -> PairSpec:
        """The pair for ``candidate``, resolved (``spec.resolve``, its notes kept): the
        reference is the same run with ``bs = ref_bs`` (default: the candidate's effective
        batch over ``ref_world``), accum 1, policy ``per-update``, in ``ref_framework``
        (default: the candidate's; ``plain`` for ``--framework accelerate`` given the old way,
        as ``--policy accelerate``). ``tolerances``: whole, or overrides of the defaults of the
        candidate's dtype (the one it trains in)."""
        candidate, notes = resolve(candidate)
        at_least("--ref-nproc", ref_world, 1)
        if ref_bs is None:
            ref_bs = max(1, candidate.effective_batch // ref_world)
        at_least("--ref-bs", ref_bs, 1)
        framework = candidate.framework if ref_framework is None else ref_framework
        one_of("--ref-framework", framework, list(FRAMEWORKS))
        changes: dict[str, object] = {}
        if framework != candidate.framework:  # the reference keeps its own framework's defaults
            changes = {setting.name: setting.default for setting in SETTINGS}
        if framework == candidate.framework and resumed_against_itself(candidate):
            # The framework's own resume, checked against the same run without it.
            reference = candidate.replace(resume_at=None)
        else:
            reference = candidate.replace(bs=ref_bs, accum=1, world=ref_world,
                                          policy=REFERENCE_POLICY, resume_at=None,
                                          resume_at_micro=None, framework=framework, **changes)
        reference, ref_notes = resolve(reference, "--ref-framework")
        if not isinstance(tolerances, Tolerances):
            tolerances = (tolerances or ToleranceOverrides()).over(candidate.dtype, candidate.amp)
        return cls(reference, candidate, tolerances, noise_floor,
                   notes + tuple(n for n in ref_notes if n not in notes))

    @property
    def judging(self) -> Judging:
        """How the pair's effects are judged: ``plan.judging.judging_mode``."""
        return judging_mode(self.reference, self.candidate, self.noise_floor)

    @property
    def name(self) -> str:
        """A file-system-safe name for the pair, e.g. ``digits-cosine-bs16x2-vs-bs32``."""
        cand = self.candidate
        parts = [cand.task, _safe(cand.scheduler), cand.label]
        if cand.framework != PLAIN:
            parts.append(cand.framework)
        if cand.policy != REFERENCE_POLICY:
            parts.append(cand.policy)
        if cand.tail != Tail.DROP:
            parts.append(f"tail-{cand.tail}")
        if cand.loss_norm != LossNorm.GLOBAL:
            parts.append(f"norm-{cand.loss_norm}")
        if cand.dtype != Dtype.FLOAT64:
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
        for setting in SETTINGS:
            if getattr(cand, setting.name) != setting.default:
                parts.append(setting.mark.format(getattr(cand, setting.name)))
        ref = self.reference
        against = ref.label if ref.framework == cand.framework else f"{ref.framework}-{ref.label}"
        return "-".join(parts) + f"-vs-{against}"

    def to_dict(self) -> dict[str, object]:
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
        """E.g. ``cand-vs-ref`` for ``ref.jsonl`` and ``cand.jsonl``; ``cand-tb-vs-ref-tb`` for
        ``ref/tb`` and ``cand/tb`` (where the names are the same, their folders')."""
        paths = [Path(p) for p in (self.candidate, self.reference)]
        stems = [_safe(p.stem) for p in paths]
        if stems[0] == stems[1]:
            stems = [_safe(f"{p.parent.name}-{p.stem}") if p.parent.name else stem
                     for p, stem in zip(paths, stems, strict=True)]
        return "-vs-".join(stems)

    def to_dict(self) -> dict[str, object]:
        return {"reference": self.reference, "candidate": self.candidate,
                "tolerances": asdict(self.tolerances)}


@dataclass(frozen=True)
class CommandPair:
    """A suite's pair of a user's own commands (``ref_command`` and ``command``), each a quoted
    command line that ``lrcheck run`` records and diffs with ``options``, every option of
    ``lrcheck run`` (``RunOptions``). It has no noise floor of lrcheck's own: the commands run
    as they are."""

    reference: str
    candidate: str
    options: RunOptions = field(default_factory=RunOptions)

    noise_floor = False

    @property
    def tolerances(self) -> Tolerances:
        return self.options.tolerances

    def to_dict(self) -> dict[str, object]:
        return {"kind": "commands", "ref_command": self.reference, "command": self.candidate,
                **options_to_dict(self.options)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommandPair:
        return cls(data["ref_command"], data["command"], options_from_dict(data))


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

