"""A regression LightningModule as a user writes it: a DataLoader with a seeded shuffle, AdamW
with a OneCycleLR stepped every optimizer step (interval "step") over
trainer.estimated_stepping_batches, accumulate_grad_batches, gradient_clip_val.

    python lightning_reg.py --bs 32                 # the reference
    python lightning_reg.py --bs 8 --accum 4        # a correct candidate
    ... --bug onecycle-micro   # total_steps = len(train_dataloader) * max_epochs: micro-batches
    ... --n 250   # the epoch's last window short: Lightning divides each micro-batch's mean by
                  # accumulate_grad_batches, so its 2 samples weigh 1/8 each, not 1/26
"""

import argparse

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=32)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--epochs", type=int, default=2)
p.add_argument("--n", type=int, default=256, help="samples (250: each epoch's last window short)")
p.add_argument("--dtype", default="float32")
p.add_argument("--bug", default="")
args = p.parse_args()

L.seed_everything(0)
g = torch.Generator().manual_seed(0)
X = torch.randn(256, 10, generator=g)
y = X @ torch.randn(10, 1, generator=g) + 0.1 * torch.randn(256, 1, generator=g)
dtype = getattr(torch, args.dtype)
ds = TensorDataset(X[:args.n].to(dtype), y[:args.n].to(dtype))


class Regressor(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 1))

    def training_step(self, batch, batch_idx):
        xb, yb = batch
        loss = nn.functional.mse_loss(self.net(xb), yb)
        self.log("train_loss", loss)
        return loss

    def train_dataloader(self):
        return DataLoader(ds, batch_size=args.bs, shuffle=True,
                          generator=torch.Generator().manual_seed(0))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=0.01)
        if args.bug == "onecycle-micro":
            total = len(self.train_dataloader()) * self.trainer.max_epochs
        else:
            total = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


trainer = L.Trainer(max_epochs=args.epochs, accumulate_grad_batches=args.accum,
                    gradient_clip_val=1.0, accelerator="cpu", devices=1, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False,
                    precision="64-true" if args.dtype == "float64" else "32-true")
trainer.fit(Regressor())
