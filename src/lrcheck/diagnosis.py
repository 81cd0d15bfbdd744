"""What the windows say (``plan/windows.py``): the samples behind each update compared between two
runs — the arithmetic of the ``data`` check — and, where ``params`` or ``loss`` first part at
update k, what was special about k's window: where it lies in its epoch, how it was cut into
micro-batches on each rank, whether the samples or only their weights differ from the
reference's. Pure: windows and updates in, numbers and sentences out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lrcheck.plan.windows import (
    Window,
    and_text,
    cut_text,
    fraction_text,
    fraction_texts,
    leftover,
    repeats_from,
    sample_weights,
    window_ids,
)
from lrcheck.trace import UpdateRecord
from lrcheck.words import plural

# How many sample ids a message lists before it says how many there are in all.
SHOWN_IDS = 6
# Measured weights (a backward pass, maybe in float32) equal to this relative precision.
WEIGHT_RTOL = 1e-6


def _flat(windows: Sequence[Window]) -> tuple[np.ndarray, np.ndarray]:
    """Every sample id fed in ``windows`` and the index of the update it was fed in."""
    parts = [m.ids for w in windows for m in w]
    if not parts:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    per_window = np.fromiter(map(len, windows), dtype=np.int64, count=len(windows))
    sizes = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    update = np.repeat(np.repeat(np.arange(len(windows)), per_window), sizes)
    return np.concatenate(parts).astype(np.int64, copy=False), update


def _net(ref_keys: np.ndarray, cand_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The keys whose counts differ between the two multisets, and by how much (candidate's
    count minus the reference's), sorted by key."""
    ur, cr = np.unique(ref_keys, return_counts=True)
    uc, cc = np.unique(cand_keys, return_counts=True)
    keys, where = np.unique(np.concatenate([ur, uc]), return_inverse=True)
    net = np.bincount(where, weights=np.concatenate([-cr, cc]), minlength=len(keys))
    net = np.rint(net).astype(np.int64)
    return keys[net != 0], net[net != 0]


@dataclass(frozen=True)
class Seen:
    """Over the run, per epoch: samples the candidate saw more often than the reference did
    (``extra``, as (epoch, id) repeated by the excess) and less often (``missing``); whether
    every extra one was seen twice where the reference saw it once, every missing one never;
    ``epochs``: whether the runs said their epochs (a recorded command does not: its whole run
    is then counted as one)."""

    extra: list[tuple[int, int]]
    missing: list[tuple[int, int]]
    twice: bool
    never: bool
    epochs: bool = True


@dataclass(frozen=True)
class DataDiff:
    """The samples behind the updates of two runs, compared update by update over the updates
    both made (``compared``). ``differing``: the updates whose multisets of ids differ;
    ``only_cand``/``only_ref``: at the first of them, the ids fed in one run and not in the other
    (repeated as often as the excess); ``seen``: over the whole run, per epoch (None when the
    runs agree everywhere); ``carried``: the epoch the first differing update ran on into —
    the candidate's window held the reference's last one of an epoch and the first samples of
    the next epoch's first (None: not so); ``leftover``: the first differing update's window
    began with more micro-batches than the candidate's other windows, and its extra samples
    are theirs: (micro-batches in it, in the others, how many came first) on each rank."""

    compared: int
    lengths: tuple[int, int]
    differing: np.ndarray
    only_cand: np.ndarray
    only_ref: np.ndarray
    seen: Seen | None
    carried: int | None = None
    leftover: tuple[int, int, int] | None = None
    # The candidate's updates from the first differing one repeat its first ones, where the
    # reference never repeats its own.
    repeated: bool = False


def _epochs(updates: Sequence[UpdateRecord], count: int) -> np.ndarray:
    """The epoch of each of the first ``count`` updates (0 where not recorded)."""
    return np.fromiter(((updates[k].epoch or 0) if k < len(updates) else 0 for k in range(count)),
                       dtype=np.int64, count=count)


