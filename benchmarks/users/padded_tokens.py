"""A tagger over padded sentences of different lengths, as a user writes it: a plain loop, an
embedding + GRU + linear head, AdamW with two param groups (the embedding at a tenth of the
LR), the loss a hand-written token mean over the padding mask, optionally torch.compile.

    python padded_tokens.py --bs 16                 # the reference
    python padded_tokens.py --bs 4 --accum 4        # a correct candidate: / the window's tokens
    ... --bug token-mean-per-micro   # (loss * mask).sum() / mask.sum() per micro-batch, / accum
    ... --bug warmup-in-micro        # the warmup scheduler stepped on every micro-batch
"""

import argparse

import torch
from torch import nn
from torch.nn import functional as F

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=16)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--updates", type=int, default=12)
p.add_argument("--dtype", default="float32")
p.add_argument("--compile", action="store_true")
p.add_argument("--bug", default="")
args = p.parse_args()

torch.manual_seed(0)
torch.set_default_dtype(getattr(torch, args.dtype))
VOCAB, TAGS, MAXLEN = 50, 5, 12
N = args.updates * args.bs * args.accum
lengths = torch.randint(2, MAXLEN + 1, (N,))
tokens = torch.randint(1, VOCAB, (N, MAXLEN))
mask = torch.arange(MAXLEN)[None, :] < lengths[:, None]
tokens = tokens * mask                       # 0 is the padding token
tags = (tokens % TAGS) * mask


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 32, padding_idx=0)
        self.rnn = nn.GRU(32, 32, batch_first=True)
        self.out = nn.Linear(32, TAGS)

    def forward(self, x):
        h, _ = self.rnn(self.emb(x))
        return self.out(h)


model = Tagger()
opt = torch.optim.AdamW([{"params": model.emb.parameters(), "lr": 3e-4},
                         {"params": [*model.rnn.parameters(), *model.out.parameters()]}],
                        lr=3e-3, weight_decay=0.01)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
fwd = torch.compile(model) if args.compile else model
E = args.bs * args.accum
for update in range(args.updates):
    window = slice(update * E, (update + 1) * E)
    n_tokens = mask[window].sum()             # the window's real tokens
    for micro in range(args.accum):
        rows = slice(update * E + micro * args.bs, update * E + (micro + 1) * args.bs)
        x, y, m = tokens[rows], tags[rows], mask[rows]
        logits = fwd(x)
        per_token = F.cross_entropy(logits.reshape(-1, TAGS), y.reshape(-1), reduction="none")
        per_token = per_token.view_as(y) * m
        if args.bug == "token-mean-per-micro":
            loss = per_token.sum() / m.sum() / args.accum
        else:
            loss = per_token.sum() / n_tokens
        loss.backward()
        if args.bug == "warmup-in-micro":
            sched.step()
    opt.step()
    opt.zero_grad()
    if args.bug != "warmup-in-micro":
        sched.step()
print(f"last loss {loss.item():.4f}")
