"""How exactly multi-process candidates train like the single-process reference: one row per
(world, accum), each a full ``lrcheck.compare`` (candidates with world > 1 launched through
torchrun), printed as a Markdown table.

    python scripts/exactness.py                       # float64 on the CPU, world 2,3 x accum 1,2,3
    python scripts/exactness.py --device cuda --worlds 1,2 --dtype float32
"""

from __future__ import annotations

import argparse
import time

import lrcheck


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--worlds", type=_ints, default=[2, 3])
    parser.add_argument("--accums", type=_ints, default=[1, 2, 3])
    parser.add_argument("--bs", type=int, default=8)
    parser.add_argument("--task", default="digits")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    print(f"{args.task}, {args.epochs} epochs, {args.dtype} on {args.device}; reference: "
          "bs = bs·accum·world, accum 1, one process\n")
    print("| world | accum | bs | effective | updates | verdict | params max rel | "
          "loss max rel | max abs ΔLR | seconds |")
    print("| ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    failed = 0
    for world in args.worlds:
        for accum in args.accums:
            started = time.monotonic()
            report = lrcheck.compare(world=world, accum=accum, bs=args.bs, task=args.task,
                                     epochs=args.epochs, dtype=args.dtype, device=args.device)
            seconds = time.monotonic() - started
            failed += not report.ok
            params, loss, lr = (report.check(n) for n in ("params", "loss", "lr"))
            print(f"| {world} | {accum} | {args.bs} | {report.pair.candidate.effective_batch} | "
                  f"{len(report.candidate.updates)} | {report.verdict} | "
                  f"{params.max_rel_diff:.2e} | {loss.max_rel_diff:.2e} | "
                  f"{lr.max_abs_diff:.1e} | {seconds:.1f} |", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
