"""Bare baselines of ``lrcheck compare --framework fsdp|deepspeed``: the same two trainings in
the same engine, without lrcheck (digits, the MLP 64-64-10 and its SGD from ``baseline.py``,
cosine with 10 % warmup, 5 epochs, the (seed, epoch) permutation, evaluation after every epoch).

- ``fsdp`` (under torchrun, 2 processes): the candidate bs 8 × accum 2 on every rank with the
  model ``fully_shard``-ed on a CPU mesh (gloo, float64), gradients reduced on an update's last
  micro-batch only (``set_requires_gradient_sync``), each micro-batch's loss ``sum · world /
  n_global``; then rank 0 alone trains the reference, bs 32 through FSDP on a mesh of one, as
  lrcheck's torchrun job does.
- ``deepspeed`` (one process, float32): the reference at bs 32 and the candidate at bs 16 ×
  accum 2 through ``deepspeed.initialize`` (ZeRO stage 0) with the schedule handed to the
  engine, ``engine.backward(mean loss)`` and ``engine.step()`` on every micro-batch, every
  sample of each epoch.

    python -m torch.distributed.run --standalone --nproc-per-node 2 \\
        benchmarks/sharded_baseline.py fsdp
    python benchmarks/sharded_baseline.py deepspeed
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from baseline import build, evaluate, load, make_schedule  # noqa: E402


def train_fsdp(x, y, x_test, y_test, *, bs: int, accum: int, epochs: int, seed: int) -> float:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 64), torch.nn.ReLU(),
                              torch.nn.Linear(64, 10)).to(torch.float64)
    mesh = init_device_mesh("cpu", (world,))
    for layer in net:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mesh=mesh)
    fully_shard(net, mesh=mesh)
    groups = [{"params": [p for p in net.parameters() if p.ndim > 1], "weight_decay": 0.0},
              {"params": [p for p in net.parameters() if p.ndim <= 1], "weight_decay": 0.0}]
    optimizer = torch.optim.SGD(groups, lr=0.05, momentum=0.9)
    effective = bs * accum * world
    per_epoch = len(y) // effective
    total = per_epoch * epochs
    scheduler = make_schedule(optimizer, "cosine", total, round(0.1 * total))
    acc = 0.0
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(y))
        for k in range(per_epoch):
            batch = order[k * effective:(k + 1) * effective]
            for m in range(accum):
                idx = torch.from_numpy(batch[m * bs * world:(m + 1) * bs * world][rank::world])
                net.set_requires_gradient_sync(m == accum - 1)
                per_sample = F.cross_entropy(net(x[idx]), y[idx], reduction="none")
                (per_sample.sum() * (world / effective)).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        acc, _ = evaluate(net, x_test, y_test)
    return acc


def fsdp(args) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    xt, yt, xe, y_test = load(0)
    started = time.perf_counter()
    acc = train_fsdp(xt, yt, xe, y_test, bs=8, accum=2, epochs=args.epochs, seed=0)
    dist.destroy_process_group()
    if rank == 0:  # the reference after the candidate, alone, through FSDP on a mesh of one
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        ref = train_fsdp(xt, yt, xe, y_test, bs=8 * 2 * world, accum=1, epochs=args.epochs,
                         seed=0)
        dist.destroy_process_group()
        print(f"reference accuracy {ref:.4f}; candidate ({world} processes) accuracy "
              f"{acc:.4f}; loops {time.perf_counter() - started:.3f} s")


def train_deepspeed(x, y, x_test, y_test, *, bs: int, accum: int, epochs: int, seed: int):
    import deepspeed
    from deepspeed.utils import groups

    net, optimizer = build(x.shape[1], seed)
    net, x, x_test = net.float(), x.float(), x_test.float()
    optimizer = torch.optim.SGD(optimizer.param_groups, lr=0.05, momentum=0.9)
    per_epoch = -(-len(y) // bs)
    total = -(-per_epoch * epochs // accum)
    scheduler = make_schedule(optimizer, "cosine", total, round(0.1 * total))
    config = {"train_micro_batch_size_per_gpu": bs, "gradient_accumulation_steps": accum,
              "zero_optimization": {"stage": 0}, "gradient_clipping": 0.0,
              "steps_per_print": 2**31 - 1}
    with contextlib.redirect_stdout(io.StringIO()):
        engine, _, _, _ = deepspeed.initialize(model=net, optimizer=optimizer,
                                               lr_scheduler=scheduler, config=config)
    scores = (0.0, 0.0)
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(y))
        for start in range(0, len(y), bs):
            idx = torch.from_numpy(order[start:start + bs])
            engine.backward(F.cross_entropy(engine(x[idx]), y[idx]))
            engine.step()
        scores = evaluate(net, x_test, y_test)
    groups._release_process_group_references(None)
    return scores


def deepspeed_pair(args) -> None:
    from deepspeed.utils import logger

    logger.setLevel(logging.ERROR)
    os.environ.setdefault("LOCAL_RANK", "0")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    xt, yt, xe, y_test = load(0)
    started = time.perf_counter()
    ref = train_deepspeed(xt, yt, xe, y_test, bs=32, accum=1, epochs=args.epochs, seed=0)
    cand = train_deepspeed(xt, yt, xe, y_test, bs=16, accum=2, epochs=args.epochs, seed=0)
    dist.destroy_process_group()
    print(f"reference accuracy {ref[0]:.4f}; candidate accuracy {cand[0]:.4f}; loops "
          f"{time.perf_counter() - started:.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("engine", choices=("fsdp", "deepspeed"))
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args()
    if args.engine == "deepspeed":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    (fsdp if args.engine == "fsdp" else deepspeed_pair)(args)


if __name__ == "__main__":
    main()
