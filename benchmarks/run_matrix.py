"""``lrcheck run`` on users' scripts that no test names (``users/``), with the defaults: every
correct pair must pass and every bug must fail a named check at its update (issue 37). Per
pair: the verdict, how the effects were judged, the first failing check and its update, whether
that is what the pair must give, the margin of grads and params where they pass, and the seconds.

    python benchmarks/run_matrix.py [--only NAME,...] [--json FILE] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

USERS = Path(__file__).resolve().parent / "users"


def cmd(script: str, *flags: str) -> str:
    return shlex.join([sys.executable, str(USERS / script), *flags])


GPT, TAB, REC = "gpt_char.py", "tabular.py", "sparse_rec.py"
PAD, HF, LIT, ACC = "padded_tokens.py", "hf_trainer.py", "lightning_reg.py", "accel.py"
# name → (reference, candidate, the verdict, for a failure the check that must fail first and
# its update (None: any update))
PAIRS: dict[str, tuple[str, str, str, tuple[str, int | None] | None]] = {
    "gpt float32 adamw 4x4": (cmd(GPT), cmd(GPT, "--bs", "4", "--accum", "4"), "pass", None),
    "gpt float32 adamw 1x16": (cmd(GPT), cmd(GPT, "--bs", "1", "--accum", "16"), "pass", None),
    "gpt bf16 autocast 8x2": (cmd(GPT, "--autocast"),
                              cmd(GPT, "--autocast", "--bs", "8", "--accum", "2"), "pass", None),
    "gpt float64 checkpointing 4x4": (cmd(GPT, "--dtype", "float64"),
                                      cmd(GPT, "--dtype", "float64", "--checkpointing", "--bs",
                                          "4", "--accum", "4"), "pass", None),
    "gpt bug: lr per micro-batch": (cmd(GPT), cmd(GPT, "--bs", "4", "--accum", "4", "--bug",
                                                 "lr-per-micro"), "fail", ("lr", 0)),
    "gpt bug: loss not / accum": (cmd(GPT), cmd(GPT, "--bs", "4", "--accum", "4", "--bug",
                                               "no-accum-divide"), "fail", ("weights", 0)),
    "gpt bug: clip per micro-batch": (cmd(GPT), cmd(GPT, "--bs", "4", "--accum", "4", "--bug",
                                                   "clip-per-micro"), "fail", ("cadence", 0)),
    "gpt bf16 bug: loss not / accum": (cmd(GPT, "--autocast"),
                                       cmd(GPT, "--autocast", "--bs", "8", "--accum", "2",
                                           "--bug", "no-accum-divide"), "fail", ("weights", 0)),
    "tabular sgd momentum 8x4": (cmd(TAB), cmd(TAB, "--bs", "8", "--accum", "4"), "pass", None),
    "tabular two optimizers 16x2": (cmd(TAB, "--two-optimizers"),
                                    cmd(TAB, "--two-optimizers", "--bs", "16", "--accum", "2"),
                                    "pass", None),
    "tabular momentum 0.9 vs 0": (cmd(TAB), cmd(TAB, "--bs", "8", "--accum", "4", "--momentum",
                                               "0"), "fail", ("optimizer", 0)),
    "tabular bug: scheduler per micro-batch": (cmd(TAB), cmd(TAB, "--bs", "8", "--accum", "4",
                                                             "--bug", "sched-per-micro"),
                                               "fail", ("lr", None)),
    "tabular bug: micro-batch mean / accum": (cmd(TAB), cmd(TAB, "--bs", "8", "--accum", "4",
                                                            "--bug", "mean-per-micro"),
                                              "fail", ("weights", 17)),
    "sparse SparseAdam + AdamW 16x4": (cmd(REC), cmd(REC, "--bs", "16", "--accum", "4"),
                                       "pass", None),
    "sparse bug: loss not / accum": (cmd(REC), cmd(REC, "--bs", "16", "--accum", "4", "--bug",
                                                  "no-accum-divide"), "fail", ("weights", 0)),
    "padded float32 param groups 4x4": (cmd(PAD), cmd(PAD, "--bs", "4", "--accum", "4"),
                                        "pass", None),
    "padded float64 1x16": (cmd(PAD, "--dtype", "float64"),
                            cmd(PAD, "--dtype", "float64", "--bs", "1", "--accum", "16"),
                            "pass", None),
    "padded compile 4x4": (cmd(PAD, "--compile"), cmd(PAD, "--compile", "--bs", "4", "--accum",
                                                      "4"), "pass", None),
    "padded bug: token mean per micro-batch": (cmd(PAD), cmd(PAD, "--bs", "4", "--accum", "4",
                                                             "--bug", "token-mean-per-micro"),
                                               "fail", ("weights", 0)),
    "padded bug: warmup in micro-batches": (cmd(PAD), cmd(PAD, "--bs", "4", "--accum", "4",
                                                          "--bug", "warmup-in-micro"),
                                            "fail", ("lr", 0)),  # 4 steps before update 0's
    "hf trainer 4x4": (cmd(HF), cmd(HF, "--bs", "4", "--accum", "4"), "pass", None),
    "hf trainer gradient checkpointing 4x4": (cmd(HF, "--checkpointing"),
                                              cmd(HF, "--checkpointing", "--bs", "4", "--accum",
                                                  "4"), "pass", None),
    "hf trainer dropout 0.1 8x2": (cmd(HF, "--dropout", "0.1"),
                                   cmd(HF, "--dropout", "0.1", "--bs", "8", "--accum", "2"),
                                   "pass", None),
    "hf dropout 0.1 bug: compute_loss token mean": (cmd(HF, "--dropout", "0.1"), cmd(
        HF, "--dropout", "0.1", "--bs", "8", "--accum", "2", "--bug", "mean-loss"),
        "fail", ("weights", 0)),
    "hf bug: compute_loss token mean": (cmd(HF), cmd(HF, "--bs", "4", "--accum", "4", "--bug",
                                                     "mean-loss"), "fail", ("weights", 0)),
    "hf bug: warmup in micro-batches": (cmd(HF), cmd(HF, "--bs", "4", "--accum", "4", "--bug",
                                                     "warmup-micro"), "fail", ("lr", 1)),
    "lightning onecycle 8x4": (cmd(LIT), cmd(LIT, "--bs", "8", "--accum", "4"), "pass", None),
    "lightning float64 16x2": (cmd(LIT, "--dtype", "float64"),
                               cmd(LIT, "--dtype", "float64", "--bs", "16", "--accum", "2"),
                               "pass", None),
    "lightning bug: onecycle over micro-batches": (cmd(LIT), cmd(LIT, "--bs", "8", "--accum",
                                                                 "4", "--bug", "onecycle-micro"),
                                                   "fail", ("lr", 1)),
    "lightning short last window 8x4": (cmd(LIT, "--n", "250"),
                                        cmd(LIT, "--n", "250", "--bs", "8", "--accum", "4"),
                                        "fail", ("weights", 7)),
    "accelerate 8x4": (cmd(ACC), cmd(ACC, "--bs", "8", "--accum", "4"), "pass", None),
    # accelerate launch --cpu with --num_processes 2 (no --multi_cpu) starts one process: the
    # candidate's window is 16 samples, not 32
    "accelerate launch --cpu --num_processes 2": (cmd(ACC), shlex.join([
        sys.executable, "-m", "accelerate.commands.launch", "--num_processes", "2", "--cpu",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        str(USERS / ACC), "--bs", "4", "--accum", "4"]), "fail", ("data", 0)),
    "accelerate torchrun 2 processes x 4x4": (cmd(ACC), shlex.join([
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
        str(USERS / ACC), "--bs", "4", "--accum", "4"]), "pass", None),
    "accelerate bug: loss / accum twice": (cmd(ACC), cmd(ACC, "--bs", "8", "--accum", "4",
                                                         "--bug", "double-divide"),
                                           "fail", ("weights", 0)),
    "accelerate bug: clip every micro-batch": (cmd(ACC), cmd(ACC, "--bs", "8", "--accum", "4",
                                                             "--bug", "clip-every"),
                                               "fail", ("cadence", 0)),
}


def run_pair(ref: str, cand: str, out: Path) -> tuple[dict[str, Any], float, int]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lrcheck", "run", "--quiet", "--out", str(out),
                           ref, cand], capture_output=True, text=True)
    seconds = time.monotonic() - started
    try:
        result = json.loads((out / "result.json").read_text())
    except (OSError, ValueError):
        result = {"verdict": f"none (exit {proc.returncode}): {proc.stderr.strip()[-300:]}",
                  "checks": []}
    return result, seconds, proc.returncode


def judged(result: dict[str, Any], want: str, first: tuple[str, int | None] | None) -> str:
    checks = result.get("checks", [])
    failed = [c for c in checks if c["status"] == "fail"]
    if want == "pass":
        return "right" if result.get("verdict") == "pass" else "WRONG"
    if result.get("verdict") != "fail" or first is None:
        return "WRONG"
    name, k = first
    hit = [c for c in failed if c["name"] == name]
    if not hit:
        return f"WRONG (no {name} failure)"
    return "right" if k is None or hit[0]["first_divergence"] == k else \
        f"WRONG ({name} at {hit[0]['first_divergence']}, not {k})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep each pair's report folder under KEEP")
    args = parser.parse_args()
    names = [n for n in PAIRS if not args.only or n in args.only.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="lrcheck-run-matrix-") as tmp:
        for i, name in enumerate(names):
            ref, cand, want, first = PAIRS[name]
            out = args.keep / name.replace(" ", "_").replace("/", "_").replace(":", "") \
                if args.keep else Path(tmp) / str(i)
            result, seconds, code = run_pair(ref, cand, out)
            checks = {c["name"]: c for c in result.get("checks", [])}
            failed = [f"{c['name']}@{c['first_divergence']}" for c in checks.values()
                      if c["status"] == "fail"]
            warned = [c["name"] for c in checks.values() if c["status"] == "warn"]
            row = {"pair": name, "want": want, "verdict": result.get("verdict"), "exit": code,
                   "ok": judged(result, want, first), "failed": failed, "warned": warned,
                   "grads": checks.get("grads", {}).get("detail", "")[:160],
                   "seconds": round(seconds, 1)}
            rows.append(row)
            print(f"{row['ok']:<6} {name:<40} {row['verdict']!s:<6} exit {code} "
                  f"failed {','.join(failed) or '-'} warned {','.join(warned) or '-'} "
                  f"{seconds:.1f} s", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    wrong = [r for r in rows if r["ok"] != "right"]
    print(f"{len(rows) - len(wrong)} of {len(rows)} verdicts right")


if __name__ == "__main__":
    main()
