"""A tabular classifier as a user writes it: scikit-learn's breast-cancer set standardised, a
DataLoader with a seeded shuffle, an MLP, SGD with momentum and a StepLR, float64, gradient
accumulation counted by the loader's index, a separate optimizer for the head (two optimizers).

    python tabular.py --bs 32                  # the reference
    python tabular.py --bs 8 --accum 4         # a correct candidate
    ... --momentum 0                           # another optimizer: must not pass
    ... --bug sched-per-micro   # scheduler.step() on every micro-batch
    ... --bug mean-per-micro    # each micro-batch's mean loss / accum (wrong on the short tail)
"""

import argparse

import torch
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=32)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--momentum", type=float, default=0.9)
p.add_argument("--two-optimizers", action="store_true")
p.add_argument("--bug", default="")
args = p.parse_args()

torch.set_default_dtype(torch.float64)
X, y = load_breast_cancer(return_X_y=True)
X = StandardScaler().fit_transform(X)
# 560 of the 569 rows: 17.5 updates of 32 per epoch, so the epoch's last window is short
ds = TensorDataset(torch.tensor(X[:560]), torch.tensor(y[:560]))
loader = DataLoader(ds, batch_size=args.bs, shuffle=True,
                    generator=torch.Generator().manual_seed(0))
torch.manual_seed(0)
body = nn.Sequential(nn.Linear(30, 64), nn.Tanh(), nn.Linear(64, 32), nn.Tanh())
head = nn.Linear(32, 2)
if args.two_optimizers:
    opts = [torch.optim.SGD(body.parameters(), lr=0.05, momentum=args.momentum),
            torch.optim.SGD(head.parameters(), lr=0.02, momentum=args.momentum)]
else:
    opts = [torch.optim.SGD([*body.parameters(), *head.parameters()], lr=0.05,
                            momentum=args.momentum)]
scheds = [torch.optim.lr_scheduler.StepLR(o, step_size=10, gamma=0.5) for o in opts]
E = args.bs * args.accum
for _epoch in range(args.epochs):
    for i, (xb, yb) in enumerate(loader):
        logits = head(body(xb))
        if args.bug == "mean-per-micro":
            loss = nn.functional.cross_entropy(logits, yb) / args.accum
        else:  # the window's samples: E, or what is left at the epoch's end
            window = min(E, len(ds) - (i // args.accum) * E)
            loss = nn.functional.cross_entropy(logits, yb, reduction="sum") / window
        loss.backward()
        if args.bug == "sched-per-micro":
            for s in scheds:
                s.step()
        if (i + 1) % args.accum == 0 or i + 1 == len(loader):
            for o in opts:
                o.step()
                o.zero_grad()
            if args.bug != "sched-per-micro":
                for s in scheds:
                    s.step()
