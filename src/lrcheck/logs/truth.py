"""A run's own log held against what its recording measured (docs/logs.md, "Logs against the
recording"): per quantity logged, one finding that names what the log holds — the LR each
update used or the next update's, the loss each update differentiated or a scale of it or one
micro-batch's, the gradient norm before or after clipping — with the update it starts at.

The truth (``Truth``) comes from a record folder's merged lines (``record.folder``): the LR
read before each ``optimizer.step()``, ``loss_backward`` and ``loss_micro`` (``record.losses``),
``clip_norm`` and ``max_norm`` (the pre-clip norm ``clip_grad_norm_`` returned, and its
setting) and, at fingerprinted updates, ``grad_sq`` (the gradient the optimizer stepped on,
squared). A log's values are equal to it within what the log keeps: float32 (TensorBoard), a
number rounded to a few decimals (the Trainer rounds its loss to 4), a loss averaged over the
updates of a logging window (the Trainer's). Nothing here judges the training: a finding never
changes a check or the verdict."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lrcheck.logs.model import LoggedRun, LossIs, Quantity, Series, StepUnit
from lrcheck.logs.shards import coefficients, local_words, merged_words, rank_norms
from lrcheck.logs.steps import candidates, micro_batches
from lrcheck.logs.steps import samples as samples_after
from lrcheck.words import Word, plural


class Agreement(Word):
    """What a finding says of the log against the recording."""

    MATCHES = "matches"
    DIFFERS = "differs"
    UNKNOWN = "unknown"


MATCHES, DIFFERS, UNKNOWN = Agreement.MATCHES, Agreement.DIFFERS, Agreement.UNKNOWN


@dataclass(frozen=True)
class LogFinding:
    """One quantity of one run's log against its recording: ``side`` the run (reference,
    candidate, or the recorded command), ``says`` the sentence, ``first_update`` where what it
    names starts (None: everywhere it was logged, or nowhere), ``path`` the log read. A log
    given that could not be read is one finding, ``unknown``, of no quantity (None)."""

    side: str
    quantity: Quantity | None
    status: Agreement
    says: str
    first_update: int | None
    path: str

    @property
    def what(self) -> str:
        """The quantity's word, or "—" where the log could not be read."""
        return "—" if self.quantity is None else self.quantity.value

    def to_dict(self) -> dict[str, object]:
        return {"side": self.side, "quantity": None if self.quantity is None else
                self.quantity.value, "status": self.status.value, "says": self.says,
                "first_update": self.first_update, "path": self.path}


@dataclass(frozen=True)
class Truth:
    """Per recorded update (NaN where not measured): the LR the update used (the first param
    group's), the loss it differentiated, each micro-batch's value, the clip's pre-clip norm
    and max_norm, and the norm of the gradient it stepped on; in a run of several ranks each
    rank's local norm after the clip (``ranks``, updates × ranks: ``logs.shards``)."""

    lr: np.ndarray
    loss: np.ndarray
    micro: tuple[tuple[float, ...], ...]
    pre_clip: np.ndarray
    max_norm: np.ndarray
    stepped: np.ndarray
    scheduler_steps: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ranks: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    @classmethod
    def from_records(cls, records: Sequence[dict[str, Any]]) -> Truth:
        def numbers(read: Callable[[dict[str, Any]], Any]) -> np.ndarray:
            values = [read(r) for r in records]
            return np.array([math.nan if v is None else float(v) for v in values])

        pre = numbers(lambda r: r.get("clip_norm"))
        top = numbers(lambda r: r.get("max_norm") if r.get("clip_grad_norm") else None)
        after = pre * np.minimum(1.0, top / (pre + 1e-6))  # clip_grad_norm_'s coefficient
        measured = numbers(lambda r: math.sqrt(r["grad_sq"]) if "grad_sq" in r else None)
        unclipped = np.isnan(top) & ~np.isnan(pre)
        micro = tuple(tuple(math.nan if v is None else v for v in r.get("loss_micro") or ())
                      for r in records)
        return cls(lr=numbers(lambda r: r["lr"][0]),
                   loss=numbers(lambda r: r.get("loss_backward")), micro=micro,
                   pre_clip=pre, max_norm=top,
                   stepped=np.where(np.isnan(measured), np.where(unclipped, pre, after), measured),
                   scheduler_steps=numbers(lambda r: r.get("scheduler_steps")),
                   ranks=rank_norms(records))


