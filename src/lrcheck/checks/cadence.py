"""``cadence``: how often, per optimizer update, each run called what shapes an update —
``zero_grad``, the gradient clipping, ``GradScaler.update``, the EMA — and how many of its
backward passes reached the update, compared update by update (``lrcheck record``'s counters,
``record.process.count_calls``).

The candidate legitimately runs accum× the backward passes of the reference (its micro-batches):
they are told, not judged. What is judged is per update: the share of the backward passes that
reach the update (a ``zero_grad`` between micro-batches drops the earlier ones; a missing one
lets the previous update's in), the clipping, the EMA and ``GradScaler.update`` calls (once per
update in the reference and 4 times in the candidate is a bug, whatever the micro-batches), the
clip's ``max_norm`` / ``clip_value``, and the optimizer state's own step counter (read after the
step, before lockstep loads the reference's state: each update's own increment). A window where
a GradScaler skipped steps covers 1 + skipped steps: its calls are counted per step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lrcheck.checks.status import FAIL, PASS, SKIP, CheckResult
from lrcheck.trace import RunTrace
from lrcheck.words import plural

# The calls judged per update: the key of the Recorder line, the name and verb in the detail
# (the EMA's named by the call that updates it: ``record.ema.KINDS``).
EMA_CALL = "AveragedModel.update_parameters"
CALLS = (("clip_grad_norm", "clip_grad_norm_", "ran"),
         ("clip_grad_value", "clip_grad_value_", "ran"),
         ("ema_update", f"the EMA ({EMA_CALL})", "was updated"),
         ("scaler_update", "GradScaler.update", "ran"))
SETTINGS = (("max_norm", "clip_grad_norm_'s max_norm", "clip_grad_norm"),
            ("clip_value", "clip_grad_value_'s clip_value", "clip_grad_value"))


@dataclass(frozen=True)
class _Gap:
    """What differs at one aligned update (``row``), and how much."""

    row: int
    size: float
    text: str


def check_cadence(ref: RunTrace, cand: RunTrace, pairs: tuple[np.ndarray, np.ndarray],
                  lockstep: bool = False, ema: str | None = None) -> CheckResult | None:
    """``cadence`` on the aligned updates ``pairs`` (None: neither run recorded it); the first
    update where anything judged differs fails, named with all that differs there. ``ema``: the
    call that updated the runs' EMA model (default ``EMA_CALL``)."""
    if ref.cadence is None and cand.cadence is None:
        return None
    if ref.cadence is None or cand.cadence is None:
        who = "reference" if ref.cadence is not None else "candidate"
        return CheckResult("cadence", SKIP, None, None,
                           f"not recorded: only the {who} recorded its calls per update")
    rows = [(int(i), int(j)) for i, j in zip(*pairs, strict=True)]
    if not rows:
        return CheckResult("cadence", SKIP, None, None, "no aligned update to compare")
    a = [_per_step(ref, i) for i, _ in rows]
    b = [_per_step(cand, j) for _, j in rows]
    calls = tuple((key, f"the EMA ({ema})" if ema and key == "ema_update" else name, verb)
                  for key, name, verb in CALLS)
    gaps = sorted(_reached(a, b, rows) + _calls(a, b, rows, calls) + _settings(a, b, rows)
                  + _step_counter(a, b, rows, lockstep), key=lambda g: g.row)
    info = _micro_batches(a, b)
    if gaps:
        first = gaps[0]
        there = [g.text for g in gaps if g.row == first.row]
        return CheckResult("cadence", FAIL, first.size, rows[first.row][0],
                           "; ".join(dict.fromkeys(there)) + f"; {info}")
    return CheckResult("cadence", PASS, 0.0, None,
                       _agree(a, b, len(rows), lockstep, calls) + f"; {info}")


def _per_step(trace: RunTrace, k: int) -> dict[str, float]:
    """Update ``k``'s cadence, its calls per optimizer step of its window (1 + the steps a
    GradScaler skipped since the previous update)."""
    assert trace.cadence is not None
    found = dict(trace.cadence[k])
    steps = 1 + (trace.skips[k] if trace.skips is not None else 0)
    for key in ("backward", "zero_grad", *(key for key, _, _ in CALLS)):
        if key in found:
            found[key] = found[key] / steps
    return found


def _when(diff: Sequence[bool], row: int, rows: Sequence[tuple[int, int]]) -> str:
    """``from update k`` where it differs at every update from then on, else how often."""
    k = rows[row][0]
    if all(diff[row:]):
        return f"from update {k}"
    return f"at {sum(diff)} of {plural(len(rows), 'update')}, first update {k}"


def _times(n: float) -> str:
    return f"{n:g} time{'s' * (n != 1)}"


