"""``token-weights``: the weight of every token in update k's gradient — ``∂L/∂logp_t``, the
gradient of the loss with respect to each scored token's log-probability, measured in the
backward pass (``record.tokens``) — is the same in both runs, token by token, up to the
rounding of the dtype (``causes.WEIGHT_RTOL``). It is how an RL loss (GRPO, DPO: built from
log-probs, not a torch loss) is held to the standard of ``weights``: where the two runs update
on the same rows (``data``) from the same state (lockstep), every token must weigh the same.

Where a token differs, the reduction the candidate implemented is named from the ratios of
its weights to the reference's (``reduction``): the same ratio on every token (a constant: the
loss scaled as a whole), one ratio per micro-batch (a mean per micro-batch where the reference
took one over the window), one per sequence following its length (a sequence-mean where the
reference took a token-mean, or the reverse), or none of these (token by token: a term that
follows another normalisation). Where both runs weighed the uses of the log-probs apart
(``record.uses``: a loss of two terms reads them twice), each use is named on its own: which
term follows the reference's reduction, and which another."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from lrcheck.checks.status import FAIL, PASS, TINY, CheckResult
from lrcheck.plan.windows import MicroBatch, Window
from lrcheck.words import plural

# Sample id → its tokens' weights, summed over the times it was fed (the same row, the same
# tokens), and the candidate's micro-batch that fed it.
Tokens = dict[int, tuple[np.ndarray, int]]
# The uses of the log-probs (``record.uses``) as TRL's GRPO loss reads them.
TERMS = {"logp − x": "logp − old (GRPO's ratio: the policy term)",
         "x − logp": "ref − logp (GRPO's KL estimator: the KL term)",
         "logp × x": "logp × x (the log-probs weighed as they are: an SFT or auxiliary term)"}
# The relative spread within which a use's ratios are one ratio, for naming only (the check
# fails at the dtype's tolerance first): a KL estimator's gradient, 1 − e^(ref − logp), is a
# difference of near-equal terms computed in the loss's dtype, known in float32 to about 1e-4
# of itself where the policy is 1 % from the reference.
NAMING_RTOL = 1e-3


def _weights(micro: MicroBatch) -> tuple[np.ndarray, ...] | None:
    return micro.token_weights


def by_sample(window: Window,
              pick: Callable[[MicroBatch], tuple[np.ndarray, ...] | None] = _weights
              ) -> Tokens | None:
    """Per sample of ``window``, its tokens' weights (``pick``: all of them, or one use's)
    and the micro-batch that fed it; None where a micro-batch's tokens were not measured."""
    out: Tokens = {}
    for m, micro in enumerate(window):
        weights = pick(micro)
        if weights is None or len(weights) != len(micro.ids):
            return None
        for i, w in zip(micro.ids.tolist(), weights, strict=True):
            if i in out and len(out[i][0]) == len(w):
                out[i] = (out[i][0] + w, out[i][1])
            else:
                out[i] = (np.asarray(w, dtype=np.float64), m)
    return out


def check_token_weights(ref: Sequence[Window], cand: Sequence[Window],
                        pairs: tuple[np.ndarray, np.ndarray], tol: float) -> CheckResult | None:
    """The check over the aligned updates ``pairs`` (reference, candidate indices); None where
    neither run measured its tokens (no report line)."""
    compared = 0
    worst = 0.0
    for i, j in zip(*pairs, strict=True):
        a = by_sample(ref[i]) if i < len(ref) else None
        b = by_sample(cand[j]) if j < len(cand) else None
        if a is None or b is None:
            continue
        k = int(i)
        if set(a) != set(b) or any(len(a[s][0]) != len(b[s][0]) for s in a):
            return CheckResult("token-weights", FAIL, None, k,
                               f"first differ at update {k}, which was fed other rows or "
                               "tokens than the reference's: see data")
        ids = sorted(a)
        wa = np.concatenate([a[s][0] for s in ids]) if ids else np.empty(0)
        wb = np.concatenate([b[s][0] for s in ids]) if ids else np.empty(0)
        rel = np.abs(wb - wa) / np.maximum(np.abs(wa), TINY)
        compared += 1
        if len(rel) and not bool(np.all(rel <= tol)):
            here = float(rel.max())
            named = by_use(ref[i], cand[j], tol) or reduction(a, b, tol)
            return CheckResult("token-weights", FAIL, here, k,
                               f"first differ at update {k}: {named} (max "
                               f"relative {here:.3g} > {tol:g} over {len(wa)} tokens)", here)
        worst = max(worst, float(rel.max(initial=0.0)))
    if not compared:
        return None
    return CheckResult("token-weights", PASS, worst, None,
                       f"the same weight ∂L/∂logp_t on every token at all "
                       f"{plural(compared, 'update')}, measured in the backward pass (max "
                       f"relative {worst:.3g} ≤ {tol:g})", worst)


