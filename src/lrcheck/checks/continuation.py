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
boundary: a schedule restarted, an optimizer's state lost, weights not loaded; and, held
against the reference's samples, a data position not carried (``shifted_data``: the samples of
earlier updates fed again, or updates' samples skipped), which ``data`` finds as differing
samples, update by update. A resume from an earlier checkpoint than where the process before it
stopped (a checkpoint every K updates, a preemption between two) joins at that checkpoint's
update (``record.restore``): the updates after it were trained twice, which is said, and the
earlier process's are left out of the comparison. Where the training drew from torch's RNG at
every update (dropout), the resumed process's RNG at its first update's step is held against
the interrupted one's at the same update (``record.restore.drawn``). A resume on another world
size (``record.worlds``) is said, and fails where the samples per update changed with it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from lrcheck.checks.status import FAIL, PASS, CheckResult
from lrcheck.plan.windows import Window, and_text
from lrcheck.stepwise import Boundary, ordinal
from lrcheck.words import plural

# The global RNGs fingerprinted at each update's step (``record.restore.RNGS``), in words: carried,
# and not carried.
STREAMS = {"rng": ("torch's RNG stream", "another torch RNG stream"),
           "rng_numpy": ("NumPy's global RNG stream", "another NumPy RNG stream"),
           "rng_python": ("Python's random stream", "another Python random stream")}


def carried(b: Boundary) -> dict[str, bool | None]:
    """Per item (``opt_step``, ``sched_epoch``, ``fingerprint``, ``scale``: a GradScaler's loss
    scale, and ``STREAMS``: an RNG at the update's step, ``record.restore.drawn``), whether the
    later process started where the earlier one ended (None: not known on both sides)."""
    before, after = b.before or {}, b.after or {}
    out: dict[str, bool | None] = {}
    for key in ("opt_step", "sched_epoch", "fingerprint", "scale", *STREAMS):
        x, y = before.get(key), after.get(key)
        out[key] = None if x is None or y is None else x == y
    if before.get("opt_step") == 0:  # an optimizer that keeps no step counter (SGD)
        out["opt_step"] = None
    return out


def lockstep_weights(boundaries: Sequence[Boundary], reference: Sequence[Mapping[str, object]],
                     through: int, same: bool) -> tuple[Boundary, ...]:
    """``boundaries`` with, where the earlier process was a lockstep candidate up to the
    update before the resume (``through``: the last update lockstep judged), the weights it
    stood at there: the reference's after that update (lockstep loaded them into it, so its
    checkpoint holds them, bit for bit), from the ``reference``'s records. Only where the
    runs' parameters are alike (``same``: one dtype, neither sharded, one reference process),
    compared tensor for tensor whatever the order the two programs list them in."""
    out = []
    for b in boundaries:
        before, after, k = b.before or {}, b.after or {}, b.update
        prints = reference[k - 1].get("fingerprint") if 0 < k <= len(reference) else None
        mine = after.get("fingerprint")
        if (not same or not b.lockstep or through != k - 1 or before.get("fingerprint")
                is not None or not isinstance(prints, list) or not isinstance(mine, list)
                or not prints or len(prints) != len(mine)):
            out.append(b)
            continue
        pairs = [sorted(zip(p[::2], p[1::2], strict=True)) for p in (prints, mine)]
        out.append(replace(b, before={**before,
                                      "fingerprint": mine if pairs[0] == pairs[1] else prints}))
    return tuple(out)


def is_resume(b: Boundary) -> bool:
    """Whether the later process resumed the earlier one's training (see the module's
    docstring), rather than starting a new one."""
    found = carried(b)
    if found["opt_step"] or found["sched_epoch"] or b.twice:  # twice: it restored a position
        return True
    if (b.after or {}).get("resumed"):  # the command lrcheck run --resume started: a resume
        return True
    return (found["opt_step"] is None and found["sched_epoch"] is None
            and bool(found["fingerprint"]))


