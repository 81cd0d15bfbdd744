"""Two logs' losses made comparable, or said not to be (docs/logs.md, "Intervals and what a
loss is"): a loss that is the mean over a logging window (the Trainer's, ``logging_steps`` > 1)
against a log of every update, whose values are averaged over the same windows; a loss that
is one micro-batch's (Lightning's step ``self.log``) against another kind, or at another
accumulation, which means something else."""

from __future__ import annotations

import numpy as np

from lrcheck.logs.model import LoggedRun, LossIs, Quantity

SIDES = ("reference", "candidate")


def window_means(ref: LoggedRun, cand: LoggedRun
                 ) -> tuple[str, np.ndarray, np.ndarray, np.ndarray] | str | None:
    """Where one log's loss is a window mean and the other's is not: (how, the updates that
    end a window, the reference's and the candidate's loss there), the finer log averaged
    over the windows it logged every update of; a sentence where none can be compared;
    None where the losses compare as they are."""
    runs = (ref, cand)
    kinds = [run.loss_is is LossIs.WINDOW for run in runs]
    if Quantity.LOSS not in ref.series or Quantity.LOSS not in cand.series or not any(kinds):
        return None
    if all(kinds):
        if ref.every == cand.every:
            return None
        return (f"both logs average the loss over their logging windows, of {ref.every} and "
                f"{cand.every} updates: not the same means (a limit of these logs)")
    coarse = kinds.index(True)
    ends, means = runs[coarse].at_updates(Quantity.LOSS)
    at = dict(zip(*(a.tolist() for a in runs[1 - coarse].at_updates(Quantity.LOSS)),
                  strict=True))
    starts = np.concatenate([[0], ends[:-1] + 1])
    whole = [i for i, (a, k) in enumerate(zip(starts, ends, strict=True))
             if all(j in at for j in range(int(a), int(k) + 1))]
    who, other = SIDES[coarse], SIDES[1 - coarse]
    if not whole:
        return (f"the {who}'s loss is the mean over logging windows of {runs[coarse].every} "
                f"updates, and the {other} did not log every update of any one: a limit of "
                "these logs")
    averaged = np.array([np.mean([at[j] for j in range(int(starts[i]), int(ends[i]) + 1)])
                         for i in whole])
    own = means[whole]
    ks = ends[whole]
    how = (f"the {other}'s loss averaged over the {who}'s logging windows ({runs[coarse].every} "
           f"updates: the {who} logs each window's mean), at {len(ks)} windows")
    return (how, ks, averaged, own) if coarse == 1 else (how, ks, own, averaged)


def meanings_differ(ref: LoggedRun, cand: LoggedRun) -> str | None:
    """Why the two logs' losses mean different things (None: they mean the same): one is a
    micro-batch's (Lightning's step ``self.log``: the update's last micro-batch) and the
    runs accumulate differently, or the other is an update's."""
    runs = (ref, cand)
    micro = [run.loss_is is LossIs.MICRO_BATCH for run in runs]
    if not any(micro):
        return None
    accums = [run.accum for run in runs]
    if all(micro) and accums[0] == accums[1] and accums[0] is not None:
        return None
    said = ", ".join(f"the {who}'s: one micro-batch per update" if m and a == 1 else
                     f"the {who}'s: the last of {a} micro-batches" if m and a else
                     f"the {who}'s: a micro-batch's" if m else f"the {who}'s: {r.loss_is.value}"
                     for who, m, a, r in zip(SIDES, micro, accums, runs, strict=True))
    return ("the logged losses mean different things (Lightning's self.log on a step logs "
            f"that batch's loss, not the update's: {said})")