def by_use(ref: Window, cand: Window, tol: float) -> str | None:
    """Each use of the log-probs named on its own (the same as the reference's, or the
    reduction it follows: ``reduction``), where both runs weighed the same uses apart; None
    otherwise."""
    labels = {name for m in (*ref, *cand) for name in (m.token_uses or {})}
    parts = []
    for name in sorted(labels):
        def pick(m: MicroBatch, name: str = name) -> tuple[np.ndarray, ...] | None:
            return (m.token_uses or {}).get(name)
        a, b = by_sample(ref, pick), by_sample(cand, pick)
        if a is None or b is None or set(a) != set(b):
            return None
        wa, wb = (np.concatenate([t[s][0] for s in sorted(a)] or [np.empty(0)]) for t in (a, b))
        if len(wa) != len(wb):
            return None
        same = bool(np.all(np.abs(wb - wa) <= tol * np.maximum(np.abs(wa), TINY)))
        parts.append(f"through {TERMS.get(name, name)}, "
                     + ("every token weighs as in the reference" if same
                        else reduction(a, b, max(tol, NAMING_RTOL), "this term")))
    if len(parts) < 2:
        return None
    return "by the uses of the log-probs in the loss: " + "; ".join(parts)


def reduction(ref: Tokens, cand: Tokens, tol: float, what: str = "the loss") -> str:
    """What the candidate did with the reference's token weights (of ``what``), named from
    their ratios on the tokens that weigh something in the reference."""
    ratios: dict[int, list[float]] = {}  # per candidate micro-batch
    rows: list[tuple[float, int]] = []  # per sequence: its one ratio, its weighed tokens
    per_token = False
    for s, (a, _) in ref.items():
        b, m = cand[s]
        on = np.abs(a) > 0
        if not on.any():
            continue
        r = b[on] / a[on]
        ratios.setdefault(m, []).extend(r.tolist())
        if np.ptp(r) > tol * max(abs(float(r[0])), TINY):
            per_token = True
        rows.append((float(r.mean()), int(on.sum())))
    if not rows:
        return ("the reference's tokens weigh 0 and the candidate's do not: a term the "
                "reference does not have")
    means = {m: float(np.mean(r)) for m, r in sorted(ratios.items())}
    if per_token:
        return (_added_per_micro_batch(ref, cand, tol)
                or "token by token, not one ratio per sequence: a term of the loss (a KL term, "
                "an auxiliary loss) follows another normalisation than the reference's")
    if _same(list(means.values()), tol) and all(_same(r, tol) for r in ratios.values()):
        c = next(iter(means.values()))
        return (f"every token weighs {c:.6g}× the reference's: a constant, {what} scaled as "
                "a whole (not divided by the accumulation steps, or divided twice)")
    if all(_same(r, tol) for r in ratios.values()):
        each = ", ".join(f"{v:.4g}×" for v in means.values())
        return (f"one ratio per micro-batch ({each} the reference's): a mean per micro-batch, "
                "where the reference's is a token-mean over the window")
    added = _added_per_micro_batch(ref, cand, tol)
    if added:
        return added
    r, n = np.array([x for x, _ in rows]), np.array([n for _, n in rows], dtype=np.float64)
    if _same((r * n).tolist(), tol * 10):
        return ("one ratio per sequence, as 1/its tokens: a sequence-mean (each sequence's "
                "tokens divided by its length), where the reference's is a token-mean")
    if _same((r / n).tolist(), tol * 10):
        return ("one ratio per sequence, as its tokens: a token-mean, where the reference's "
                "is a sequence-mean")
    return "one ratio per sequence, following neither its length nor its micro-batch"


def _added_per_micro_batch(ref: Tokens, cand: Tokens, tol: float) -> str | None:
    """Where the candidate's weights are the reference's plus one value per micro-batch on the
    tokens that differ (the others equal): a term of the loss taken as a mean per micro-batch
    beside terms that agree. None otherwise."""
    scale = max((float(np.abs(a).max(initial=0.0)) for a, _ in ref.values()), default=0.0)
    added: dict[int, list[float]] = {}
    for s, (a, _) in ref.items():
        b, m = cand[s]
        d = b - a
        added.setdefault(m, []).extend(d[np.abs(d) > tol * max(scale, TINY)].tolist())
    if (not any(added.values()) or any(len(v) == 1 for v in added.values())
            or not all(_same(v, tol * 10) for v in added.values())):
        return None  # nothing added, or not one value shared by a micro-batch's tokens
    each = ", ".join(f"{float(np.mean(v)):.4g}" if v else "0" for _, v in sorted(added.items()))
    return (f"the reference's weights plus one value per micro-batch on some tokens ({each}): a "
            "term of the loss taken as a mean per micro-batch beside terms that agree (two "
            "terms, two normalisations)")


def _same(values: Sequence[float], tol: float) -> bool:
    """Whether ``values`` agree to ``tol``, relative."""
    if not values:
        return True
    v = np.asarray(values, dtype=np.float64)
    return bool(np.ptp(v) <= tol * max(float(np.abs(v).max()), TINY))
