"""A recommender as a user writes it: sparse user and item embeddings trained by SparseAdam, a
dense MLP on top trained by AdamW (two optimizers), float32, a warmup by LambdaLR on both,
gradient accumulation over ratings generated from a seeded low-rank truth.

    python sparse_rec.py --bs 64               # the reference
    python sparse_rec.py --bs 16 --accum 4     # a correct candidate
    ... --bug no-accum-divide   # each micro-batch's loss not divided by the accumulation
"""

import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=64)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--updates", type=int, default=25)
p.add_argument("--bug", default="")
args = p.parse_args()

g = torch.Generator().manual_seed(0)
users, items, rank = 200, 300, 4
truth = torch.randn(users, rank, generator=g) @ torch.randn(rank, items, generator=g)
n = args.updates * args.bs * args.accum
u = torch.randint(users, (n,), generator=g)
i = torch.randint(items, (n,), generator=g)
r = truth[u, i] + 0.1 * torch.randn(n, generator=g)

torch.manual_seed(0)
user_emb = nn.Embedding(users, 16, sparse=True)
item_emb = nn.Embedding(items, 16, sparse=True)
mlp = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
sparse_opt = torch.optim.SparseAdam([*user_emb.parameters(), *item_emb.parameters()], lr=1e-2)
dense_opt = torch.optim.AdamW(mlp.parameters(), lr=1e-3)
warm = lambda s: min(1.0, (s + 1) / 5)  # noqa: E731
scheds = [torch.optim.lr_scheduler.LambdaLR(o, warm) for o in (sparse_opt, dense_opt)]
E = args.bs * args.accum
for k in range(args.updates):
    for m in range(args.accum):
        rows = slice(k * E + m * args.bs, k * E + (m + 1) * args.bs)
        pred = mlp(torch.cat([user_emb(u[rows]), item_emb(i[rows])], dim=1)).squeeze(1)
        loss = nn.functional.mse_loss(pred, r[rows], reduction="sum") / E
        if args.bug == "no-accum-divide":
            loss = loss * args.accum
        loss.backward()
    for o in (sparse_opt, dense_opt):
        o.step()
        o.zero_grad()
    for s in scheds:
        s.step()
print(f"final loss {loss.item():.4f}")
