"""The floors of correct pairs: the largest per-update gaps in parameters and loss between a
candidate and its reference that must train alike, in one precision, with or without
``--deterministic``, printed as Markdown rows (``scripts/gpu-check.sh`` runs it once per
precision and switch, each in a process of its own, so that the environment variables apply
from the process's start).

    python scripts/floors.py --device cuda --precision float32 [--deterministic]
    TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 python scripts/floors.py --device cuda --precision tf32
    python scripts/floors.py --device cuda --precision bf16       # --framework deepspeed

Each pair is a full ``lrcheck.compare``: ``repeat`` trains the reference's own configuration as
the candidate (bs 32 against bs 32: the gap is the run-to-run floor, 0 where training is
deterministic); the others accumulate (and use AdamW, which amplifies a gap). TF32 comes from
``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` (read by torch at its start, held whatever a flag says:
``--deterministic`` keeps it and its record says so); bf16 is DeepSpeed's (a bfloat16 model on
float32 master weights), without a lockstep, judged free-running (``fast``: no twin).
"""

from __future__ import annotations

import argparse
import os
import time

import lrcheck

PAIRS = {  # name: the candidate's fields; the reference is bs 32, accum 1
    "repeat": {"bs": 32, "accum": 1},
    "accum 2 x 16, sgd": {"bs": 16, "accum": 2},
    "accum 4 x 8, adamw": {"bs": 8, "accum": 4, "optimizer": "adamw", "lr": 0.01},
}
BF16 = {"framework": "deepspeed", "amp": "bf16", "task": "synthetic", "samples": 1600,
        "fast": True}
TF32_FLAG = "torch.backends.cuda.matmul.allow_tf32"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--precision", choices=("float32", "tf32", "bf16"), default="float32")
    parser.add_argument("--deterministic", action="store_true")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--header", action="store_true", help="print the table's header first")
    args = parser.parse_args()
    if args.precision == "tf32" and os.environ.get("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE") != "1":
        parser.error("--precision tf32 needs TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 in the "
                     "environment (torch reads it when it starts)")
    if args.header:
        print("| precision | deterministic | pair | verdict | updates | params max rel | "
              "loss max rel | TF32 (as recorded) | seconds |")
        print("| --- | --- | --- | --- | ---: | ---: | ---: | --- | ---: |")
    failed = 0
    for name, fields in PAIRS.items():
        if args.precision == "bf16" and "adamw" in name:
            continue  # AdamW's bf16 gaps go beyond any tolerance: docs/checks.md
        extra = BF16 if args.precision == "bf16" else {}
        started = time.monotonic()
        report = lrcheck.compare(ref_bs=32, device=args.device, dtype="float32",
                                 epochs=args.epochs, deterministic=args.deterministic,
                                 **{**fields, **extra})
        seconds = time.monotonic() - started
        assert report is not None
        failed += not report.ok
        params, loss = report.check("params"), report.check("loss")
        settings = report.environment.deterministic or {}
        tf32 = settings.get(TF32_FLAG, "(not recorded: switch off)")
        print(f"| {args.precision} | {'on' if args.deterministic else 'off'} | {name} | "
              f"{report.verdict} | {len(report.candidate.updates)} | "
              f"{_number(params.max_rel_diff)} | {_number(loss.max_rel_diff)} | {tf32} | "
              f"{seconds:.1f} |", flush=True)
    return 1 if failed else 0


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.2e}"


if __name__ == "__main__":
    raise SystemExit(main())
