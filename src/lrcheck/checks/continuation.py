"""``continuation``: where one command ran several processes of a rank one after the other (a
resume: ``python train.py --stop-after 12 --save c.pt && python train.py --resume c.pt``), each
later process carried on where the one before it ended. ``record.folder`` joins them, in the
order they started, into one timeline; at each boundary, ``record.stages`` recorded where the
earlier process's training stood at its end and where the later one's stood before its first
update: the optimizer state's step counter, the scheduler's position (its ``last_epoch``) and
the fingerprint of the parameters.

A later process is a resume when it carried the optimizer's state or the schedule (its step
counter or its scheduler's position is the one the earlier process ended at), or, where it
keeps neither (SGD without momentum, no scheduler), the weights. Otherwise it is a new
training (a second stage: pretraining, then fine-tuning, with a fresh optimizer and
schedule): its updates follow the earlier ones in the timeline, and nothing is judged at the
boundary. In a resume, whatever was not carried fails, at the first update after the
boundary: a schedule restarted, an optimizer's state lost, weights not loaded. Whether a
sample was repeated or skipped is judged by ``data`` against the reference, update by update,
not here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lrcheck.checks.status import FAIL, PASS, CheckResult

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


def _ordinal(order: int) -> str:
    return ORDINALS[order] if order < len(ORDINALS) else f"{order + 1}th"


def carried(b: Boundary) -> dict[str, bool | None]:
    """Per item (``opt_step``, ``sched_epoch``, ``fingerprint``), whether the later process
    started where the earlier one ended (None: not known on both sides)."""
    before, after = b.before or {}, b.after or {}
    out: dict[str, bool | None] = {}
    for key in ("opt_step", "sched_epoch", "fingerprint"):
        x, y = before.get(key), after.get(key)
        out[key] = None if x is None or y is None else x == y
    if before.get("opt_step") == 0:  # an optimizer that keeps no step counter (SGD)
        out["opt_step"] = None
    return out


def is_resume(b: Boundary) -> bool:
    """Whether the later process resumed the earlier one's training (see the module's
    docstring), rather than starting a new one."""
    found = carried(b)
    if found["opt_step"] or found["sched_epoch"]:
        return True
    return (found["opt_step"] is None and found["sched_epoch"] is None
            and bool(found["fingerprint"]))


def _not_carried(b: Boundary) -> list[str]:
    """What the later process of a resume did not carry, in words."""
    found, before, after = carried(b), b.before or {}, b.after or {}
    who = f"the {_ordinal(b.order)} process (pid {b.pid})"
    prev = f"the {_ordinal(b.order - 1)} process's"
    k = b.update
    out = []
    if found["sched_epoch"] is False:
        x, y = before["sched_epoch"], after["sched_epoch"]
        how = ("restarted the schedule" if y == 0 else
               "set the schedule back" if y < x else "moved the schedule ahead")
        out.append(f"{who} {how} at update {k}: its step counter was {y}, {prev} ended at {x}")
    if found["opt_step"] is False:
        x, y = before["opt_step"], after["opt_step"]
        if y == 0:
            out.append(f"{who} lost the optimizer's state at update {k}: its step counter was 0 "
                       f"(a fresh optimizer, or its state_dict not loaded), {prev} ended at "
                       f"{x:g}")
        else:
            out.append(f"{who} started update {k} from another optimizer state: its step "
                       f"counter was {y:g}, {prev} ended at {x:g}")
    if found["fingerprint"] is False:
        out.append(f"{who} did not start update {k} from the weights {prev[:-2]} ended with "
                   "(the model's state_dict not loaded, or another checkpoint's)")
    return out


def _what_carried(b: Boundary) -> str:
    found, after = carried(b), b.after or {}
    said = [text for key, text in (
        ("fingerprint", "the weights"),
        ("opt_step", f"the optimizer's state (step counter {after.get('opt_step', 0):g})"
         if after.get("opt_step") is not None else ""),
        ("sched_epoch", f"the schedule (step {after.get('sched_epoch')})")) if found[key]]
    return ", ".join(said) + " carried"


def _free(b: Boundary, name: str) -> str:
    return (f"; lockstep followed the first process only: from update {b.update} the {name} "
            "ran free (a later process does not follow the reference)" if b.lockstep else "")


def check_continuation(name: str, boundaries: Sequence[Boundary]) -> CheckResult | None:
    """``continuation (name)``: the boundaries of the run's timeline judged (see the module's
    docstring); None where each rank ran one process."""
    if not boundaries:
        return None
    check = f"continuation ({name})"
    told = []
    for b in boundaries:
        if not is_resume(b):
            told.append(f"at update {b.update} a new training began (the {_ordinal(b.order)} "
                        f"process, pid {b.pid}: a fresh optimizer and schedule), a stage of "
                        f"its own, not judged as a resume{_free(b, name)}")
            continue
        problems = _not_carried(b)
        if problems:
            return CheckResult(check, FAIL, None, b.update,
                               "; ".join(problems) + f": the {name} did not resume where it "
                               f"stopped{_free(b, name)}")
        told.append(f"at update {b.update} the {_ordinal(b.order)} process (pid {b.pid}) "
                    f"resumed: {_what_carried(b)}{_free(b, name)}")
    return CheckResult(check, PASS, None, None,
                       f"rank 0's {len(boundaries) + 1} processes joined into one timeline; "
                       + "; ".join(told))
