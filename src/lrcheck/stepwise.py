"""What a record folder says beyond its Recorder lines, as data for ``checks/``: what a
candidate recorded in lockstep with its reference (``record.lockstep``: per update and parameter
tensor, five norms measured after both runs made update k from the same state), where a later
process of a rank joined the timeline (``Boundary``, ``record.folder``) and an EMA model's
fingerprints (``EmaPrints``, ``record.folder.read_ema``). Pure: numpy only; ``record/`` reads
the files, ``checks/`` judges what they hold (``checks.lockstep``, ``checks.continuation``,
``checks.ema``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from lrcheck.errors import SpecError
from lrcheck.plan.judging import Recorded, RecordedJudging
from lrcheck.trace import RunTrace

# A candidate rank's lockstep file, in its record folder.
LINES = "lockstep-rank{rank}.jsonl"
# Per tensor and update, the candidate's line holds these numbers (float64): ‖g_c − g_r‖, ‖g_r‖,
# ‖p_c − p_r‖ after the update, ‖p_r − p_start‖ (the reference's own update), the norm of
# the parameters' unit in the last place (the rounding floor of a parameter's value), the dot
# products <g_c − g_r, g_r> and <p_c − p_r, p_r − p_start> (the part of a gap along the
# reference's own gradient or update: a scale, where rounding is nearly orthogonal to it), and
# how many coordinates' gradients are rounding noise (left out of the parameters' columns:
# ``record.lockstep._noise``), and Σ sign(ref_i)·Δ_i with Σ |ref_i| (``record.lockstep._along``:
# their ratio is a scale of the gap over the reference's own) for the gradient and the update;
# the indices of ``StepGaps.gaps``' last axis. A file of the first five columns (lrcheck before
# the rest) reads with the others 0.
COLUMNS = ("grad_diff", "grad_ref", "param_diff", "update_ref", "ulp", "grad_dot", "update_dot",
           "noise", "grad_along", "grad_l1", "update_along", "update_l1")
(GRAD_DIFF, GRAD_REF, PARAM_DIFF, UPDATE_REF, ULP, GRAD_DOT, UPDATE_DOT, NOISE, GRAD_ALONG,
 GRAD_L1, UPDATE_ALONG, UPDATE_L1) = range(len(COLUMNS))
FIRST_COLUMNS = 5


def widened(gaps: np.ndarray) -> np.ndarray:
    """``(updates, tensors, columns)`` gaps of the first ``FIRST_COLUMNS`` columns with the
    rest 0 (nothing along the reference's own, no noise coordinate); others as they are."""
    if gaps.ndim != 3 or gaps.shape[2] != FIRST_COLUMNS:
        return gaps
    return np.concatenate([gaps, np.zeros((*gaps.shape[:2], len(COLUMNS) - FIRST_COLUMNS))],
                          axis=2)


@dataclass(frozen=True)
class StepGaps:
    """``gaps[i, t]``: for update ``steps[i]`` and tensor ``names[t]``, ‖g_c − g_r‖, ‖g_r‖ (the
    gradients the update used), ‖p_c − p_r‖ after it, ‖p_r − p_start‖ (the reference's own
    update), ‖ulp(p_r)‖ and the rest of ``COLUMNS``. ``dtype``/``reference_dtype``: the
    parameters' types as recorded; ``compute``/``reference_compute``: the precision each run's
    update 0 computed in and what set it (``{"precision": "bfloat16", "why": "bf16 autocast on
    cpu"}``: ``record.precision``; None where not recorded); ``sizes``: each tensor's number of
    elements (empty where not recorded);
    ``init_gap``: ``max|Δp| / max|p|`` of the weights before update 0's step (None: not
    compared), and ``born_equal`` whether they were the same when each optimizer was made
    (None: not known);
    ``stopped``: why lockstep ended early, and after which update (``stopped_at``)."""

    names: tuple[str, ...]
    dtype: str
    reference_dtype: str | None
    steps: np.ndarray
    gaps: np.ndarray
    init_gap: float | None
    born_equal: bool | None = None
    stopped: str | None = None
    stopped_at: int | None = None
    compute: dict[str, object] | None = None
    reference_compute: dict[str, object] | None = None
    sizes: tuple[int, ...] = ()

    def before(self, k: int | None) -> StepGaps:
        """These gaps of the updates before ``k`` only (all where ``k`` is None): a resumed
        candidate's timeline leaves its first process's updates from ``k`` on out."""
        keep = self.steps < k if k is not None else np.ones(len(self.steps), dtype=bool)
        return self if keep.all() else replace(self, steps=self.steps[keep],
                                               gaps=self.gaps[keep])

    @classmethod
    def from_lines(cls, lines: Sequence[dict[str, Any]], source: str) -> StepGaps:
        """The lines of a ``lockstep-rank{R}.jsonl``: a header, one line per update, and a
        line saying why lockstep stopped where it did."""
        if not lines or "names" not in lines[0]:
            raise SpecError(f"{source}: not a lockstep file (no header line)")
        head = lines[0]
        names = tuple(str(n) for n in head["names"])
        rows = [line for line in lines[1:] if "step" in line]
        off = next((line for line in lines[1:] if "off" in line), None)
        gaps = np.array([line["gaps"] for line in rows], dtype=np.float64)
        if not rows:
            gaps = np.empty((0, len(names), len(COLUMNS)))
        gaps = widened(gaps)
        if gaps.ndim != 3 or gaps.shape[1:] != (len(names), len(COLUMNS)):
            raise SpecError(f"{source}: each update needs {len(COLUMNS)} numbers (or the first "
                            f"{FIRST_COLUMNS}) per parameter tensor ({len(names)} tensors)")
        scale = head.get("init_scale")
        init = head.get("init_gap")
        return cls(names, str(head.get("dtype")), head.get("reference_dtype"),
                   np.array([int(line["step"]) for line in rows], dtype=np.int64), gaps,
                   None if init is None else float(init) / max(float(scale or 0.0), 1e-300),
                   head.get("born_equal"),
                   None if off is None else str(off["off"]),
                   None if off is None or off.get("at") is None else int(off["at"]),
                   head.get("compute"), head.get("reference_compute"),
                   tuple(int(n) for n in head.get("sizes") or ()))


@dataclass(frozen=True)
class RecordedFacts:
    """What two record folders say beyond their Recorder lines, for ``checks.recorded``:
    the candidate's lockstep gaps (None: it ran free), how its effects are judged
    (``judging``: ``plan.judging.recorded_judging``), why the effects are not comparable
    (``stochastic``: dropout active), the reference's optimizer class name, and the reference
    command's twin where one ran (``twin``: its parameters nudged by one ulp at its first step,
    the floor of a free-running pair's drift);
    ``other_ranks``: the lockstep gaps of the candidate's ranks 1, 2, … (each rank loads the
    reference's state and compares its own update); ``held``: what the candidate held equal
    to the reference's beyond the data, in words (``record.tokens.read_held``); ``resumes``:
    where the candidate's later processes joined its timeline (``record.folder``)."""

    lockstep: StepGaps | None = None
    judging: RecordedJudging = RecordedJudging(Recorded.FREE)
    stochastic: str | None = None
    optimizer: str = ""
    twin: RunTrace | None = None
    other_ranks: tuple[StepGaps, ...] = ()
    held: str | None = None  # what was held equal beyond the data (GRPO's rollouts replayed)
    resumes: tuple[Boundary, ...] = ()  # where the candidate's later processes joined


ORDINALS = ("first", "second", "third", "fourth", "fifth")


@dataclass(frozen=True)
class Boundary:
    """Where a later process of rank 0 joins the timeline: its first update (in the timeline),
    its pid, its place among the rank's processes (1: the second), where the earlier process
    stood at its end (``before``) and where it stood before its first update (``after``):
    ``record.stages.standing``'s keys, None where not recorded; and whether it was a lockstep
    side (a later process runs free)."""

    update: int
    pid: int | None
    order: int
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    lockstep: bool = False
    ended: int | None = None  # the update count the earlier processes reached (None: update)
    worlds: tuple[int | None, int | None] = (None, None)  # the world sizes before it and from it

    @property
    def twice(self) -> str:
        """The updates trained twice (the resume restored an earlier checkpoint than where the
        earlier process stopped: ``record.restore``), in words; empty where none."""
        if self.ended is None or self.ended <= self.update:
            return ""
        k, e = self.update, self.ended - 1
        span = f"update {k} was" if k == e else f"updates {k}-{e} were"
        return (f"{span} trained twice: the resume restored the checkpoint of update {k - 1}, "
                f"the {ordinal(self.order - 1)} process had made {self.ended} updates (its "
                f"updates after update {k - 1} are left out of the comparison); ")


def ordinal(order: int) -> str:
    return ORDINALS[order] if order < len(ORDINALS) else f"{order + 1}th"


@dataclass(frozen=True)
class EmaPrints:
    """One run's EMA: its class (``name``), the call that updates it, its tensors' names, and
    per update ``k`` that was fingerprinted the EMA's fingerprint after it (rows of ``(sum,
    max|p|)``, one per tensor)."""

    name: str
    call: str
    names: tuple[str, ...]
    prints: dict[int, np.ndarray]