def data_diff(ref_windows: Sequence[Window], cand_windows: Sequence[Window],
              ref_updates: Sequence[UpdateRecord],
              cand_updates: Sequence[UpdateRecord]) -> DataDiff:
    """Compare the samples behind each update of two runs (vectorised: no sort when both fed
    each update's samples in the same order, one per run when they agree otherwise)."""
    n = min(len(ref_windows), len(cand_windows))
    lengths = (len(ref_windows), len(cand_windows))
    ref_ids, ref_at = _flat(ref_windows[:n])
    cand_ids, cand_at = _flat(cand_windows[:n])
    empty = np.empty(0, dtype=np.int64)
    if (lengths[0] == lengths[1] and np.array_equal(ref_ids, cand_ids)
            and np.array_equal(ref_at, cand_at)):
        return DataDiff(n, lengths, empty, empty, empty, None)
    low = min(int(ref_ids.min(initial=0)), int(cand_ids.min(initial=0)))
    span = max(int(ref_ids.max(initial=0)), int(cand_ids.max(initial=0))) - low + 1
    # One key per (update, id); in 32 bits where they fit, which numpy sorts about twice as fast.
    kind = np.int32 if n * span < 2 ** 31 else np.int64
    ref_keys = (ref_at * span + (ref_ids - low)).astype(kind)
    cand_keys = (cand_at * span + (cand_ids - low)).astype(kind)
    same = len(ref_keys) == len(cand_keys) and np.array_equal(np.sort(ref_keys),
                                                              np.sort(cand_keys))
    if same and lengths[0] == lengths[1]:
        return DataDiff(n, lengths, empty, empty, empty, None)
    differing, only_cand, only_ref = empty, empty, empty
    if not same:
        keys, net = _net(ref_keys, cand_keys)
        at = keys // span
        differing = np.unique(at)
        first = at == differing[0]
        ids = keys % span + low
        only_cand = np.repeat(ids[first & (net > 0)], net[first & (net > 0)])
        only_ref = np.repeat(ids[first & (net < 0)], -net[first & (net < 0)])
    return DataDiff(n, lengths, differing, only_cand, only_ref,
                    _seen(ref_windows, cand_windows, ref_updates, cand_updates),
                    _carried(differing, only_cand, only_ref, ref_windows, ref_updates),
                    None if not len(differing) or len(only_ref) else
                    leftover(cand_windows, int(differing[0]), only_cand),
                    bool(len(differing)) and repeats_from(cand_windows, int(differing[0]))
                    and not any(repeats_from(ref_windows, j) for j in range(1, len(ref_windows))))


def _carried(differing: np.ndarray, only_cand: np.ndarray, only_ref: np.ndarray,
             ref_windows: Sequence[Window], ref_updates: Sequence[UpdateRecord]) -> int | None:
    """The epoch the first differing update ran on into, when its extra samples are all the
    reference's first samples of the next epoch (``DataDiff.carried``)."""
    if not len(differing) or len(only_ref) or not len(only_cand):
        return None
    k = int(differing[0])
    if k + 1 >= min(len(ref_windows), len(ref_updates)):
        return None
    epoch, after = ref_updates[k].epoch, ref_updates[k + 1].epoch
    following = {int(i) for m in ref_windows[k + 1] for i in m.ids}
    if epoch == after or after is None or not {int(i) for i in only_cand} <= following:
        return None
    return after


def _seen(ref_windows: Sequence[Window], cand_windows: Sequence[Window],
          ref_updates: Sequence[UpdateRecord], cand_updates: Sequence[UpdateRecord]) -> Seen:
    """Per epoch, how often each sample was fed in each run, over all their updates."""
    ref_ids, ref_at = _flat(ref_windows)
    cand_ids, cand_at = _flat(cand_windows)
    low = min(int(ref_ids.min(initial=0)), int(cand_ids.min(initial=0)))
    span = max(int(ref_ids.max(initial=0)), int(cand_ids.max(initial=0))) - low + 1
    ref_epoch = _epochs(ref_updates, len(ref_windows))[ref_at]
    cand_epoch = _epochs(cand_updates, len(cand_windows))[cand_at]
    ref_keys, cand_keys = ref_epoch * span + ref_ids - low, cand_epoch * span + cand_ids - low
    keys, net = _net(ref_keys, cand_keys)
    ur, cr = np.unique(ref_keys, return_counts=True)
    uc, cc = np.unique(cand_keys, return_counts=True)
    in_ref = np.zeros(len(keys), dtype=np.int64)
    in_cand = np.zeros(len(keys), dtype=np.int64)
    pos = np.searchsorted(ur, keys)
    hit = (pos < len(ur)) & (ur[np.minimum(pos, len(ur) - 1)] == keys)
    in_ref[hit] = cr[pos[hit]]
    pos = np.searchsorted(uc, keys)
    hit = (pos < len(uc)) & (uc[np.minimum(pos, len(uc) - 1)] == keys)
    in_cand[hit] = cc[pos[hit]]
    epochs, ids = keys // span, keys % span + low
    more, fewer = net > 0, net < 0
    extra = [(int(e), int(i)) for e, i, c in zip(epochs[more], ids[more], net[more],
                                                 strict=True) for _ in range(c)]
    missing = [(int(e), int(i)) for e, i, c in zip(epochs[fewer], ids[fewer], -net[fewer],
                                                   strict=True) for _ in range(c)]
    known = any(u.epoch is not None for u in (*ref_updates, *cand_updates))
    return Seen(extra, missing,
                bool(np.all((in_cand[more] == 2) & (in_ref[more] == 1))),
                bool(np.all(in_cand[fewer] == 0)), known)


