"""Windows: the samples behind each optimizer update, micro-batch by micro-batch and rank by
rank, with the weight each micro-batch's mean loss has in the update's gradient.

lrcheck's own loop is planned (``planned_windows``: the order of ``order.py`` and the loss
normalisation of ``runner/loss.py``); a framework's windows are recorded as it really fed them
(every item carries its sample id) and weighed as it really weighed them (the gradient that
reached each micro-batch's mean loss in the backward pass). The ``data`` check compares the
samples, the diagnosis of a ``params`` or ``loss`` failure reads both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from lrcheck.plan.order import global_batches, micro_batches, rank_share
from lrcheck.plan.steps import StepPlan


@dataclass(frozen=True)
class MicroBatch:
    """One micro-batch of one rank as fed: its sample ids, and the weight its mean loss had in
    the update's gradient once the ranks' gradients were averaged (None: not measured). The
    mean over the whole window weighs it ``items / window items``. ``sample_weights``, where
    the loop measured them (lrcheck's own, in the backward pass): the weight each sample's loss
    (all its loss items) really carried in the update's gradient, in the order of ``ids``."""

    rank: int
    ids: np.ndarray
    weight: float | None
    sample_weights: np.ndarray | None = None
    # Per sample, its tokens' weights ∂L/∂logp_t (``record.tokens``); None: not measured.
    token_weights: tuple[np.ndarray, ...] | None = None
    # Per use of the log-probs in the loss (``record.uses``: its terms), per sample its tokens'
    # weights through that use; None: read in one place, or not measured.
    token_uses: dict[str, tuple[np.ndarray, ...]] | None = None

    def to_json(self) -> list[object]:
        row = [self.rank, self.ids.tolist(), self.weight]
        return row if self.sample_weights is None else [*row, self.sample_weights.tolist()]

    @classmethod
    def from_json(cls, data: Sequence[Any]) -> MicroBatch:
        return cls(int(data[0]), np.asarray(data[1], dtype=np.int64),
                   None if data[2] is None else float(data[2]),
                   None if len(data) < 4 else np.asarray(data[3], dtype=np.float64))

    def per_sample(self) -> np.ndarray | None:
        """The weight each sample's loss carried: measured, or else (a framework's window, one
        loss item per sample) its mean's weight shared equally; None when not measured."""
        if self.sample_weights is not None:
            return self.sample_weights
        if self.weight is None:
            return None
        return np.full(len(self.ids), self.weight / max(len(self.ids), 1))


Window = tuple[MicroBatch, ...]


def fed_window(rows: Sequence[Sequence[Any]]) -> Window:
    """A recorded update's window (``record.taps``, numbered by ``record.sides``): per
    micro-batch ``[rank, sample numbers, each one's measured weight or None]``; the mean's
    weight is the sum of its samples'."""
    out = []
    for rank, ids, weights, *tokens in rows:
        w = None if weights is None else np.asarray(weights, dtype=np.float64)
        rows, uses = tokens[0] if tokens and tokens[0] is not None else ((), None)
        out.append(MicroBatch(int(rank), np.asarray(ids, dtype=np.int64),
                              None if w is None else float(w.sum()), w,
                              tuple(rows) if tokens and tokens[0] is not None else None,
                              {k: tuple(v) for k, v in uses.items()} if uses else None))
    return tuple(out)


def window_ids(window: Window) -> np.ndarray:
    """Every sample id behind the update, over its micro-batches and ranks."""
    if not window:
        return np.empty(0, dtype=np.int64)
    return np.concatenate([m.ids for m in window])


def rank_sizes(window: Window) -> dict[int, list[int]]:
    """Per rank, the sizes of its micro-batches in the order fed."""
    sizes: dict[int, list[int]] = {}
    for m in window:
        sizes.setdefault(m.rank, []).append(len(m.ids))
    return dict(sorted(sizes.items()))


def repeats_from(windows: Sequence[Window], k: int) -> bool:
    """Whether the windows from ``k`` on hold the samples of those from 0 on, update by update
    (an epoch fed again in the order of the first: a sampler never told its epoch)."""
    count = min(k, len(windows) - k)
    return k > 0 and count > 0 and all(
        np.array_equal(np.sort(window_ids(windows[k + j])), np.sort(window_ids(windows[j])))
        for j in range(count))


def leftover(windows: Sequence[Window], k: int, extra: np.ndarray) -> tuple[int, int, int] | None:
    """Whether window ``k`` holds, on every rank, more micro-batches than ``windows`` usually
    do, and the ``extra`` sample ids it has (against another run) are exactly those of its
    first ones: micro-batches fed before it that made no update of their own (an epoch's last,
    partial window whose gradients were carried on). Its micro-batches, the usual count and
    how many came first; None where not so."""
    if not len(extra):
        return None
    counts = [len(rank_sizes(w).get(0, ())) for w in windows]
    usual = int(np.bincount(counts).argmax()) if counts else 0
    more = {len(s) - usual for s in rank_sizes(windows[k]).values()}
    if len(more) != 1 or (first := more.pop()) <= 0:
        return None
    taken: dict[int, int] = {}
    fed = []
    for m in windows[k]:  # in the order fed: each rank's first micro-batches
        if taken.get(m.rank, 0) < first:
            fed.append(m.ids)
            taken[m.rank] = taken.get(m.rank, 0) + 1
    ids = np.sort(np.concatenate(fed).astype(np.int64))
    return (usual + first, usual, first) if np.array_equal(ids, np.sort(
        extra.astype(np.int64))) else None


def and_text(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _runs(sizes: Sequence[int]) -> str:
    """Micro-batch sizes of one rank: ``16 and 13``, ``8, 8 and 5``; ``2 (×15) and 1`` when
    more than four, repeats counted."""
    if len(sizes) <= 4:
        return and_text([str(s) for s in sizes])
    groups: list[list[int]] = []
    for s in sizes:
        if groups and groups[-1][0] == s:
            groups[-1][1] += 1
        else:
            groups.append([s, 1])
    return and_text([f"{s} (×{count})" if count > 1 else str(s) for s, count in groups])


def cut_text(window: Window, lone: str) -> str:
    """How ``window`` was cut: ``micro-batches of 16 and 13``, ``2 micro-batches of 16``,
    ``one micro-batch of 13`` (``lone``: ``micro-batch`` or ``batch``); under several ranks
    ``micro-batches of 8 and 7 on rank 0, 8 and 6 on rank 1``."""
    sizes = rank_sizes(window)
    if not sizes:
        return "no samples"
    if len(sizes) == 1:
        (only,) = sizes.values()
        if len(only) == 1:
            return f"one {lone} of {only[0]}"
        if len(set(only)) == 1:
            return f"{len(only)} micro-batches of {only[0]}"
        return f"micro-batches of {_runs(only)}"
    if all(len(s) == 1 for s in sizes.values()):
        return "one micro-batch per rank: " + ", ".join(
            f"{s[0]} on rank {r}" for r, s in sizes.items())
    return "micro-batches of " + ", ".join(f"{_runs(s)} on rank {r}" for r, s in sizes.items())


def sample_weights(window: Window) -> tuple[np.ndarray, np.ndarray] | None:
    """The distinct sample ids behind ``window``, sorted, with the total weight each one's loss
    carried in the update's gradient (a sample fed twice counts twice); None when a weight was
    not measured."""
    shares = [m.per_sample() for m in window]
    measured = [s for s in shares if s is not None]
    if len(measured) < len(shares):
        return None
    if not window:
        return np.empty(0, dtype=np.int64), np.empty(0)
    ids, where = np.unique(window_ids(window), return_inverse=True)
    return ids, np.bincount(where, weights=np.concatenate(measured), minlength=len(ids))


def by_items(windows: Sequence[Window], items: np.ndarray) -> list[Window]:
    """``windows`` with each sample's weight where only its micro-batch mean's was measured (a
    framework's): the mean's weight shared by the loss items, ``weight · items_i / Σ items``
    (``items``: loss items per sample, by id — tokens differ from sample to sample)."""
    def weighed(m: MicroBatch) -> MicroBatch:
        if m.sample_weights is not None or m.weight is None or not len(m.ids):
            return m
        counts = items[m.ids].astype(np.float64)
        return MicroBatch(m.rank, m.ids, m.weight,
                          m.weight * counts / max(float(counts.sum()), 1.0))

    return [tuple(weighed(m) for m in w) for w in windows]


def with_measured(windows: Sequence[Window],
                  measured: Sequence[Sequence[tuple[int, np.ndarray]]]) -> list[Window]:
    """``windows`` with the per-sample weights a loop measured: ``measured[k]``, for update k,
    (rank, weights) of each micro-batch in the order fed, matched to the window's micro-batches
    of that rank in turn."""
    out: list[Window] = []
    for k, window in enumerate(windows):
        if k >= len(measured):
            out.append(window)
            continue
        by_rank: dict[int, list[np.ndarray]] = {}
        for rank, weights in measured[k]:
            by_rank.setdefault(rank, []).append(weights)
        taken = dict.fromkeys(by_rank, 0)
        rows = []
        for m in window:
            got = by_rank.get(m.rank, [])
            i = taken.get(m.rank, 0)
            if i < len(got) and len(got[i]) == len(m.ids):
                rows.append(MicroBatch(m.rank, m.ids, m.weight, got[i]))
                taken[m.rank] = i + 1
            else:
                rows.append(m)
        out.append(tuple(rows))
    return out


def windows_to_json(windows: Sequence[Window]) -> list[list[list[object]]]:
    return [[m.to_json() for m in w] for w in windows]


def windows_from_json(data: Sequence[Sequence[Sequence[Any]]]) -> list[Window]:
    return [tuple(MicroBatch.from_json(m) for m in w) for w in data]


def items_each(items: np.ndarray) -> int | None:
    """The loss items every sample has, when all have as many (1 outside token tasks): a
    batch's count is then a product, not a gather and a sum over its ids."""
    return int(items[0]) if len(items) and bool((items == items[0]).all()) else None


def planned_windows(plan: StepPlan, seed: int, items: np.ndarray,
                    loss_norm: str, reverse: bool = False) -> list[Window]:
    """lrcheck's own loop's windows for ``plan``: ``order.py``'s micro-batches and rank shares,
    each weighted as ``runner/loss.micro_batch_loss`` weighs it (``items``: loss items per
    sample)."""
    each = items_each(items)

    def count(ids: np.ndarray) -> int:
        return len(ids) * each if each is not None else int(items[ids].sum())

    windows: list[Window] = []
    for batch in global_batches(plan.num_samples, plan.effective_batch, plan.epochs, seed,
                                plan.tail, reverse):
        total = count(batch.indices)
        micro = micro_batches(batch.indices, plan.micro_batch_size, plan.world)
        window = []
        for m in micro:
            for r in range(plan.world):
                ids = rank_share(m, r, plan.world)
                n = count(ids)
                # global: sum / window items; mean: the micro-batch's mean / accum, averaged
                # over the ranks by DDP.
                weight = n / total if loss_norm == "global" else 1 / (plan.accum * plan.world)
                window.append(MicroBatch(r, ids, weight))
        windows.append(tuple(window))
    return windows


def _small_fraction(value: float, limit: int) -> Fraction | None:
    close = Fraction(value).limit_denominator(limit)
    return close if abs(float(close) - value) <= 1e-9 * max(1.0, abs(value)) else None


def fraction_text(value: float, limit: int = 64) -> str:
    """``0.5`` as ``1/2``; a value no small fraction gives, with 3 significant digits."""
    close = _small_fraction(value, limit)
    return str(close) if close is not None else f"{value:.3g}"


def fraction_texts(values: Sequence[float], limit: int = 64) -> list[str]:
    """``values`` as ``fraction_text`` writes each where every one is a small fraction, else all
    with 3 significant digits: one list in one notation (not ``1/4, 0.198, 0.302 and 1/4``)."""
    if all(_small_fraction(v, limit) is not None for v in values):
        return [fraction_text(v, limit) for v in values]
    return [f"{v:.3g}" for v in values]
