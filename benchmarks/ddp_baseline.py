"""Bare torchrun DDP baseline of ``lrcheck compare --nproc 2 --bs 8 --accum 2``: the same work
without lrcheck. Both ranks train the candidate with DDP (gloo), then rank 0 trains the
reference (bs 32, one process) alone, as lrcheck's torchrun job does. Micro-batch m of an update
is ``global[m·bs·world:(m+1)·bs·world]``, rank r takes every world-th element from r, each
micro-batch's loss is ``sum · world / n_global``, and gradients are all-reduced only on an
update's last micro-batch (``no_sync`` before it).

    python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        benchmarks/ddp_baseline.py [--epochs 5] [--bs 8] [--accum 2]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import build, evaluate, load, make_schedule, train  # noqa: E402


def train_ddp(x, y, x_test, y_test, *, bs: int, accum: int, epochs: int, seed: int) -> float:
    rank, world = dist.get_rank(), dist.get_world_size()
    net, optimizer = build(x.shape[1], seed)
    model = torch.nn.parallel.DistributedDataParallel(net)
    effective = bs * accum * world
    per_epoch = len(y) // effective
    total = per_epoch * epochs
    scheduler = make_schedule(optimizer, "cosine", total, round(0.1 * total))
    acc = 0.0
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(y))
        for k in range(per_epoch):
            batch = order[k * effective:(k + 1) * effective]
            loss_sum = torch.zeros((), dtype=torch.float64)
            for m in range(accum):
                idx = torch.from_numpy(batch[m * bs * world:(m + 1) * bs * world][rank::world])
                last = m == accum - 1
                with contextlib.nullcontext() if last else model.no_sync():
                    per_sample = F.cross_entropy(model(x[idx]), y[idx], reduction="none")
                    (per_sample.sum() * (world / effective)).backward()
                loss_sum += per_sample.detach().sum() / effective
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
            dist.all_reduce(loss_sum)  # the update's training loss, as lrcheck records it
        acc, _ = evaluate(net, x_test, y_test)
    return acc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--bs", type=int, default=8)
    parser.add_argument("--accum", type=int, default=2)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    xt, yt, xe, y_test = load(0)
    started = time.perf_counter()
    acc = train_ddp(xt, yt, xe, y_test, bs=args.bs, accum=args.accum, epochs=args.epochs, seed=0)
    dist.destroy_process_group()
    # The reference after the candidate, on rank 0 alone: rank 1 leaves instead of waiting in a
    # gloo barrier (which aborted once in `make bench` while rank 0 trained).
    if rank == 0:
        ref = train(xt, yt, xe, y_test, bs=args.bs * args.accum * world, accum=1,
                    epochs=args.epochs, seed=0)
        print(f"reference accuracy {ref[0]:.4f}; candidate ({world} processes) accuracy "
              f"{acc:.4f}; loops {time.perf_counter() - started:.3f} s")


if __name__ == "__main__":
    main()