def _reached(a: list[dict[str, float]], b: list[dict[str, float]],
             rows: Sequence[tuple[int, int]]) -> list[_Gap]:
    """The share of each update's backward passes that reach it (``reached`` / ``backward``)."""
    def share(c: dict[str, float]) -> float | None:
        if not c.get("backward") or "reached" not in c:
            return None
        return c["reached"] / c["backward"]

    shares = [(share(x), share(y)) for x, y in zip(a, b, strict=True)]
    diff = [s is not None and t is not None and not np.isclose(s, t, rtol=1e-12, atol=0.0)
            for s, t in shares]
    if not any(diff):
        return []
    row = diff.index(True)
    x, y, k = a[row], b[row], rows[row][0]
    when = _when(diff, row, rows)
    reached, backward = y["reached"], y["backward"]
    ref_all = x["reached"] == x["backward"]
    if ref_all and reached == 1 and backward > 1 and y.get("zero_grad", 0) >= backward:
        text = (f"zero_grad ran before every micro-batch of the candidate: only the last of "
                f"{backward:g} micro-batches reached the update ({when})")
    elif ref_all and reached < backward:
        text = (f"zero_grad ran between the candidate's micro-batches: only the last "
                f"{reached:g} of its {backward:g} backward passes reached update {k} ({when})")
    elif ref_all and reached > backward:
        passes = plural(int(reached - backward), "backward pass", "backward passes")
        text = (f"zero_grad did not run before the candidate's update {k}: {passes} before "
                f"its previous update reached it too, beside its own {backward:g} ({when})")
    else:
        text = (f"{reached:g} of {backward:g} backward passes reached update {k} in the "
                f"candidate, {x['reached']:g} of {x['backward']:g} in the reference ({when})")
    return [_Gap(row, abs(reached / backward - x["reached"] / x["backward"]), text)]


def _calls(a: list[dict[str, float]], b: list[dict[str, float]],
           rows: Sequence[tuple[int, int]], calls: Sequence[tuple[str, str, str]] = CALLS
           ) -> list[_Gap]:
    """The calls that must run as often per update in both runs."""
    gaps = []
    for key, name, verb in calls:
        diff = [key in x and key in y and x[key] != y[key] for x, y in zip(a, b, strict=True)]
        if not any(diff):
            continue
        row = diff.index(True)
        x, y = a[row], b[row]
        size = abs(y[key] - x[key])
        text = (f"{name} {verb} {_times(y[key])} per update in the candidate against {x[key]:g} in "
                f"the reference ({_when(diff, row, rows)})")
        # Where the counts change after the first update that differs (an EMA updated after
        # each step counts from the next update on), the next counts too.
        later = next((r for r in range(row + 1, len(rows)) if diff[r]
                      and (a[r][key], b[r][key]) != (x[key], y[key])), None)
        if later is not None:
            text += f", {b[later][key]:g} against {a[later][key]:g} from update {rows[later][0]}"
            x, y = a[later], b[later]
        every = y[key] == y.get("backward") and y[key] > 1 and x[key] == 1
        if every and key.startswith("clip"):
            text += ": clipping after every backward, not once per update"
            if "clip_norm" in x and "clip_norm" in y:
                text += (f" (the last call's pre-clip norm {y['clip_norm']:.4g} against "
                         f"{x['clip_norm']:.4g})")
        elif every:
            text += ": on every micro-batch, not once per update"
        gaps.append(_Gap(row, size, text))
    return gaps


def _settings(a: list[dict[str, float]], b: list[dict[str, float]],
              rows: Sequence[tuple[int, int]]) -> list[_Gap]:
    """The clip's threshold, where both runs clipped in the update."""
    gaps = []
    for key, name, calls in SETTINGS:
        diff = [key in x and key in y and x.get(calls, 0) > 0 and y.get(calls, 0) > 0
                and x[key] != y[key] for x, y in zip(a, b, strict=True)]
        if any(diff):
            row = diff.index(True)
            gaps.append(_Gap(row, abs(b[row][key] - a[row][key]),
                             f"{name} is {b[row][key]:g} in the candidate against "
                             f"{a[row][key]:g} in the reference ({_when(diff, row, rows)})"))
    return gaps


def _step_counter(a: list[dict[str, float]], b: list[dict[str, float]],
                  rows: Sequence[tuple[int, int]], lockstep: bool) -> list[_Gap]:
    """The optimizer state's own step counter after each update."""
    diff = [("opt_step" in x and "opt_step" in y and x["opt_step"] != y["opt_step"])
            for x, y in zip(a, b, strict=True)]
    if not any(diff):
        return []
    row = diff.index(True)
    x, y, k = a[row], b[row], rows[row][0]
    how = ("each update from the reference's state, as lockstep loads it: the candidate's own "
           "step moved it by " f"{y['opt_step'] - x['opt_step'] + 1:g} instead of 1"
           if lockstep and row > 0 else
           "its state was not the reference's: a fresh optimizer, or a checkpoint's state not "
           "loaded (Adam's bias correction restarts with it)")
    return [_Gap(row, abs(y["opt_step"] - x["opt_step"]),
                 f"the optimizer's own step counter is {y['opt_step']:g} after update {k} in the "
                 f"candidate, {x['opt_step']:g} in the reference "
                 f"({_when(diff, row, rows)}; {how})")]