def ids_text(ids: Sequence[int] | np.ndarray, limit: int = SHOWN_IDS) -> str:
    """``ids 3, 17, 80`` or ``ids 3, 17, 80, 91, 95, 102, … (20 in all)``, in order."""
    values = sorted(int(i) for i in ids)
    shown = ", ".join(str(i) for i in values[:limit])
    more = f", … ({len(values)} in all)" if len(values) > limit else ""
    return f"{'id' if len(values) == 1 else 'ids'} {shown}{more}"


def _by_epoch(pairs: list[tuple[int, int]], known: bool = True) -> str:
    epochs = sorted({e for e, _ in pairs})
    if not known:
        return ids_text([i for _, i in pairs])
    if len(epochs) == 1:
        return f"epoch {epochs[0]}: {ids_text([i for _, i in pairs])}"
    first = epochs[0]
    return (f"in {plural(len(epochs), 'epoch')}; epoch {first}: "
            f"{ids_text([i for e, i in pairs if e == first])}")


def seen_text(seen: Seen) -> str:
    """Over the run: the samples the candidate saw twice (or more often) or never (or less
    often) in an epoch than the reference did, with what usually causes each."""
    parts = []
    span = " in an epoch" if seen.epochs else ""  # a run that did not say its epochs: as one
    if seen.extra:
        them = "it" if len(seen.extra) == 1 else "them"
        ids = _by_epoch(seen.extra, seen.epochs)
        if seen.twice:
            how = (f"twice{span} where the reference saw {them} once ({ids}): padding of "
                   "uneven ranks (a DistributedSampler, Accelerate's even_batches) looks like "
                   "this")
        else:
            how = (f"more often{span} than the reference ({ids}): the reference leaving samples "
                   "out (drop_last), or padding, looks like this")
        parts.append(f"{plural(len(seen.extra), 'sample')} {how}")
    if seen.missing:
        them = "it" if len(seen.missing) == 1 else "them"
        how = (f"never{span} where the reference saw {them}" if seen.never
               else f"less often{span} than the reference")
        parts.append(f"{plural(len(seen.missing), 'sample')} {how} "
                     f"({_by_epoch(seen.missing, seen.epochs)}): drop_last looks like this")
    if not parts:
        return (f"over {'each epoch' if seen.epochs else 'the run'} the candidate saw the same "
                "samples as the reference, grouped into updates differently")
    return "over the run, the candidate saw " + "; and ".join(parts)


def data_text(diff: DataDiff, resumed: bool = False) -> str:
    """The ``data`` check's detail for runs that differ; ``resumed``: the candidate resumed from
    a checkpoint just before the first update that differs, which then says why."""
    parts = []
    if len(diff.differing):
        k = int(diff.differing[0])
        sides = []
        if len(diff.only_cand):
            sides.append(f"{plural(len(diff.only_cand), 'sample')} only in the candidate "
                         f"({ids_text(diff.only_cand)})")
        if len(diff.only_ref):
            sides.append(f"{plural(len(diff.only_ref), 'sample')} only in the reference "
                         f"({ids_text(diff.only_ref)})")
        parts.append(f"update {k}: {', '.join(sides)}; "
                     f"{len(diff.differing)} of {plural(diff.compared, 'update')} differ")
    else:
        longer = "candidate" if diff.lengths[1] > diff.lengths[0] else "reference"
        parts.append(f"the same samples behind the first {plural(diff.compared, 'update')}, "
                     f"then only the {longer} goes on ({diff.lengths[0]} reference, "
                     f"{diff.lengths[1]} candidate updates)")
    if resumed:
        parts.append("the candidate resumed from its checkpoint just before: its data order did "
                     "not go on where it stopped")
    elif diff.repeated:
        parts.append(f"from update {diff.differing[0]} on the candidate was fed the samples of "
                     "its updates from 0 on again, update by update, where the reference's "
                     "differ: an epoch in the first epoch's order, as a DistributedSampler whose "
                     "set_epoch is never called gives it, looks like this")
    elif diff.leftover is not None:
        held, usual, first = diff.leftover
        which, its = ("its first", "its") if first == 1 else (f"its first {first}", "their")
        parts.append(f"its window holds {held} micro-batches on each rank where the candidate's "
                     f"others hold {usual}: {which}, fed after the update before, made no update "
                     f"of {its} own and {its} gradients were carried into this one; an epoch's "
                     "last, partial window left in the gradients, neither stepped nor zeroed, "
                     "looks like this")
    elif diff.carried is not None:
        parts.append(f"its window ran on into epoch {diff.carried}: it holds the reference's "
                     f"last, partial window of epoch {diff.carried - 1} and the first samples of "
                     f"epoch {diff.carried}, as a micro-step counter that does not restart at an "
                     "epoch makes it (DeepSpeed's engine, #7439); every later window is shifted")
    elif diff.seen is not None:
        parts.append(seen_text(diff.seen))
    return "; ".join(parts)