def _not_carried(b: Boundary) -> list[str]:
    """What the later process of a resume did not carry, in words."""
    found, before, after = carried(b), b.before or {}, b.after or {}
    who = f"the {ordinal(b.order)} process (pid {b.pid})"
    prev = f"the {ordinal(b.order - 1)} process's"
    k = b.update

    def stood(x: object) -> str:
        return (f"{prev} was {x} after update {k - 1}" if b.twice else f"{prev} ended at {x}")

    out = []
    if found["sched_epoch"] is False:
        x, y = before["sched_epoch"], after["sched_epoch"]
        how = ("restarted the schedule" if y == 0 else
               "set the schedule back" if y < x else "moved the schedule ahead")
        out.append(f"{who} {how} at update {k}: its step counter was {y}, {stood(x)}")
    if found["opt_step"] is False:
        x, y = before["opt_step"], after["opt_step"]
        if y == 0:
            out.append(f"{who} lost the optimizer's state at update {k}: its step counter was 0 "
                       f"(a fresh optimizer, or its state_dict not loaded), "
                       f"{stood(f'{x:g}')}")
        else:
            out.append(f"{who} started update {k} from another optimizer state: its step "
                       f"counter was {y:g}, {stood(f'{x:g}')}")
    if found["scale"] is False:
        x, y = before["scale"], after["scale"]
        out.append(f"{who} started update {k} with the GradScaler's loss scale at {y:g} (its "
                   f"state_dict not loaded: a fresh scaler), {stood(f'{x:g}')}")
    lost = [words for key, (_, words) in STREAMS.items() if found[key] is False]
    if lost:
        its = "its RNG's state" if len(lost) == 1 else "their states"
        out.append(f"{who} drew update {k} from {and_text(lost)}: {its} at update {k}'s step "
                   f"{'was' if len(lost) == 1 else 'were'} not the one{'s'[:len(lost) - 1]} "
                   f"{prev[:-2]} had there (the RNG's state not restored from the checkpoint: "
                   "dropout's masks, an augmentation's, or other draws, differ from the "
                   "uninterrupted run's from there)")
    if found["fingerprint"] is False:
        had = f"had after update {k - 1}" if b.twice else "ended with"
        out.append(f"{who} did not start update {k} from the weights {prev[:-2]} {had} "
                   "(the model's state_dict not loaded, or another checkpoint's)")
    return out


def _what_carried(b: Boundary) -> str:
    found, after = carried(b), b.after or {}
    said = [text for key, text in (
        ("fingerprint", "the weights"),
        ("opt_step", f"the optimizer's state (step counter {after.get('opt_step', 0):g})"
         if after.get("opt_step") is not None else ""),
        ("sched_epoch", f"the schedule (step {after.get('sched_epoch')})"),
        ("scale", f"the GradScaler's loss scale ({after.get('scale')})"),
        *((key, words) for key, (words, _) in STREAMS.items())) if found[key]]
    made = after.get("continued")
    if made:  # record.restore.continued
        said.append(f"update {b.update}'s window, continued (the gradients of the "
                    f"{plural(made, 'backward pass', 'backward passes')} made into it before "
                    f"the interrupt, in {after.get('carried_gradients')} tensors' .grad)")
    return ", ".join(said) + " carried"


def _free(b: Boundary, name: str) -> str:
    return (f"; lockstep followed the first process only: from update {b.update} the {name} "
            "ran free (a later process does not follow the reference)" if b.lockstep else "")


def _samples(window: Sequence[Any]) -> tuple[int, ...]:
    return tuple(sorted(int(i) for micro in window for i in micro.ids))


def shifted_data(ref_windows: Sequence[Any] | None, windows: Sequence[Any] | None,
                 at: int) -> str | None:
    """Where a resumed run's samples from update ``at`` on are the reference's of another
    window (``trace.Window``'s, compared as multisets): which updates it repeated or skipped,
    in words; None where they are the reference's own, or no window of it."""
    if ref_windows is None or windows is None or at >= min(len(ref_windows), len(windows)):
        return None
    ref = [_samples(w) for w in ref_windows]
    mine = [_samples(w) for w in windows]
    if mine[at] == ref[at] or mine[at] not in ref:
        return None
    j = ref.index(mine[at])
    n = 1
    while at + n < len(mine) and j + n < len(ref) and mine[at + n] == ref[j + n]:
        n += 1
    fed = f"update {at}" if n == 1 else f"updates {at}-{at + n - 1}"
    if j < at:
        were = f"update {j}" if n == 1 else f"updates {j}-{j + n - 1}"
        start = "the beginning" if j == 0 else f"update {j}"
        return (f"the resumed run repeated the samples of {were} at {fed}: its data restarted "
                f"from {start} (a sampler or loader whose position the checkpoint did not "
                "carry: a sampler without its epoch, data that restarts at each start)")
    were = f"update {at}" if j == at + 1 else f"updates {at}-{j - 1}"
    return (f"the resumed run skipped the samples of {were}: from update {at} it fed the "
            f"samples of update {j} on (its data position moved ahead)")


def _per_update(windows: Sequence[Any], count: Callable[[Any], int]) -> int:
    """The most common of ``count`` over ``windows`` (an epoch's short last window is no
    other batch)."""
    return Counter(count(w) for w in windows).most_common(1)[0][0]


def accumulations(windows: Sequence[Window] | None, at: int) -> tuple[int, int] | None:
    """Rank 0's micro-batches per update before update ``at`` and from it (each side's most
    common count), where they differ: a process joined at ``at`` with another accumulation;
    None where the same, or unknown."""
    if windows is None or not 0 < at < len(windows):
        return None
    before, after = (_per_update(part, lambda w: sum(1 for micro in w if micro.rank == 0))
                     for part in (windows[:at], windows[at:]))
    return None if before == after or not before or not after else (before, after)


