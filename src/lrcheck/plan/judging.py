"""How a pair's effects are judged, and in what order its runs train: both decided here, once,
from the framework registry's flags (``plan.frameworks``), as data (docs/design.md, "How the
verdict is decided").

``judging_mode`` says whether the candidate's parameters and loss are judged in lockstep (each
candidate update from the reference's state), against a twin of the reference (the training's
own noise), or by the tolerance alone. ``run_order`` turns that into the runs to train — the
reference, the candidate, the twin — in order, with what each keeps or loads, and where they
run; ``runner.pair`` (in this process, or inside torchrun) and ``runner.rank`` (a
launched job) execute it, and nothing else decides it.

``recorded_judging`` decides the same for two recorded commands (``lrcheck run``, ``diff``):
in lockstep, in part (lockstep stopped, free-running after), or free-running; ``record.sides``,
``command_pair`` and ``checks.recorded`` read it.

Pure: it reads a run's fields and the registry, and imports no torch (``tests/plan``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypedDict

from lrcheck.plan.frameworks import FRAMEWORKS
from lrcheck.words import Word

REFERENCE, CANDIDATE, TWIN = "reference", "candidate", "twin"
ROLES = (REFERENCE, CANDIDATE)


class Run(Protocol):
    """What judging reads of a run (a ``spec.RunSpec``)."""

    @property
    def framework(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def optimizer(self) -> str: ...
    @property
    def samples(self) -> int | None: ...
    @property
    def world(self) -> int: ...


class Judging(Word):
    """How a pair's effects (``params``, ``loss``, ``metrics``) are judged: result.json's
    ``judging``."""

    LOCKSTEP = "lockstep"  # each candidate update computed from the reference's state
    TWIN = "twin"  # beyond the tolerance, against the reference's twin's own drift
    TOLERANCE = "tolerance"  # against the tolerance alone: no twin (--fast, or Ludwig)


# What two runs must share for one's state to be loaded into the other: the same model and
# optimizer, built the same way, in the same dtype.
SAME = ("task", "seed", "dtype", "optimizer", "samples")


def lockstep_reason(reference: Run, candidate: Run) -> str | None:
    """Why ``candidate`` cannot run in lockstep with ``reference``, or None when it can: both
    in a loop whose whole state lrcheck loads before each update (``Framework.loads_state``:
    lrcheck's own, unsharded), with the same model, optimizer and dtype. (A GradScaler stays
    each run's own: its skipped steps are checked exactly, by ``skipped-steps``.)"""
    # A sharded copy of lrcheck's own loop (FSDP) says why first: its reason is the precise one.
    runs = sorted((FRAMEWORKS[reference.framework], FRAMEWORKS[candidate.framework]),
                  key=lambda f: not f.own_loop)
    reason = next((f.no_lockstep for f in runs if f.no_lockstep is not None), None)
    if reason is not None:
        return reason
    for name in SAME:
        if getattr(reference, name) != getattr(candidate, name):
            return f"the runs differ in {name}: one's state does not fit the other"
    return None


def judging_mode(reference: Run, candidate: Run, noise_floor: bool = True) -> Judging:
    """How the effects of ``candidate`` against ``reference`` are judged: in lockstep wherever
    it can run so (``lockstep_reason``); else against a twin of the reference, where
    ``noise_floor`` (not ``--fast``) and lrcheck feeds the reference's framework its data and
    its model (not ``Framework.own_model``: a twin is its samples reversed and its weights one
    ulp apart); else by the tolerance alone."""
    if lockstep_reason(reference, candidate) is None:
        return Judging.LOCKSTEP
    if noise_floor and not FRAMEWORKS[reference.framework].own_model:
        return Judging.TWIN
    return Judging.TOLERANCE


def keeps_states(reference: Run) -> bool:
    """Whether ``reference`` records its optimizer's state after every update too: wherever a
    candidate could load it (``Framework.loads_state``), whatever this pair's candidate is, since
    a suite hands one trained reference to every pair that shares it. The memory estimate
    (``runner.preflight``) counts it."""
    return FRAMEWORKS[reference.framework].loads_state


class Where(Word):
    """Where a pair's runs train (``run_order``)."""

    HERE = "here"  # each run in this process, or launched through torchrun on its own
    ONE_JOB = "one torchrun job"  # the candidate's ranks, and its reference on rank 0
    IN_GROUP = "inside torchrun"  # lrcheck itself runs inside torchrun: on its ranks


# A ``Step`` in JSON (a rank's argv hands its step over).
class StepJson(TypedDict):
    role: str
    keep_states: bool
    lockstep: bool
    if_needed: bool


@dataclass(frozen=True)
class Step:
    """One run of a pair's order: ``role``; ``keep_states``: it records its optimizer's state
    after every update too (``keeps_states``); ``lockstep``: each of its updates starts from the
    reference's state; ``if_needed``: it trains only where the effects need the noise floor
    (``checks.needs_floor``: the twin)."""

    role: str
    keep_states: bool = False
    lockstep: bool = False
    if_needed: bool = False

    def to_dict(self) -> StepJson:
        return {"role": self.role, "keep_states": self.keep_states, "lockstep": self.lockstep,
                "if_needed": self.if_needed}

    @classmethod
    def from_dict(cls, data: StepJson) -> Step:
        return cls(str(data["role"]), bool(data["keep_states"]), bool(data["lockstep"]),
                   bool(data["if_needed"]))


@dataclass(frozen=True)
class RunOrder:
    """A pair's runs, in the order they train (``run_order``), how its effects are judged, and
    where the runs train."""

    judging: Judging
    where: Where
    steps: tuple[Step, ...]

    def step(self, role: str) -> Step | None:
        return next((s for s in self.steps if s.role == role), None)

    @property
    def in_job(self) -> tuple[Step, ...]:
        """What the candidate's torchrun job trains (``Where.ONE_JOB``): all but the twin, which
        trains afterwards, where the reference's states are."""
        return tuple(s for s in self.steps if s.role != TWIN)


def run_order(reference: Run, candidate: Run, noise_floor: bool = True, *,
              inside_torchrun: bool = False, reference_trained: bool = False) -> RunOrder:
    """The runs of a pair, in order, and where they train.

    The reference first (unless ``reference_trained``: a suite's cache holds it), keeping its
    optimizer's state where a candidate could load it; then the candidate, in lockstep with it
    where ``judging_mode`` says so; then, for ``Judging.TWIN``, the reference's twin, only where
    needed. Inside torchrun (``inside_torchrun``) every rank follows this order (the cache is
    one process's, so the reference trains again). A multi-process candidate with a
    single-process reference is one torchrun job, whose rank 0 trains the reference — before the
    candidate when the candidate runs in lockstep with it (its states go to every rank), else
    after it, as a bare torchrun script would."""
    judging = judging_mode(reference, candidate, noise_floor)
    where = (Where.IN_GROUP if inside_torchrun
             else Where.ONE_JOB if candidate.world > 1 and reference.world == 1
             else Where.HERE)
    train_reference = not reference_trained or where is Where.IN_GROUP
    ref = (Step(REFERENCE, keep_states=keeps_states(reference)),) if train_reference else ()
    cand = (Step(CANDIDATE, lockstep=judging is Judging.LOCKSTEP),)
    twin = (Step(TWIN, if_needed=True),) if judging is Judging.TWIN else ()
    first = where is not Where.ONE_JOB or judging is Judging.LOCKSTEP
    return RunOrder(judging, where, (*ref, *cand, *twin) if first else (*cand, *ref, *twin))


class Recorded(Word):
    """How two recorded runs' effects were judged (``recorded_judging``)."""

    LOCKSTEP = "lockstep"  # every update from the reference's state
    PARTIAL = "partial"  # in lockstep up to an update, then free-running
    FREE = "free"  # free-running throughout, from the parameter fingerprints


@dataclass(frozen=True)
class RecordedJudging:
    """How the effects of two recorded runs (``lrcheck diff``, ``lrcheck run``) are judged:
    ``mode``; ``through``: the last update judged in lockstep (-1: none); ``why``: why
    lockstep was off or stopped (None: it ran throughout). The updates after ``through``
    (``free_from`` on) are judged free-running, from the parameter fingerprints and gradient
    norms, against the reference command's twin where one ran; what neither judged is a
    warning that ``--strict`` fails (``checks.recorded``)."""

    mode: Recorded
    through: int = -1
    why: str | None = None

    @property
    def free_from(self) -> int | None:
        """The first update judged free-running (None: every update is judged in lockstep)."""
        return None if self.mode is Recorded.LOCKSTEP else self.through + 1

    def lead(self, updates: int) -> str:
        """How far lockstep judged ``updates`` updates, and why it stopped, in words."""
        if self.mode is Recorded.LOCKSTEP:
            return f"judged in lockstep at all {updates} updates"
        judged = "no update" if self.through < 0 else (
            f"{self.through + 1} update{'s' * (self.through > 0)} of {updates} "
            f"(0 to {self.through})")
        stop = (f"lockstep stopped after update {self.through}" if self.through >= 0
                else "lockstep off")
        return f"judged in lockstep at {judged}; {stop}: {self.why or 'not asked for'}"


def recorded_judging(compared: Sequence[int] | None, stopped: str | None = None,
                     free: str | None = None, resumed: int | None = None) -> RecordedJudging:
    """How two recorded runs' effects are judged, decided once from what was recorded:
    ``compared``, the updates the candidate's lockstep file holds (None: it has none, the runs
    were recorded apart, ``free`` saying why); ``stopped``, why lockstep stopped early (its
    file's last line); ``resumed``, the update of the candidate's timeline where a later
    process of it joined (a resume: ``record.folder``), which follows no reference, so that
    lockstep judged the updates before it only (the first process's from there on were
    trained again, or never kept). In lockstep where it compared updates and never stopped; in
    part where it stopped after some; else free-running."""
    if resumed is not None and compared is not None:
        reached = any(int(k) >= resumed - 1 for k in compared)  # up to the resume: its cause
        compared = [int(k) for k in compared if int(k) < resumed]
        if reached or stopped is None:
            stopped = (f"the candidate resumed in a later process at update {resumed}, which "
                       "runs free (a later process does not follow the reference)")
    if compared is None or not len(compared):
        return RecordedJudging(Recorded.FREE, -1, stopped or free)
    last = int(max(compared))
    if stopped is None:
        return RecordedJudging(Recorded.LOCKSTEP, last)
    return RecordedJudging(Recorded.PARTIAL, last, stopped)
