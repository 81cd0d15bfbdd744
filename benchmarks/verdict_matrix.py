"""The verdict's calibration (BENCHMARKS.md, "the verdict"): correct configurations that a
fixed tolerance on free-running trajectories failed, and the bugs the suite and tests pin, each
through ``lrcheck.compare``; for every pair the verdict, how the effects were judged (lockstep,
the twin's noise floor, or the tolerance alone), the largest gaps and their margin to the
tolerance, the first failing check and its update, and the seconds.

    python benchmarks/verdict_matrix.py [--only NAME,...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import lrcheck

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"

# name → (compare's keywords, the verdict it must give, the check and update it must fail at)
CORRECT: dict[str, dict[str, Any]] = {
    "issue: bs4 x2": dict(bs=4, accum=2),
    "issue: bs2 x2": dict(bs=2, accum=2),
    "issue: bs1 x2, 3 epochs": dict(bs=1, accum=2, epochs=3),
    "issue: adamw, 20 epochs": dict(optimizer="adamw", epochs=20),
    "issue: adamw float32": dict(optimizer="adamw", dtype="float32"),
    "issue: adamw float32 bs8 x4": dict(optimizer="adamw", dtype="float32", accum=4, bs=8),
    "bs1 x4 adamw float32": dict(bs=1, accum=4, optimizer="adamw", dtype="float32", epochs=2),
    "bs2 x2 sgd float32 lr 0.01, 20 epochs": dict(bs=2, accum=2, dtype="float32", lr=0.01,
                                                  epochs=20),
    "bs3 x3 tail flush": dict(bs=3, accum=3, tail="flush", epochs=3),
    "tokens bs2 x4 adamw": dict(task="tokens", bs=2, accum=4, optimizer="adamw", epochs=3),
    "tokens bs4 x2 float32": dict(task="tokens", bs=4, accum=2, dtype="float32", epochs=3),
    "wine bs2 x2 adamw float32": dict(task="wine", bs=2, accum=2, optimizer="adamw",
                                      dtype="float32", epochs=10),
    "breast-cancer bs4 x4 lr 0.2": dict(task="breast-cancer", bs=4, accum=4, lr=0.2,
                                        epochs=10),
    "2 procs bs2 x2 adamw float32": dict(world=2, bs=2, accum=2, optimizer="adamw",
                                         dtype="float32", epochs=2),
    "2 procs bs4 x2 tokens": dict(world=2, bs=4, accum=2, task="tokens", epochs=2),
    "resume mid-window, adamw float32": dict(bs=4, accum=4, optimizer="adamw", dtype="float32",
                                             resume_at_micro=301, epochs=2),
    "amp fp16 bs2 x2 adamw": dict(amp="fp16", dtype="float32", bs=2, accum=2, optimizer="adamw",
                                  epochs=2),
    "amp fp16 bs4 x2, overflow at 3 and 40": dict(amp="fp16", dtype="float32", bs=4, accum=2,
                                                  inject_overflow=(3, 40)),
    "transformers tokens bs2 x2 num-items": dict(framework="transformers", task="tokens", bs=2,
                                                 accum=2, epochs=1, trainer_loss="num-items"),
    "transformers synthetic bs2 x2 adamw float32": dict(
        framework="transformers", task="synthetic", bs=2, accum=2, optimizer="adamw",
        dtype="float32", epochs=4),
    "transformers synthetic bs1 x2": dict(framework="transformers", task="synthetic", bs=1,
                                          accum=2, epochs=3),
    "lightning synthetic bs2 x2 adamw float32": dict(
        framework="lightning", task="synthetic", bs=2, accum=2, optimizer="adamw",
        dtype="float32", epochs=4),
}

BUGS: dict[str, tuple[dict[str, Any], str, int]] = {
    "partial window weighted 1/4 (adamw float32)": (
        dict(bs=4, accum=4, optimizer="adamw", dtype="float32", tail="flush", loss_norm="mean",
             epochs=3), "weights", 89),
    "LR half an update ahead (adamw float32)": (
        dict(bs=4, accum=2, optimizer="adamw", dtype="float32", epochs=2,
             scheduler=f"{FIXTURES / 'schedules.py'}:half_update_ahead_with_accum"), "lr", 0),
    "scheduler per micro-batch": (dict(policy="per-micro-batch"), "lr", 0),
    "tokens, mean loss per micro-batch": (dict(task="tokens", bs=4, accum=4, loss_norm="mean",
                                               epochs=2), "weights", 0),
    "transformers: issue's example (update 89)": (
        dict(framework="transformers", bs=4, accum=4, dtype="float32", optimizer="adamw",
             epochs=3), "weights", 89),
    "lightning tokens: micro-batch means weighted 1/2": (
        dict(framework="lightning", task="tokens", bs=2, accum=2, epochs=1), "weights", 0),
    "lightning digits: last window weighted 1/2": (
        dict(framework="lightning", epochs=2), "weights", 44),
}


def _row(name: str, report: Any, seconds: float) -> dict[str, Any]:
    checks = {c.name: c for c in report.checks}
    first = min((c for c in report.checks if c.status == "fail" and c.first_divergence
                 is not None), key=lambda c: c.first_divergence, default=None)
    cand = report.candidate
    how = ("lockstep" if cand.lockstep else
           "twin floor" if "twin reference" in checks["params"].detail else "tolerance")
    tol = report.pair.tolerances
    params, loss = checks["params"].max_rel_diff, checks["loss"].max_rel_diff
    return {
        "name": name, "verdict": report.verdict, "effects": how, "updates": len(cand.updates),
        "params": params, "params_margin": tol.params / params if params else None,
        "loss": loss, "loss_margin": tol.loss / loss if loss else None,
        "weights": checks["weights"].max_abs_diff, "first_fail": None if first is None else
        f"{first.name}@{first.first_divergence}", "seconds": round(seconds, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help="comma-separated names (substrings)")
    parser.add_argument("--json", type=Path, help="write the rows here too")
    args = parser.parse_args()
    wanted = None if args.only is None else args.only.split(",")
    rows, wrong = [], []
    cases = [(n, kw, "pass", None) for n, kw in CORRECT.items()]
    cases += [(n, kw, "fail", (check, k)) for n, (kw, check, k) in BUGS.items()]
    for name, keywords, expect, where in cases:
        if wanted is not None and not any(w in name for w in wanted):
            continue
        started = time.perf_counter()
        report = lrcheck.compare(**keywords)
        row = _row(name, report, time.perf_counter() - started)
        rows.append(row)
        ok = report.verdict == expect and (
            where is None or row["first_fail"] == f"{where[0]}@{where[1]}")
        if not ok:
            wrong.append(name)
        margin = ("" if row["params_margin"] is None
                  else f"params {row['params']:.2g} ({row['params_margin']:.0f}x)")
        lmargin = ("" if row["loss_margin"] is None
                   else f"loss {row['loss']:.2g} ({row['loss_margin']:.0f}x)")
        print(f"{'ok ' if ok else 'BAD'} {name:48} {row['verdict']:4} {row['effects']:10} "
              f"{row['updates']:5} {margin:26} {lmargin:24} {row['first_fail'] or '':12} "
              f"{row['seconds']:6.1f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(f"{len(rows) - len(wrong)} of {len(rows)} as expected" +
          (f"; not: {', '.join(wrong)}" if wrong else ""))
    raise SystemExit(1 if wrong else 0)


if __name__ == "__main__":
    main()
