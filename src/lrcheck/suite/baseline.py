"""Baselines: what each pair of a suite gave once, to tell a later run what changed.

A baseline file (JSON, ``schema_version`` 1, ``kind`` ``lrcheck-baseline``) holds per pair name
the digest of the candidate's and the reference's LR traces (``trace.lr_digest``), the number of
updates, the final LR, the candidate's final accuracy and macro-F1, and the pair's settings.
Comparing a report with its record gives a ``Regression`` when an LR trace changed or accuracy or
macro-F1 dropped by more than the pair's ``tol_metrics``. Pairs are matched by name: give pairs a
``name`` so that a change of their settings is compared, not taken for a new pair.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from lrcheck.errors import SpecError
from lrcheck.plan.digest import lr_digest
from lrcheck.result import Report
from lrcheck.suite.outcome import PairOutcome, Regression
from lrcheck.trace import METRICS, metric_values

SCHEMA_VERSION = 1
KIND = "lrcheck-baseline"
RECORD_KEYS = ("lr_digest", "reference_lr_digest", "updates", "metrics", "pair")


class _Kept(TypedDict):
    lr_digest: str
    reference_lr_digest: str
    updates: int
    metrics: dict[str, float] | None
    pair: dict[str, object]


class BaselineRecord(_Kept, total=False):
    """What a baseline file keeps of one pair's report (``final_lr``: not in older files)."""

    final_lr: float | None


def record(report: Report) -> BaselineRecord:
    """The baseline record of one pair's report."""
    cand = report.candidate
    return {
        "lr_digest": lr_digest(cand.lrs()),
        "reference_lr_digest": lr_digest(report.reference.lrs()),
        "updates": len(cand.updates),
        "final_lr": cand.updates[-1].lr[0] if len(cand.updates) else None,
        "metrics": None if cand.metrics is None else cand.metrics.to_dict(),
        "pair": report.pair.to_dict(),
    }


def baseline_document(outcomes: list[PairOutcome], suite_path: str) -> dict[str, object]:
    """The baseline file's content: a record for every pair that has a report."""
    from lrcheck.version import __version__

    return {"schema_version": SCHEMA_VERSION, "kind": KIND, "lrcheck": __version__,
            "suite": suite_path,
            "pairs": {o.entry.name: record(o.report) for o in outcomes if o.report is not None}}


def load_baseline(path: str | Path) -> dict[str, BaselineRecord]:
    """The records of the baseline file at ``path``, by pair name. A missing, unreadable or
    corrupt file, or one of another schema version, is bad input (``SpecError``)."""
    where = f"--baseline {str(path)!r}"
    fix = "save one with --save-baseline"
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecError(f"{where} does not exist; {fix}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"{where} cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{where} is corrupt: not JSON ({exc}); {fix}") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise SpecError(f"{where} is not an lrcheck baseline (no \"kind\": \"{KIND}\"); {fix}")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise SpecError(f"{where} has schema version {data.get('schema_version')!r}; this "
                        f"lrcheck reads version {SCHEMA_VERSION}; {fix}")
    pairs = data.get("pairs")
    if not isinstance(pairs, dict):
        raise SpecError(f"{where} is corrupt: \"pairs\" is not an object; {fix}")
    for name, rec in pairs.items():
        missing = [k for k in RECORD_KEYS if not isinstance(rec, dict) or k not in rec]
        if missing:
            raise SpecError(f"{where} is corrupt: pair {name!r} lacks {', '.join(missing)}; {fix}")
        wrong = _wrong_types(rec)
        if wrong:
            raise SpecError(f"{where} is corrupt: pair {name!r}'s {wrong}; {fix}")
    return pairs


def _wrong_types(rec: dict[str, object]) -> str | None:
    """What in a baseline record read from a file is not of its type, in words; None: all is."""
    metrics = rec["metrics"]
    for key, fits in (("lr_digest", isinstance(rec["lr_digest"], str)),
                      ("reference_lr_digest", isinstance(rec["reference_lr_digest"], str)),
                      ("updates", isinstance(rec["updates"], int)),
                      ("final_lr", rec.get("final_lr") is None
                       or isinstance(rec.get("final_lr"), int | float)),
                      ("metrics", metrics is None or isinstance(metrics, dict) and all(
                          isinstance(v, int | float) for v in metrics.values())),
                      ("pair", isinstance(rec["pair"], dict))):
        if not fits:
            return f"{key!r} is {rec.get(key)!r}"
    return None


def regressions(report: Report, rec: BaselineRecord) -> list[Regression]:
    """What changed for the worse against the baseline record ``rec`` of the same pair."""
    found = []
    changed = _changed_settings(rec["pair"], report.pair.to_dict())
    because = f"; settings changed: {changed}" if changed else ""
    cand = report.candidate
    moved = [who for who, trace, digest in (("candidate's", cand, rec["lr_digest"]),
                                            ("reference's", report.reference,
                                             rec["reference_lr_digest"]))
             if lr_digest(trace.lrs()) != digest]
    if moved:
        final = cand.updates[-1].lr[0] if len(cand.updates) else None
        found.append(Regression(
            "lr", f"the {' and the '.join(moved)} LR trace{'s' if len(moved) > 1 else ''} "
                  f"changed (candidate: {rec['updates']} → {len(cand.updates)} updates, final LR "
                  f"{_g(rec.get('final_lr'))} → {_g(final)}){because}"))
    base, now = rec.get("metrics") or {}, metric_values(cand.metrics)
    tol = report.pair.tolerances.metrics
    for key, label in METRICS:
        if key in base and key in now and base[key] - now[key] > tol:
            found.append(Regression(key, f"{label} dropped {base[key]:.4f} → {now[key]:.4f} "
                                         f"({now[key] - base[key]:+.4f}, tolerance {tol:g})"))
    return found


def _changed_settings(before: dict[str, object], after: dict[str, object]) -> str:
    """``scheduler 'cosine' → 'linear'`` for every setting of the pair that differs."""
    changes = []
    for side, prefix in (("candidate", ""), ("reference", "ref_"), ("tolerances", "tol_")):
        old, new = before.get(side) or {}, after.get(side) or {}
        if not (isinstance(old, dict) and isinstance(new, dict)):
            continue  # a pair of commands: its sides are the folders it was recorded into
        for key in sorted(set(old) | set(new)):
            if side == "reference" and key not in ("bs", "world"):
                continue  # the rest is the candidate's, or fixed
            if old.get(key) != new.get(key):
                changes.append(f"{prefix}{key} {old.get(key)!r} → {new.get(key)!r}")
    return ", ".join(changes)


def _g(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"