def reaccumulated(windows: Sequence[Any] | None, at: int) -> str:
    """Where the process that joins at update ``at`` accumulates another number of rank 0's
    micro-batches per update than the processes before it (``accumulations``): a resume with
    another accumulation, which a framework may allow (the samples per update are ``data``'s
    to judge, a schedule sized for the old accumulation ``lr``'s: ``checks.lr.lr_resized``),
    in words; empty where the same, or unknown."""
    found = accumulations(windows, at)
    if found is None:
        return ""
    before, after = found
    return (f" with another accumulation: {after} micro-batches per update from update {at}, "
            f"{before} before it (a schedule sized for the old accumulation shows in lr)")


def resized(b: Boundary, windows: Sequence[Any] | None) -> tuple[str, str | None]:
    """Where the world size changed at the boundary (a resume on 1 process of a run on 2): the
    change in words, and, where the samples per update changed with it (the accumulation not
    rescaled for the new world size), that in words, a failure; where the world size did not
    change, ``reaccumulated``'s words and None."""
    before, after = b.worlds
    if before is None or after is None or before == after:
        return reaccumulated(windows, b.update), None
    said = f" on {plural(after, 'process', 'processes')} ({before} before it)"
    if windows is None or not 0 < b.update < len(windows):
        return said, None
    old, new = (_per_update(part, lambda w: sum(len(micro.ids) for micro in w))
                for part in (windows[:b.update], windows[b.update:]))
    if old == new:
        return said, None
    return said, (f"the {ordinal(b.order)} process (pid {b.pid}) resumed{said} with "
                  f"{new} samples per update from update {b.update}, {old} before it: the "
                  "effective batch changed with the world size (the accumulation not rescaled "
                  "for it)")


def fed_twice(b: Boundary, windows: Sequence[Any] | None) -> str | None:
    """Where the earlier process was stopped inside update ``b.update``'s window (its ``cut``:
    ``record.interrupt``) and the later one began with gradients already in its parameters (a
    checkpoint that carried the cut window's gradients) while feeding that window again from
    its start: which of rank 0's micro-batches were counted twice, in words; None where not."""
    cut, after = (b.before or {}).get("cut"), b.after or {}
    if not cut or not after.get("carried_gradients") or after.get("continued") or windows is None \
            or not 0 <= b.update < len(windows):
        return None
    mine = [tuple(sorted(int(i) for i in micro.ids)) for micro in windows[b.update]
            if micro.rank == 0]
    again = [mine.index(ids) for ids in (tuple(sorted(f)) for f in cut.get("fed", []))
             if ids in mine]
    if not again:
        return None
    run = again == list(range(again[0], again[-1] + 1))
    which = (f"micro-batch {again[0]}" if len(again) == 1 else
             f"micro-batches {again[0]}-{again[-1]}" if run
             else "micro-batches " + ", ".join(map(str, again)))
    made = int(cut.get("backward", len(cut.get("fed", []))))
    return (f"update {b.update}'s window was fed twice: {which} counted twice ({made + len(mine)} "
            f"of {len(mine)} backward passes): the {ordinal(b.order)} process (pid {b.pid}) "
            f"began with the gradients of the {made} backward passes the "
            f"{ordinal(b.order - 1)} process had made into it ({after['carried_gradients']} "
            "tensors' .grad, carried by the checkpoint) and fed the window again from its start")


def check_continuation(name: str, boundaries: Sequence[Boundary],
                       data: Sequence[str | None] = (),
                       windows: Sequence[Any] | None = None) -> CheckResult | None:
    """``continuation (name)``: the boundaries of the run's timeline judged (see the module's
    docstring); ``data``: per boundary, the samples the resumed run repeated or skipped
    (``shifted_data``), a failure of its own; ``windows``: the run's (``trace.Window``'s), for
    a resume with another accumulation (``reaccumulated``), said. None where each rank ran one
    process."""
    if not boundaries:
        return None
    check = f"continuation ({name})"
    told = []
    for b, shifted in zip(boundaries, [*data, *[None] * len(boundaries)], strict=False):
        if not is_resume(b):
            told.append(f"at update {b.update} a new training began (the {ordinal(b.order)} "
                        f"process, pid {b.pid}: a fresh optimizer and schedule), a stage of "
                        f"its own, not judged as a resume{_free(b, name)}")
            continue
        twice = fed_twice(b, windows)
        world, batch = resized(b, windows)
        problems = [*_not_carried(b), *([shifted] if shifted else []),
                    *([twice] if twice else []), *([batch] if batch else [])]
        if problems:
            return CheckResult(check, FAIL, None, b.update,
                               b.twice + "; ".join(problems) + f": the {name} did not resume "
                               f"where it stopped{_free(b, name)}")
        told.append(f"{b.twice}at update {b.update} the {ordinal(b.order)} process "
                    f"(pid {b.pid}) resumed{world}: "
                    f"{_what_carried(b)}{_free(b, name)}")
    return CheckResult(check, PASS, None, None,
                       f"rank 0's {len(boundaries) + 1} processes joined into one timeline; "
                       + "; ".join(told))