def tolerance(series: Series, relative: float) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """Whether logged values equal expected ones within what the log keeps: ``relative``, of
    float32, whatever the file stores (TensorBoard stores float32; a CSV or JSON file holds the
    float of a value that was a float32 tensor: Lightning's ``self.log``, the Trainer's loss
    summed on the device), or half the last decimal where every value is rounded to 6
    decimals or fewer."""
    rel = relative
    values = np.asarray(series.values, dtype=np.float64)
    decimals = next((d for d in range(1, 7)
                     if len(values) and np.all(np.round(values, d) == values)), None)
    absolute = 0.0 if decimals is None else 0.5 * 10.0 ** -decimals * (1 + 1e-9)

    def close(logged: np.ndarray, expected: np.ndarray) -> np.ndarray:
        scale = np.maximum(np.abs(logged), np.abs(expected))
        within: np.ndarray = np.abs(logged - expected) <= np.maximum(absolute, rel * scale)
        return within

    return close


def hold(log: LoggedRun, records: Sequence[dict[str, Any]], side: str,
         samples: int | None = None) -> list[LogFinding]:
    """The findings of ``log`` against the recorded run's merged ``records``, one per
    quantity logged (LR, loss, gradient norm), its steps read as the recording shows them
    (``convention``; ``samples``: the samples per update, where known); the first finding
    names the convention."""
    truth = Truth.from_records(records)
    log, named = convention(log, truth, samples)
    found = [LogFinding(side, quantity, *judged, str(log.path))
             for quantity, judged in _judged(log, truth)]
    found = [replace(f, says=f"{f.says}: what Lightning's self.log on a step logs (that "
                             "batch's loss), a meaning of the log, not a bug")
             if log.loss_is is LossIs.MICRO_BATCH and EXPLAINED[1] in f.says else f
             for f in found]
    writers = [limit for limit in log.limits if "event files log the same steps" in limit]
    if found:
        found[0] = replace(found[0], says="; ".join([found[0].says, named, *writers]))
    return found


JUDGES = (Quantity.LR, Quantity.LOSS, Quantity.GRAD_NORM)
# Findings that tie each logged value to the recorded one at its update, as a match does:
# under a convention where they hold, its steps are read right.
EXPLAINED = ("a logging scale", "a micro-batch's, not the update's")


def _judged(log: LoggedRun, truth: Truth) -> list[tuple[Quantity, Judged]]:
    """Each quantity ``log`` holds, judged at the updates the recording has (the others
    said left out)."""
    judges = {Quantity.LR: _lr, Quantity.LOSS: _loss, Quantity.GRAD_NORM: _grad_norm}
    found = []
    for quantity in JUDGES:
        series = log.series.get(quantity)
        if series is None:
            continue
        ks, values = log.at_updates(quantity)
        inside = (ks >= 0) & (ks < len(truth.lr))
        status, says, first = judges[quantity](ks[inside], values[inside], truth, series)
        if not inside.all():
            says += (f" ({plural(int((~inside).sum()), 'logged value')} at updates the recording "
                     f"does not have, of its {plural(len(truth.lr), 'update')}, left out)")
        found.append((quantity, (status, says, first)))
    return found


def convention(log: LoggedRun, truth: Truth, samples: int | None) -> tuple[LoggedRun, str]:
    """``log`` with its steps read by the convention under which it matches the recording
    best, and the sentence that names it. Of the log's own (detected, inferred or assumed)
    and those under which a quantity matches — updates from 0 or 1, micro-batches (the
    recording's per update) from 0 or 1, samples seen — the one that maps the fewest logged
    values outside the recording's updates (a step before update 0 cannot be), then the one
    under which the most quantities match or are explained (a scale, a micro-batch's loss),
    the log's own first where they tie. A convention the user stated is kept (its count per
    update, where not stated, the recording's)."""
    counts = {len(m) for m in truth.micro}
    accum = next(iter(counts)) if len(counts) == 1 else None
    steps = log.steps
    if steps.how.startswith("stated"):
        per = steps.per_update or (accum if steps.unit is StepUnit.MICRO_BATCH else samples)
        if not per:
            return log, f"steps: {steps.how}, and the recording does not say how many"
        if not steps.per_update:
            steps = (micro_batches(per, steps.first, "stated") if steps.unit is
                     StepUnit.MICRO_BATCH else samples_after(per, "stated"))
        return replace(log, steps=steps), f"steps: {steps.how}"
    scored = []
    for n, meaning in enumerate(candidates(steps, accum, samples)):
        run = replace(log, steps=meaning)
        judged = [j for _, j in _judged(run, truth)]
        outside = sum(int(((k < 0) | (k >= len(truth.lr))).sum())
                      for k in (run.at_updates(q)[0] for q in JUDGES))
        matching = sum(2 if j[0] is MATCHES else any(w in j[1] for w in EXPLAINED)
                       for j in judged)
        if n == 0 or any(j[0] is MATCHES for j in judged):
            scored.append((outside, -matching, n, run))
    _, unmatched, n, best = min(scored, key=lambda item: item[:3])
    if n and best.steps.how != steps.how:
        return best, (f"steps: {best.steps.how}, under which the log matches it (the log "
                      f"alone: {steps.how.split(': ', 1)[-1]})")
    if unmatched < 0:
        return best, f"steps: {steps.how}, as the recording confirms"
    return best, f"steps: {steps.how}"


