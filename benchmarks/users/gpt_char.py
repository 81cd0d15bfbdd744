"""A character-level GPT in the style of nanoGPT's train.py, as a user writes it: a fused qkv
projection, weight tying, AdamW with decay and no-decay groups, the LR a pure function of the
iteration set by hand on every group, clipping, gradient accumulation, optionally bf16 autocast
on the CPU, activation checkpointing or torch.compile. The text is the Zen of Python (it ships
with Python: nothing is downloaded).

    python gpt_char.py --bs 16                    # the reference
    python gpt_char.py --bs 4 --accum 4           # a correct candidate
    ... --bug lr-per-micro      # the iteration counter advanced per micro-batch
    ... --bug no-accum-divide   # each micro-batch's loss not divided by the accumulation
    ... --bug clip-per-micro    # clip_grad_norm_ after every backward
"""

import argparse
import codecs
import math
import this

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=16)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--iters", type=int, default=30)
p.add_argument("--dtype", default="float32")
p.add_argument("--autocast", action="store_true", help="bf16 autocast on the CPU")
p.add_argument("--checkpointing", action="store_true")
p.add_argument("--compile", action="store_true")
p.add_argument("--bug", default="")
args = p.parse_args()

torch.manual_seed(1337)
torch.set_default_dtype(getattr(torch, args.dtype))
text = codecs.decode(this.s, "rot13")
chars = sorted(set(text))
data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
block, n_embd, n_head, n_layer, vocab = 32, 64, 4, 2, len(chars)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(n_embd, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(n_embd), CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(block, n_embd)
        self.h = nn.ModuleList(Block() for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for blk in self.h:
            x = checkpoint(blk, x, use_reentrant=False) if args.checkpointing else blk(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, vocab).float(), targets.view(-1))


model = GPT()
decay = [q for q in model.parameters() if q.dim() >= 2]
no_decay = [q for q in model.parameters() if q.dim() < 2]
optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                               {"params": no_decay, "weight_decay": 0.0}],
                              lr=1e-3, betas=(0.9, 0.95))
step_model = torch.compile(model) if args.compile else model


def get_lr(it):  # nanoGPT's: linear warmup, then cosine to a tenth
    warmup, max_lr = 5, 1e-3
    if it < warmup:
        return max_lr * (it + 1) / warmup
    ratio = (it - warmup) / max(1, args.iters - warmup)
    return max_lr / 10 + 0.5 * (1 + math.cos(math.pi * ratio)) * (max_lr - max_lr / 10)


g = torch.Generator().manual_seed(0)
starts = torch.randint(len(data) - block - 1, (args.iters * args.bs * args.accum,), generator=g)
E = args.bs * args.accum
it = 0
for update in range(args.iters):
    for micro in range(args.accum):
        lr = get_lr(it)
        for group in optimizer.param_groups:
            group["lr"] = lr
        rows = starts[update * E + micro * args.bs:update * E + (micro + 1) * args.bs]
        x = torch.stack([data[i:i + block] for i in rows])
        y = torch.stack([data[i + 1:i + 1 + block] for i in rows])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast):
            loss = step_model(x, y)
        if args.bug != "no-accum-divide":
            loss = loss / args.accum
        loss.backward()
        if args.bug == "clip-per-micro":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if args.bug == "lr-per-micro":
            it += 1
    if args.bug != "clip-per-micro":
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if args.bug != "lr-per-micro":
        it += 1
print(f"final loss {loss.item() * (args.accum if args.bug != 'no-accum-divide' else 1):.4f}")
