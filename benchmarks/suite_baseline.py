"""Bare-PyTorch baseline of ``benchmarks/suite-12.toml``: in one interpreter, the 3 references
(bs 32, one per schedule) and the 12 candidates (bs 16/8/4/2 x accum 2/4/8/16), each trained by
``baseline.train`` exactly as lrcheck trains them. The floor of ``lrcheck suite`` on that file.

    python benchmarks/suite_baseline.py [--epochs 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import load, train  # noqa: E402

SCHEDULERS = ("cosine", "linear", "wsd")
SPLITS = ((16, 2), (8, 4), (4, 8), (2, 16))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    xt, yt, xe, y_test = load(0)
    started = time.perf_counter()
    trainings = 0
    for name in SCHEDULERS:
        common = dict(epochs=args.epochs, seed=0, scheduler=name)
        ref = train(xt, yt, xe, y_test, bs=32, accum=1, **common)
        trainings += 1
        for bs, accum in SPLITS:
            cand = train(xt, yt, xe, y_test, bs=bs, accum=accum, **common)
            trainings += 1
            if abs(cand[0] - ref[0]) > 0.01:
                print(f"{name} bs{bs}x{accum}: accuracy {cand[0]:.4f} vs {ref[0]:.4f}")
    print(f"{trainings} trainings in {time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main()