Judged = tuple[Agreement, str, int | None]


def _first(ok: np.ndarray, ks: np.ndarray) -> int:
    return int(ks[int(np.argmin(ok))])


def _lr(ks: np.ndarray, values: np.ndarray, truth: Truth, series: Series) -> Judged:
    if not len(ks):
        return UNKNOWN, "the logged LR is at no update the recording has", None
    close = tolerance(series, 3e-7)
    same = close(values, truth.lr[ks])
    if same.all():
        return MATCHES, f"the logged LR is the LR each update used, at the {_n(ks)} logged", None
    for shift, whose in ((1, "next"), (-1, "previous")):
        at = ks + shift
        usable = (at >= 0) & (at < len(truth.lr))
        if usable.any() and close(values[usable], truth.lr[at[usable]]).all():
            first = _first(same, ks)
            return DIFFERS, (f"the logged LR is the {whose} update's (off by one from update "
                             f"{first}): logged {values[ks == first][0]:.6g} where update "
                             f"{first} used {truth.lr[first]:.6g}"), first
    first = _first(same, ks)
    says = (f"the logged LR differs from the LR the update used from update {first}: logged "
            f"{values[ks == first][0]:.6g}, used {truth.lr[first]:.6g}")
    steps = truth.scheduler_steps[ks] if len(truth.scheduler_steps) else np.zeros(0)
    if len(steps) and np.nanmax(steps, initial=0) > 1:
        says += (f"; the scheduler stepped up to {int(np.nanmax(steps))} times between two "
                 "updates, so the LR changed within them: a difference of the training (the "
                 "lr check judges it), which a log of one LR per update cannot show")
    return DIFFERS, says, first


def _n(ks: np.ndarray) -> str:
    return plural(len(ks), "update")


def _windows(ks: np.ndarray, per_update: np.ndarray) -> np.ndarray:
    """Each logged update's mean of the updates since the previous logged one (the Trainer's
    loss: the mean over the logging window)."""
    starts = np.concatenate([[0], ks[:-1] + 1])
    return np.array([np.mean(per_update[a:k + 1]) for a, k in zip(starts, ks, strict=True)])


def _scale(values: np.ndarray, expected: np.ndarray, close: Callable[..., np.ndarray]
           ) -> float | None:
    """The one factor ``values`` are of ``expected`` at every update (None: there is none)."""
    usable = np.abs(expected) > 0
    if not usable.any():
        return None
    factor = float(np.median(values[usable] / expected[usable]))
    return factor if bool(close(values, factor * expected).all()) else None


def _ga_words(factor: float, counts: set[int]) -> str:
    """What a scale is in micro-batches per update, where it is one."""
    if len(counts) != 1 or (ga := next(iter(counts))) < 2:
        return ""
    if math.isclose(factor, ga, rel_tol=1e-3):
        return f" (× the {ga} micro-batches of an update: the loss before ÷ GA)"
    if math.isclose(factor * ga, 1.0, rel_tol=1e-3):
        return f" (÷ the {ga} micro-batches of an update once more)"
    return ""


