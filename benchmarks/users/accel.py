"""A classifier trained with Accelerate as a user writes it (its docs' gradient accumulation
recipe): Accelerator(gradient_accumulation_steps=...), everything prepared, the loop under
accelerator.accumulate(model), optimizer.step() and scheduler.step() on every batch (the
prepared ones act at the window's end), clipping where sync_gradients is true.

    python accel.py --bs 32                        # the reference
    python accel.py --bs 8 --accum 4               # a correct candidate
    ... --bug double-divide   # loss / accum by hand too: accelerator.backward divides already
    ... --bug clip-every      # accelerator.clip_grad_norm_ on every micro-batch
"""

import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=32)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--dtype", default="float32")
p.add_argument("--bug", default="")
args = p.parse_args()

accelerator = Accelerator(gradient_accumulation_steps=args.accum, cpu=True)
set_seed(0)
dtype = getattr(torch, args.dtype)
g = torch.Generator().manual_seed(0)
X = torch.randn(384, 20, generator=g, dtype=dtype)
y = (X[:, :3].sum(1) > 0).long() + (X[:, 3] > 1).long()
loader = DataLoader(TensorDataset(X, y), batch_size=args.bs, shuffle=True,
                    generator=torch.Generator().manual_seed(0))
model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 3)).to(dtype)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
updates = args.epochs * len(loader) // args.accum
scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, total_iters=updates)
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
for _epoch in range(args.epochs):
    for xb, yb in loader:
        with accelerator.accumulate(model):
            loss = nn.functional.cross_entropy(model(xb), yb)
            if args.bug == "double-divide":
                loss = loss / args.accum
            accelerator.backward(loss)
            if accelerator.sync_gradients or args.bug == "clip-every":
                accelerator.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
accelerator.print(f"last loss {loss.item():.4f}")