def _micro_batches(a: list[dict[str, float]], b: list[dict[str, float]]) -> str:
    """The backward passes per update of both runs (their micro-batches), told, not judged."""
    def per_update(cadence: list[dict[str, float]]) -> str:
        counts = sorted({c["backward"] for c in cadence if "backward" in c})
        if not counts:
            return "?"
        if len(counts) == 1:
            return f"{counts[0]:g}"
        return f"{counts[0]:g} to {counts[-1]:g}"

    return (f"backward ran {per_update(b)} times per update in the candidate against "
            f"{per_update(a)} in the reference (the micro-batches; not judged)")


def _agree(a: list[dict[str, float]], b: list[dict[str, float]], n: int,
           lockstep: bool, calls: Sequence[tuple[str, str, str]] = CALLS) -> str:
    """What the two runs did alike, in words."""
    whole = all(c.get("reached") == c.get("backward") for c in (*a, *b))
    said = [f"at all {plural(n, 'update')}, "
            + ("every backward pass reached its update in both runs (zero_grad between updates)"
               if whole else "the same share of backward passes reached each update in both runs")]
    for key, name, _ in calls:
        counts = sorted({c[key] for c in a if key in c})
        if counts and counts[-1] > 0:
            said.append(f"{name} as often ({', '.join(f'{v:g}' for v in counts)} per update)")
    if any("opt_step" in x and "opt_step" in y for x, y in zip(a, b, strict=True)):
        said.append("the optimizer's step counter equal" + (" (each update's own, from the "
                                                            "reference's state)" if lockstep
                                                            else ""))
    return ", ".join(said)


# The counts every rank of a run must share with rank 0, per update: the key, its name in the
# detail. zero_grad calls themselves are not judged (where they act is ``reached``).
RANK_CALLS = (("backward", "backward"), *((key, name) for key, name, _ in CALLS[:2]),
              ("ema_update", "EMA update"), ("scaler_update", "GradScaler.update"))
_Row = dict[str, float]


def rank_cadence(cadences: Sequence[Sequence[_Row]]) -> tuple[int, str] | None:
    """Where a rank's calls per update first part from rank 0's (``cadences``: per rank, rank 0
    first, per update its counts): the update and all that parted there, in words; None where
    every rank made rank 0's calls."""
    base = cadences[0]
    found: list[tuple[int, int, str]] = []  # (update, rank, text)
    for rank, other in enumerate(cadences[1:], start=1):
        n = min(len(base), len(other))
        rows = [(k, k) for k in range(n)]
        for apart, text in _rank_items(rank):
            diff = [apart(x, y) for x, y in zip(base[:n], other[:n], strict=True)]
            if any(diff):
                k = diff.index(True)
                found.append((k, rank, f"{text(base[k], other[k], k)} ({_when(diff, k, rows)})"))
    if not found:
        return None
    first = min(found)
    return first[0], "; ".join(t for k, r, t in sorted(found) if (k, r) == first[:2])


def _rank_items(rank: int) -> list[tuple[Callable[[_Row, _Row], bool],
                                         Callable[[_Row, _Row, int], str]]]:
    """What a rank's update is judged on against rank 0's: whether it parts, and the words."""
    def count(key: str, name: str) -> tuple[Callable[[_Row, _Row], bool],
                                            Callable[[_Row, _Row, int], str]]:
        return (lambda x, y: key in x and key in y and x[key] != y[key],
                lambda x, y, k: f"rank {rank}'s {name} ran {_times(y[key])} per update against "
                                f"rank 0's {x[key]:g}")

    def setting(key: str, name: str, calls: str) -> tuple[Callable[[_Row, _Row], bool],
                                                          Callable[[_Row, _Row, int], str]]:
        return (lambda x, y: key in x and key in y and x.get(calls, 0) > 0
                and y.get(calls, 0) > 0 and x[key] != y[key],
                lambda x, y, k: f"rank {rank}'s {name} is {y[key]:g} against rank 0's {x[key]:g}")

    return [*(count(key, name) for key, name in RANK_CALLS),
            *(setting(key, name, calls) for key, name, calls in SETTINGS),
            (lambda x, y: "reached" in x and "reached" in y and x["reached"] != y["reached"],
             lambda x, y, k: f"{y['reached']:g} of rank {rank}'s {y.get('backward', 0):g} "
                             f"backward passes reached update {k}, {x['reached']:g} of "
                             f"{x.get('backward', 0):g} on rank 0"),
            (lambda x, y: "opt_step" in x and "opt_step" in y and x["opt_step"] != y["opt_step"],
             lambda x, y, k: f"rank {rank}'s optimizer step counter is {y['opt_step']:g} after "
                             f"update {k} against rank 0's {x['opt_step']:g}")]