def _lone_word(windows: Sequence[Window]) -> str:
    """``batch`` for a run that feeds each update at once (accum 1, one process)."""
    return "batch" if all(len(w) <= 1 for w in windows) else "micro-batch"


def _position(updates: Sequence[UpdateRecord], k: int) -> str:
    epoch = updates[k].epoch if k < len(updates) else None
    if epoch is None:
        return f"update {k}"
    last = k == len(updates) - 1 or updates[k + 1].epoch != epoch
    first = k == 0 or updates[k - 1].epoch != epoch
    if last and not first:
        return f"update {k} is the last of epoch {epoch}"
    if first and not last:
        return f"update {k} is the first of epoch {epoch}"
    return f"update {k} (epoch {epoch})"


def weights_text(cand: Window, ref: Window, total: int) -> str:
    """How ``cand``'s micro-batch means were weighted against what would give each sample the
    weight it has in ``ref`` (both measured, the same samples)."""
    ref_ids, ref_share = sample_weights(ref) or (np.empty(0), np.empty(0))
    weights = [float(m.weight or 0.0) for m in cand]
    wanted = [float(ref_share[np.searchsorted(ref_ids, m.ids)].sum()) for m in cand]
    close = all(abs(w - x) <= WEIGHT_RTOL * max(1.0, abs(x))
                for w, x in zip(weights, wanted, strict=True))
    if close:
        return ""
    limit = max(64, total)

    def listed(values: Sequence[float]) -> str:
        texts = fraction_texts(values, limit)
        ranks = sorted({m.rank for m in cand})
        if len(ranks) == 1:
            return and_text(texts)
        return ", ".join(and_text([t for t, m in zip(texts, cand, strict=True) if m.rank == r])
                         + f" on rank {r}" for r in ranks)

    if len(cand) == 1:
        return (f"its mean weighted {fraction_text(weights[0], limit)} instead of "
                f"{fraction_text(wanted[0], limit)}")
    by_samples = all(abs(x / max(len(m.ids), 1) - wanted[0] / max(len(cand[0].ids), 1))
                     <= WEIGHT_RTOL * abs(wanted[0]) for x, m in zip(wanted, cand, strict=True))
    # not by the samples' count: what they weigh in the reference (a token mean's share)
    instead = (f"by its samples ({listed(wanted)})" if by_samples
               else f"its samples' weight in the reference ({listed(wanted)})")
    if all(abs(w - weights[0]) <= WEIGHT_RTOL * abs(weights[0]) for w in weights):
        return (f"each micro-batch's mean weighted {fraction_text(weights[0], limit)} instead "
                f"of {instead}")
    return f"micro-batch means weighted {listed(weights)} instead of {instead}"


def diagnose(ref_windows: Sequence[Window], cand_windows: Sequence[Window],
             ref_updates: Sequence[UpdateRecord], cand_updates: Sequence[UpdateRecord], k: int,
             lr_differs: bool) -> str | None:
    """What was special about update ``k``, where ``params`` or ``loss`` first part: its place
    in the epoch, how each run cut it, and whether its samples, their weights or (``lr_differs``:
    the ``lr`` check failed at k or before) the LR differ. None without both windows of k."""
    if k >= len(ref_windows) or k >= len(cand_windows):
        return None
    cand, ref = cand_windows[k], ref_windows[k]
    total = int(sum(len(m.ids) for m in cand))
    full = max(sum(len(m.ids) for m in w) for w in cand_windows)
    partial = f" (a full update has {full})" if total < full else ""
    if len(cand) == 1:
        cut = "one micro-batch" if _lone_word(cand_windows) == "micro-batch" else "one batch"
    else:
        cut = cut_text(cand, "micro-batch")
    where = (f"{_position(cand_updates, k)}: {plural(total, 'sample')}{partial} in {cut} "
             f"(reference: {cut_text(ref, _lone_word(ref_windows))})")
    if not np.array_equal(np.sort(window_ids(cand)), np.sort(window_ids(ref))):
        return f"{where}; it was fed different samples from the reference's: see data"
    lr = ", so the difference is the LR: see lr" if lr_differs else ""
    if sample_weights(cand) is None or sample_weights(ref) is None:
        return (f"{where}; the same samples as the reference (`data` passes there; their "
                f"weights were not measured){lr}")
    weights = weights_text(cand, ref, total)
    if weights:
        return (f"{where}; the same samples as the reference (`data` passes there), so the "
                f"difference is their weights: {weights}")
    if lr:
        return f"{where}; the same samples with the same weights as the reference{lr}"
    return (f"{where}; the same samples with the same weights and the same LR as the reference "
            "up to here")
