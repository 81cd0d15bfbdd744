"""Bare-PyTorch baseline: exactly the work of the default ``lrcheck compare``, without lrcheck.

The same two trainings (digits, MLP 64-64-10 in float64, SGD momentum 0.9 with two param groups,
cosine with 10 % warmup — factor k/W via LambdaLR, then the main schedule via SequentialLR, as
lrcheck's built-ins do — 5 epochs, the (seed, epoch) permutation, the
global-batch loss normalisation, evaluation with sklearn after every epoch): the reference at
bs 32 and the candidate at bs 16 x accum 2. It deliberately does not import lrcheck, so it is the
floor lrcheck's own cost is measured against. It prints the final accuracy of both runs so a
reader can see that it did the same work.

    python benchmarks/baseline.py [--epochs 5] [--bs 16] [--accum 2] [--scheduler cosine]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.metrics import accuracy_score, f1_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch.optim import lr_scheduler as lrs


def make_schedule(optimizer, name: str, total: int, warmup: int):
    """Warmup k/W (LambdaLR), then cosine, linear or wsd over the remaining updates."""
    decay = max(1, total - warmup)
    if name == "cosine":
        main = lrs.CosineAnnealingLR(optimizer, T_max=decay)
    elif name == "linear":
        main = lrs.LinearLR(optimizer, start_factor=1.0, end_factor=0.0, total_iters=decay)
    elif name == "wsd":
        tail = max(1, round(0.2 * decay))
        main = lrs.LambdaLR(optimizer, lambda s: 1.0 if s < decay - tail
                            else max(0.0, (decay - s) / tail))
    else:
        raise ValueError(name)
    if warmup <= 0:
        return main
    ramp = lrs.LambdaLR(optimizer, lambda step: step / warmup)
    return lrs.SequentialLR(optimizer, [ramp, main], [warmup])


def load(seed: int = 0):
    """digits, split 80/20 stratified, standardised, as float64 tensors (test labels numpy)."""
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2,
                                                        random_state=seed, stratify=y)
    scaler = StandardScaler().fit(x_train)
    xt = torch.as_tensor(scaler.transform(x_train), dtype=torch.float64)
    xe = torch.as_tensor(scaler.transform(x_test), dtype=torch.float64)
    return xt, torch.as_tensor(y_train), xe, y_test


def build(n_features: int, seed: int):
    """The MLP (float64) from ``seed``'s generator and its SGD with two param groups."""
    torch.set_num_threads(1)  # as lrcheck trains on the CPU (runner/local.py, CPU_THREADS)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(n_features, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10)).to(torch.float64)
    groups = [{"params": [p for p in model.parameters() if p.ndim > 1], "weight_decay": 0.0},
              {"params": [p for p in model.parameters() if p.ndim <= 1], "weight_decay": 0.0}]
    return model, torch.optim.SGD(groups, lr=0.05, momentum=0.9)


def evaluate(model, x_test, y_test) -> tuple[float, float]:
    """Accuracy and macro-F1 on the test split."""
    model.eval()
    with torch.no_grad():
        pred = model(x_test).argmax(1).numpy()
    model.train()
    return accuracy_score(y_test, pred), f1_score(y_test, pred, average="macro")


def train(x, y, x_test, y_test, *, bs: int, accum: int, epochs: int, seed: int,
          scheduler: str = "cosine", warmup: float = 0.1):
    model, optimizer = build(x.shape[1], seed)
    effective = bs * accum
    per_epoch = len(y) // effective
    total = per_epoch * epochs
    scheduler = make_schedule(optimizer, scheduler, total, round(warmup * total))
    for epoch in range(epochs):
        order = np.random.default_rng([seed, epoch]).permutation(len(y))
        for k in range(per_epoch):
            batch = order[k * effective:(k + 1) * effective]
            loss_sum = torch.zeros((), dtype=torch.float64)
            for m in range(accum):
                idx = torch.from_numpy(batch[m * bs:(m + 1) * bs])
                per_sample = F.cross_entropy(model(x[idx]), y[idx], reduction="none")
                loss = per_sample.sum() / effective
                loss.backward()
                loss_sum += loss.detach()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            scheduler.step()
        acc, f1 = evaluate(model, x_test, y_test)
    return acc, f1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--bs", type=int, default=16)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scheduler", default="cosine", choices=("cosine", "linear", "wsd"))
    args = parser.parse_args()
    train_pair(train, args, scheduler=args.scheduler)


def train_pair(train, args, **more) -> None:
    """The reference (bs·accum, accum 1), then the candidate, trained by ``train``; prints their
    final accuracy and the time both loops took."""
    xt, yt, xe, y_test = load(args.seed)
    started = time.perf_counter()
    common = dict(epochs=args.epochs, seed=args.seed, **more)
    ref = train(xt, yt, xe, y_test, bs=args.bs * args.accum, accum=1, **common)
    cand = train(xt, yt, xe, y_test, bs=args.bs, accum=args.accum, **common)
    loop = time.perf_counter() - started
    print(f"reference accuracy {ref[0]:.4f} f1 {ref[1]:.4f}; candidate accuracy {cand[0]:.4f} "
          f"f1 {cand[1]:.4f}; loops {loop:.3f} s")


if __name__ == "__main__":
    main()
