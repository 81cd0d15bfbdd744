"""``optimizer``: the optimizer is a cause, judged exactly at every update — its class, its
settings per param group (``lrcheck.hparams``: momentum, betas, eps, weight decay, amsgrad,
nesterov…; the LR is the ``lr`` check's) and its state's keys. A schedule may drive a setting
(OneCycleLR cycles the momentum): each is compared update by update, not once."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lrcheck.checks.status import FAIL, PASS, SKIP, CheckResult
from lrcheck.hparams import OptimizerSettings, Settings, Value
from lrcheck.words import plural

# Differences named at the first update where the optimizers part.
SHOWN = 3


def _shown(value: Value | None) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        return "(" + ", ".join(f"{v:g}" for v in value) + ")"
    return str(value) if isinstance(value, bool) else f"{value:g}"


def _same(a: Value | None, b: Value | None, tol: float) -> bool:
    """Equal, numbers within ``tol·max(1, |a|)`` (as ``lr`` judges: a schedule's arithmetic)."""
    if isinstance(a, bool) or isinstance(b, bool) or a is None or b is None:
        return a == b
    x, y = np.atleast_1d(np.asarray(a, dtype=np.float64)), np.atleast_1d(np.asarray(b))
    return x.shape == y.shape and bool(np.all(np.abs(x - y) <= tol * np.maximum(1.0, np.abs(x))))


def _settings_apart(ref: Settings, cand: Settings, tol: float) -> list[tuple[str, int]]:
    """(setting, param group) where the two differ, a setting only one has among them."""
    out = []
    for key in sorted(set(ref) | set(cand)):
        mine, theirs = cand.get(key, ()), ref.get(key, ())
        for group in range(max(len(mine), len(theirs))):
            a = theirs[group] if group < len(theirs) else None
            b = mine[group] if group < len(mine) else None
            if not _same(a, b, tol):
                out.append((key, group))
    return out


def _apart(ref: OptimizerSettings, cand: OptimizerSettings, i: int, j: int, tol: float
           ) -> list[str]:
    """What differs between the reference's update ``i`` and the candidate's ``j``, in words."""
    r, c = ref.settings[i], cand.settings[j]
    groups_r = len(next(iter(r.values()), ())) or len(ref.state[i])
    groups_c = len(next(iter(c.values()), ())) or len(cand.state[j])
    if groups_r != groups_c:
        return [f"the candidate's {cand.short} has {plural(groups_c, 'param group')}, the "
                f"reference's {groups_r}"]
    found = []
    for key, g in _settings_apart(r, c, tol):
        a = r[key][g] if key in r else None
        b = c[key][g] if key in c else None
        found.append(f"the candidate's {cand.short} has {key} {_shown(b)} in group {g}, the "
                     f"reference's {_shown(a)}")
    for g, (a_keys, b_keys) in enumerate(zip(ref.state[i], cand.state[j], strict=False)):
        if set(a_keys) != set(b_keys):
            found.append(f"the candidate's {cand.short} keeps "
                         f"{', '.join(b_keys) or 'no state'} for group {g}, the reference's "
                         f"{', '.join(a_keys) or 'no state'}")
    return found


def check_optimizer(ref: OptimizerSettings | None, cand: OptimizerSettings | None,
                    pairs: tuple[np.ndarray, np.ndarray], tol: float) -> CheckResult | None:
    """``optimizer``: the same class, settings and state's keys at every aligned update
    (``pairs``: the reference's and the candidate's indices); settings within ``tol`` (the
    ``lr`` check's). None where neither run recorded its optimizer (a Recorder file its own
    code wrote)."""
    if ref is None and cand is None:
        return None
    if ref is None or cand is None:
        who = "reference" if ref is not None else "candidate"
        return CheckResult("optimizer", SKIP, None, None,
                           f"not recorded: only the {who} recorded its optimizer's settings")
    if ref.cls and cand.cls and ref.cls != cand.cls:
        return CheckResult("optimizer", FAIL, None, 0,
                           f"the candidate steps {cand.cls}, the reference {ref.cls}: not the "
                           "same optimizer")
    for i, j in zip(*pairs, strict=True):
        found = _apart(ref, cand, int(i), int(j), tol)
        if found:
            return _failed(ref, cand, pairs, int(i), found, tol)
    return _passed(ref, pairs)


def _failed(ref: OptimizerSettings, cand: OptimizerSettings,
            pairs: tuple[np.ndarray, np.ndarray], k: int, found: Sequence[str], tol: float
            ) -> CheckResult:
    """The failure at update ``k``, and at how many aligned updates the optimizers differ."""
    apart = sum(1 for i, j in zip(*pairs, strict=True)
                if _apart(ref, cand, int(i), int(j), tol))
    more = f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
    return CheckResult("optimizer", FAIL, None, k,
                       f"{'; '.join(found[:SHOWN])} (from update {k}){more}; they differ at "
                       f"{apart} of {plural(len(pairs[0]), 'update')}: not the same "
                       "optimizer, so the trainings differ whatever the batch")


def _passed(ref: OptimizerSettings, pairs: tuple[np.ndarray, np.ndarray]) -> CheckResult:
    at = [int(i) for i in pairs[0]]
    if not at:
        return CheckResult("optimizer", SKIP, None, None, "no update to compare")
    keys = sorted({key for i in at for key in ref.settings[i]})
    moving = sorted({key for key in keys for i in at
                     if ref.settings[i].get(key) != ref.settings[at[0]].get(key)})
    state = sorted({key for i in at for group in ref.state[i] for key in group})
    driven = (f"; {', '.join(moving)} changed over the updates (a schedule), the same in both"
              if moving else "")
    return CheckResult("optimizer", PASS, 0.0, None,
                       f"{ref.short} in both, with the same {', '.join(keys) or 'settings'} in "
                       f"every param group at all {plural(len(at), 'update')}{driven}; its "
                       f"state keeps {', '.join(state) or 'nothing'} in both")
