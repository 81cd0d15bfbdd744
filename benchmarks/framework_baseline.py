"""Bare baseline of ``lrcheck compare --framework transformers|lightning``: the same two
trainings through the same framework, without lrcheck.

digits, the MLP 64-64-10 in float64 and its SGD (momentum 0.9, two param groups) from
``baseline.py``; the reference at bs 32 and the candidate at bs 16 x accum 2, 5 epochs, every
sample of each epoch (the framework's own last window), evaluation with sklearn after every
epoch. The schedule is the framework's normal one: the Trainer's ``lr_scheduler_type="cosine"``
with a 10 % warmup; in Lightning, warmup k/W then cosine sized by
``trainer.estimated_stepping_batches``, stepped every update. It prints the final accuracy of
both runs so a reader can see that it did the same work.

    python benchmarks/framework_baseline.py transformers [--epochs 5] [--bs 16] [--accum 2]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import warnings

import torch
import torch.nn.functional as F
from baseline import build, evaluate, make_schedule, train_pair


class Pairs(torch.utils.data.Dataset):
    def __init__(self, x, y) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return {"x": self.x[i], "labels": self.y[i]}


def train_transformers(x, y, x_test, y_test, *, bs: int, accum: int, epochs: int, seed: int):
    from transformers import Trainer, TrainerCallback, TrainingArguments
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    net, optimizer = build(x.shape[1], seed)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x, labels):
            logits = self.net(x)
            return {"loss": F.cross_entropy(logits, labels), "logits": logits}

    scores: list[tuple[float, float]] = []

    class Evaluate(TrainerCallback):
        def on_epoch_end(self, args, state, control, **kwargs):
            scores.append(evaluate(net, x_test, y_test))

    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=bs, gradient_accumulation_steps=accum,
            num_train_epochs=epochs, learning_rate=0.05, lr_scheduler_type="cosine",
            warmup_steps=0.1, max_grad_norm=0.0, use_cpu=True, seed=seed, report_to="none",
            save_strategy="no", logging_strategy="no", disable_tqdm=True,
            dataloader_num_workers=0, remove_unused_columns=False)
        Trainer(model=Model(), args=args, train_dataset=Pairs(x, y),
                optimizers=(optimizer, None), callbacks=[Evaluate()]).train()
    return scores[-1]


def train_lightning(x, y, x_test, y_test, *, bs: int, accum: int, epochs: int, seed: int):
    import lightning.pytorch as pl

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    net, optimizer = build(x.shape[1], seed)
    scores: list[tuple[float, float]] = []

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch, batch_idx):
            return F.cross_entropy(self.net(batch["x"]), batch["labels"])

        def on_train_epoch_end(self) -> None:
            scores.append(evaluate(net, x_test, y_test))

        def configure_optimizers(self):
            total = int(self.trainer.estimated_stepping_batches)
            schedule = make_schedule(optimizer, "cosine", total, round(0.1 * total))
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    loader = torch.utils.data.DataLoader(Pairs(x, y), batch_size=bs, shuffle=True)
    trainer = pl.Trainer(accelerator="cpu", devices=1, precision="64-true", max_epochs=epochs,
                         accumulate_grad_batches=accum, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), loader)
    return scores[-1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("framework", choices=("transformers", "lightning"))
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--bs", type=int, default=16)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train_pair(train_transformers if args.framework == "transformers" else train_lightning, args)


if __name__ == "__main__":
    main()
