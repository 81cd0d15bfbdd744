"""Where a resumed process joins its rank's timeline: at the update its checkpoint was saved
after, not where the interrupted process stopped. A checkpoint is saved every K updates; a
preemption lands anywhere, so the updates the interrupted process made after its last
checkpoint are trained twice: once by it, once by the resumed process. The resumed process is
aligned by what it restored: its first optimizer state's step counter before its first update
(``record.stages``'s ``start``), matched with the step counter each update of the earlier
process ended with (the Recorder line's ``opt_step``); where the optimizer keeps none or it
was not restored (0), its scheduler's position, matched with the earlier process's positions
(its ``start`` plus the ``scheduler.step()`` calls counted per update); where neither was
restored, the data position: the earlier update k > 0 whose samples the resumed process's first
update trains again (at k = 0 it is a new stage on the same data). The judged timeline
continues from that restore point: the earlier process's updates after it are left out
(``record.folder.join``) and said (``checks.continuation``). A later process that continued
the window the earlier one was stopped in, with its gradients (``continued``), has that
window's first micro-batches put back into its first update (``window_continued``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The fingerprints of the global RNGs in a Recorder line (``record.stages.rng_prints``).
RNGS = ("rng", "rng_numpy", "rng_python")
# A Recorder line, or where a process stood (``record.stages``), as JSON reads it back.
Line = dict[str, Any]


@dataclass(frozen=True)
class Restore:
    """Where a later process joins: ``at`` (the first of the earlier process's updates left
    out, in the earlier process's own numbering; ``len(earlier)``: none) and where the earlier
    process's training stood there (``record.stages.standing``'s keys, None where unknown)."""

    at: int
    standing: dict[str, Any] | None
    start: dict[str, Any] | None = None  # the later process's ``start``, its ``rng`` added


def drawn(lines: list[dict[str, Any]], at: int, first: dict[str, Any] | None
          ) -> tuple[dict[str, int], dict[str, int]]:
    """The global RNGs as each side drew them at update ``at`` (``RNGS``: torch's,
    NumPy's, Python's ``random``'s fingerprints, ``record.stages.rng_prints``, read at the
    update's step): the earlier process's (a stream left out where it did not make update
    ``at``, or that stream did not move at each of its updates: a training that draws from it
    at every update, dropout or an augmentation, is judged; one whose draws are rarer is not)
    and the later process's ``first`` update's."""
    before: dict[str, int] = {}
    after: dict[str, int] = {}
    for key in RNGS:
        prints = [p for p in (line.get(key) for line in lines) if isinstance(p, int)]
        if len(prints) == len(lines) > max(1, at) and all(
                a != b for a, b in zip(prints, prints[1:], strict=False)):
            before[key] = prints[at]
        if first is not None and isinstance(first.get(key), int):
            after[key] = first[key]
    return before, after


def positions(lines: list[dict[str, Any]], start: dict[str, Any] | None,
              end: dict[str, Any] | None) -> list[int | None]:
    """The scheduler's position after each update of a process and the ``scheduler.step()``
    calls that followed it before the next (the last: its ``end``); None where not known.
    ``start`` is read in the first update's pre-hook, after the calls its line counts."""
    begun = (start or {}).get("sched_epoch")
    out: list[int | None] = []
    for k in range(len(lines)):
        if k + 1 == len(lines):
            out.append((end or {}).get("sched_epoch"))
            continue
        steps = [line.get("scheduler_steps") for line in lines[1:k + 2]]
        known = isinstance(begun, int) and all(isinstance(s, int) for s in steps)
        out.append(begun + sum(steps) if known else None)  # type: ignore[operator,arg-type]
    return out


def _trusted_end(lines: list[dict[str, Any]], end: dict[str, Any] | None
                 ) -> dict[str, Any] | None:
    """``end``, unless it is older than the process's last update: a process killed (SIGKILL,
    or SIGTERM without a handler) never wrote its description at exit, and the last one it
    wrote (at its first update) is not where it stopped."""
    last = lines[-1].get("opt_step") if lines else None
    step = (end or {}).get("opt_step")
    if isinstance(last, (int, float)) and isinstance(step, (int, float)) and last != step:
        return None
    return end


def _fed(line: dict[str, Any]) -> tuple[int, ...] | None:
    """The identities of the samples behind an update, in order (``record.taps``' row hashes,
    as ``recorder.read_records`` unpacks them, whatever its micro-batches); None where the taps
    saw none."""
    fed = line.get("fed")
    return tuple(int(i) for ids in fed for i in ids) if fed else None


def _by_data(lines: list[dict[str, Any]], first: dict[str, Any] | None) -> int | None:
    """The last earlier update k > 0 fed the samples the later process's ``first`` update was
    fed: the data position it restored."""
    wanted = None if first is None else _fed(first)
    found = [k for k, line in enumerate(lines) if k and wanted and _fed(line) == wanted]
    return found[-1] if found else None


def restore_point(lines: list[dict[str, Any]], earlier: dict[str, Any],
                  later: dict[str, Any], first: dict[str, Any] | None = None) -> Restore:
    """Where the process described by ``later`` (its first Recorder line ``first``) joins after
    the one described by ``earlier`` (its Recorder lines ``lines``): see the module's
    docstring. Where nothing matches, after the earlier process's last update (its ``end``),
    which ``checks.continuation`` judges."""
    end = _trusted_end(lines, earlier.get("end"))
    after = later.get("start") or {}
    made = continued(len(lines), end, after, first)
    whole = Restore(len(lines), end, _rng(later.get("start"), drawn(lines, len(lines), first)[1]
                                          | ({"continued": made} if made else {})))
    if not lines:
        return whole
    counter = after.get("opt_step")
    at = positions(lines, earlier.get("start"), end)
    places: list[Any] = []
    wanted: object = None
    if isinstance(counter, (int, float)) and counter > 0:
        places, wanted = [line.get("opt_step") for line in lines], float(counter)
    elif isinstance(after.get("sched_epoch"), int):
        places, wanted = at, after["sched_epoch"]
    found = [k + 1 for k, value in enumerate(places) if value == wanted]
    if len(found) > 1:  # the position repeats (a schedule stepped once an epoch)
        found = _tie(lines, found, after, first)
    if not found:  # neither restored: the data position, where it was
        found = [k for k in [_by_data(lines, first)] if k is not None]
    if not found or (found[-1] == len(lines) and end is not None):
        return whole
    k = found[-1]
    free = earlier.get("lockstep") is None  # in lockstep its weights became the reference's
    before, after = drawn(lines, k, first)
    return Restore(k, {"opt_step": lines[k - 1].get("opt_step"), "sched_epoch": at[k - 1],
                       "fingerprint": lines[k - 1].get("fingerprint") if free else None,
                       **before}, _rng(later.get("start"), after))


def _tie(lines: list[Line], found: list[int], start: Line, first: Line | None) -> list[int]:
    """Of the updates ``found`` after which the position restored stood (a scheduler stepped
    once an epoch stands still over the epoch's updates), those whose weights the later
    process began with (``start``'s fingerprint); else the one whose data its first update
    trains again; else all of them."""
    prints = start.get("fingerprint")
    same = [k for k in found if prints is not None and lines[k - 1].get("fingerprint") == prints]
    by_data = _by_data(lines, first)
    return same or ([by_data] if by_data in found else found)


def continued(at: int, end: Line | None, start: Line, first: Line | None) -> int:
    """Where the earlier process was stopped inside update ``at``'s window (its ``cut``,
    ``record.interrupt``) and the later one (``start``, its first Recorder line ``first``)
    joins there, began with gradients already in its parameters (``carried_gradients``) and fed
    none of the cut window's micro-batches again: it continued that window (a checkpoint that
    carried the gradients and the position inside the window), and its first update is the
    window's rest. The backward passes the earlier process had made into it; 0 where not."""
    cut = (end or {}).get("cut") or {}
    fed = {tuple(sorted(ids)) for ids in cut.get("fed") or []}
    mine = {tuple(sorted(ids)) for ids in (first or {}).get("fed") or []}
    if cut.get("update") != at or not fed or not start.get("carried_gradients") or fed & mine:
        return 0
    return int(cut.get("backward", len(fed)))


def window_continued(lines: list[Line], restored: Restore) -> list[Line]:
    """The later process's Recorder ``lines``, where it ``continued`` the window the earlier one
    was stopped in: its first update's with the micro-batches the earlier process had fed into
    that window put first (their samples; their weights and losses, which no line of the
    earlier process holds, unknown), and their backward passes counted."""
    made = (restored.start or {}).get("continued")
    if not made or not lines:
        return lines
    fed = [list(ids) for ids in ((restored.standing or {}).get("cut") or {}).get("fed", [])]
    first = dict(lines[0])
    own = list(first.get("fed") or [])
    first.update(fed=fed + own, fed_weights=[None] * len(fed) + list(
        first.get("fed_weights") or [None] * len(own)))
    if isinstance(first.get("loss_micro"), list):
        first["loss_micro"] = [None] * made + first["loss_micro"]
    first.update({key: first[key] + made for key in ("backward", "reached")
                  if isinstance(first.get(key), int)})
    return [first, *lines[1:]]


def _rng(start: dict[str, Any] | None, rngs: dict[str, Any]) -> dict[str, Any] | None:
    """The later process's ``start`` with its RNGs' fingerprints at its first update (and
    whether it ``continued`` a window) added."""
    return {**(start or {}), **rngs} if rngs else start
