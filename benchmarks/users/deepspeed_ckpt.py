"""A user's DeepSpeed training (float32, the CPU) that checkpoints every K updates with
``engine.save_checkpoint`` and resumes from the latest with ``engine.load_checkpoint``, for
``lrcheck run --interrupt-at N --resume CMD`` (docs/resume.md):

    python deepspeed_ckpt.py --bs 32
    python deepspeed_ckpt.py --bs 16 --accum 2 --save-every 4 --out ck            # interrupted
    python deepspeed_ckpt.py --bs 16 --accum 2 --save-every 4 --out ck --resume   # the resume
    ... --resume --bug no-scheduler    # load_checkpoint(load_lr_scheduler_states=False)
    ... --resume --bug module-only     # the optimizer's and the scheduler's states not loaded
    torchrun --nproc-per-node 2 deepspeed_ckpt.py --bs 8 --accum 2 ...  # on 2 processes:
                                       # --bs per rank, each micro-batch split over the ranks
"""
import argparse
import contextlib
import io
import os
import socket

import torch
from sklearn.datasets import load_digits

parser = argparse.ArgumentParser()
parser.add_argument("--bs", type=int, default=32)
parser.add_argument("--accum", type=int, default=1)
parser.add_argument("--save-every", type=int, default=0)
parser.add_argument("--out", default="ckpt")
parser.add_argument("--resume", action="store_true")
parser.add_argument("--zero", type=int, default=0)
parser.add_argument("--bug", choices=["no-scheduler", "module-only"])
parser.add_argument("--local_rank", type=int, default=0)
a = parser.parse_args()
os.environ.setdefault("DS_ACCELERATOR", "cpu")
if "RANK" not in os.environ:  # started alone: a group of one
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
import deepspeed  # noqa: E402

E, N, EPOCHS = 32, 512, 2
digits = load_digits()
x = torch.tensor(digits.data[:N] / 16.0, dtype=torch.float32)
y = torch.tensor(digits.target[:N])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))
opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
total = N // E * EPOCHS
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: min((s + 1) / 3, max(0.0, (total - s) / (total - 3))))
config = {"train_micro_batch_size_per_gpu": a.bs, "gradient_accumulation_steps": a.accum,
          "zero_optimization": {"stage": a.zero}, "zero_allow_untested_optimizer": True,
          "steps_per_print": 10**9}
with contextlib.redirect_stdout(io.StringIO()):
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched,
                                           config=config)
start = 0
if a.resume:
    with open(os.path.join(a.out, "latest")) as f:
        tag = f.read().strip()
    if a.bug == "module-only":
        _, state = engine.load_checkpoint(a.out, tag, load_optimizer_states=False,
                                          load_lr_scheduler_states=False)
    else:
        _, state = engine.load_checkpoint(a.out, tag,
                                          load_lr_scheduler_states=a.bug != "no-scheduler")
    start = state["update"]
world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
for u in range(start, total):
    epoch, k = divmod(u, N // E)
    order = torch.randperm(N, generator=torch.Generator().manual_seed(epoch))
    batch = order[k * E:(k + 1) * E]
    for m in range(a.accum):
        part = batch[m * a.bs * world:(m + 1) * a.bs * world][rank::world]
        engine.backward(torch.nn.functional.cross_entropy(engine(x[part]), y[part]))
        engine.step()
    if a.save_every and (u + 1) % a.save_every == 0:
        with contextlib.redirect_stdout(io.StringIO()):
            engine.save_checkpoint(a.out, tag=f"update{u + 1}", client_state={"update": u + 1})