def _loss(ks: np.ndarray, values: np.ndarray, truth: Truth, series: Series) -> Judged:
    known = ~np.isnan(truth.loss[ks]) if len(ks) else np.zeros(0, dtype=bool)
    if not len(ks) or not known.all() or np.isnan(truth.loss[:ks.max() + 1]).any():
        return UNKNOWN, ("the recording has no loss differentiated at the updates logged "
                         "(backward was not called on a scalar, or the record is a Recorder "
                         "file)"), None
    close = tolerance(series, 1e-5)
    window = _windows(ks, truth.loss)
    averaged = bool(np.any(np.diff(np.concatenate([[-1], ks])) > 1))
    forms = [("", truth.loss[ks])]
    if averaged:
        forms.append((", averaged over each logging window (the updates since the previous "
                      "value logged)", window))
    for how, expected in forms:
        if close(values, expected).all():
            return MATCHES, (f"the logged loss is the loss each update differentiated{how}, "
                             f"at the {_n(ks)} logged"), None
    counts = {len(truth.micro[k]) for k in ks}
    for how, expected in forms:
        factor = _scale(values, expected, close)
        if factor is not None and not math.isclose(factor, 1.0, rel_tol=1e-6):
            return DIFFERS, (f"the logged loss is {factor:.3f}× the loss that was "
                             f"differentiated{how}{_ga_words(factor, counts)}, at every update: "
                             "a logging scale, the training matches"), int(ks[0])
    micro = _micro(ks, values, truth, close)
    if micro is not None:
        return micro
    expected = forms[-1][1]
    first = _first(close(values, expected), ks)
    return DIFFERS, (f"the logged loss differs from the loss that was differentiated"
                     f"{forms[-1][0]} from update {first}: logged {values[ks == first][0]:.6g}, "
                     f"differentiated {expected[ks == first][0]:.6g}"), first


def _micro(ks: np.ndarray, values: np.ndarray, truth: Truth,
           close: Callable[..., np.ndarray]) -> Judged | None:
    """A log of one micro-batch's value (the first or the last: its own loss, before ÷ GA, as
    differentiated, or a scale of it) rather than the update's."""
    counts = [len(truth.micro[k]) for k in ks]
    if min(counts) < 2:
        return None
    for index, which in ((-1, "last"), (0, "first")):
        value = np.array([truth.micro[k][index] for k in ks])
        factor = _scale(values, value, close)
        if factor is None or len(set(counts)) > 1:
            continue
        own = factor / counts[0]
        how = (", as differentiated (÷ GA)" if math.isclose(factor, 1.0, rel_tol=1e-6) else
               ", its own loss (before ÷ GA)" if math.isclose(own, 1.0, rel_tol=1e-6) else
               f", {own:.3f}× its own loss")
        return DIFFERS, (f"the logged loss is a micro-batch's, not the update's: the {which} "
                         f"of each update's {plural(counts[0], 'micro-batch', 'micro-batches')}"
                         f"{how}, from update {int(ks[0])}"), int(ks[0])
    return None


def _grad_norm(ks: np.ndarray, values: np.ndarray, truth: Truth, series: Series) -> Judged:
    if not len(ks) or np.isnan(truth.stepped[ks]).any() and np.isnan(truth.pre_clip[ks]).any():
        return UNKNOWN, ("the recording has no gradient norm at the updates logged (no "
                         "clip_grad_norm_ at each update, and no fingerprint there)"), None
    close = tolerance(series, 1e-5)
    pre, used, top = truth.pre_clip[ks], truth.stepped[ks], truth.max_norm[ks]
    clipped = ~np.isnan(top) & (pre > top)
    coef = coefficients(truth.pre_clip, truth.max_norm)
    if close(values, used).all():
        merged = merged_words(ks, values, used, truth.ranks, close)
        if clipped.any():
            return MATCHES, (f"the logged grad norm is the post-clip norm (the gradient each "
                             f"update stepped on), at the {_n(ks)} logged{merged}"), None
        return MATCHES, (f"the logged grad norm is the gradient's norm at the {_n(ks)} logged "
                         f"(no clipping changed it){merged}"), None
    if not np.isnan(pre).any() and close(values, pre).all():
        first = _first(~clipped, ks)
        return DIFFERS, (f"the logged grad norm is the pre-clip norm: clipping to max_norm "
                         f"{top[ks == first][0]:g} did happen, at {int(clipped.sum())} of the "
                         f"{_n(ks)} logged (from update {first}), where the update stepped on "
                         "a gradient of that norm"
                         f"{merged_words(ks, values, used / coef[ks], truth.ranks, close)}"), first
    local = local_words(ks, values, truth.ranks, truth.stepped, coef, close)
    if local is not None:
        return DIFFERS, local, int(ks[0])
    counts = {len(truth.micro[k]) for k in ks}
    for name, expected in (("pre-clip norm", pre), ("norm the update stepped on", used)):
        factor = None if np.isnan(expected).any() else _scale(values, expected, close)
        if factor is not None:
            return DIFFERS, (f"the logged grad norm is {factor:.3f}× the {name}"
                             f"{_ga_words(factor, counts)}, at every update: a logging scale"
                             ), int(ks[0])
    first = _first(close(values, used), ks)
    return DIFFERS, (f"the logged grad norm differs from the gradient's from update {first}: "
                     f"logged {values[ks == first][0]:.6g}, the update stepped on "
                     f"{used[ks == first][0]:.6g}"), first
