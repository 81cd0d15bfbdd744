"""What ``lrcheck run`` in lockstep costs against the two commands run bare, on three users'
scripts (``SCRIPTS``, one torch thread each): a 2.1 M-parameter MLP (AdamW, float32, bs 64 against
32 × 2, 100 updates), a causal transformer with a fused qkv projection (AdamW, float32, bs 16
against 4 × 4, 60 updates) and a small CNN (SGD with momentum, float64, a cosine schedule, bs 32
against 8 × 4, 60 updates). Alternated ``runs`` times, per script:

- bare: the two commands one after the other (what a user runs without lrcheck), and side by
  side (both at once, as lrcheck runs them);
- ``lrcheck run`` (lockstep, the default) and ``lrcheck run --free``.

Wall time, the peak resident memory of the largest process (``ru_maxrss`` of the children) and
the peak size of lockstep's exchange folder (sampled every 5 ms). One JSON line of medians per
script. The goal (issue 37): lockstep at most 1.5× the two commands one after the other.

    python benchmarks/lockstep_cost.py [RUNS] [SCRIPT,...]
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

MLP = '''
import sys, torch
torch.set_num_threads(1)
bs, accum = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                            torch.nn.Linear(1024, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=100)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(6400, 1024, generator=g), torch.randint(0, 10, (6400,), generator=g)
E = bs * accum
for k in range(100):
    for m in range(accum):
        part = slice(k * E + m * bs, k * E + (m + 1) * bs)
        (torch.nn.functional.cross_entropy(model(x[part]), y[part], reduction="sum") / E).backward()
    opt.step(); opt.zero_grad(); sched.step()
'''

TRANSFORMER = '''
import math, sys, torch
from torch import nn
torch.set_num_threads(1)
bs, accum = int(sys.argv[1]), int(sys.argv[2])
V, T, D, H = 64, 32, 128, 4

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))
    def forward(self, x):
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        heads = lambda t: t.view(t.shape[0], T, H, D // H).transpose(1, 2)
        a = nn.functional.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(x.shape))
        return x + self.mlp(self.ln2(x))

torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(V, D), Block(), Block(), nn.LayerNorm(D), nn.Linear(D, V))
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10))
g = torch.Generator().manual_seed(1)
data = torch.randint(0, V, (960, T + 1), generator=g)
E = bs * accum
for k in range(60):
    for m in range(accum):
        rows = data[k * E + m * bs:k * E + (m + 1) * bs]
        logits = model(rows[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, V), rows[:, 1:].reshape(-1),
                                           reduction="sum") / (E * T)
        loss.backward()
    opt.step(); opt.zero_grad(); sched.step()
'''

CNN = '''
import sys, torch
from torch import nn
torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)
bs, accum = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=60)
g = torch.Generator().manual_seed(1)
x, y = torch.randn(1920, 3, 16, 16, generator=g), torch.randint(0, 10, (1920,), generator=g)
E = bs * accum
for k in range(60):
    for m in range(accum):
        part = slice(k * E + m * bs, k * E + (m + 1) * bs)
        (nn.functional.cross_entropy(model(x[part]), y[part], reduction="sum") / E).backward()
    opt.step(); opt.zero_grad(); sched.step()
'''

# name: (script, the reference's (bs, accum), the candidate's)
SCRIPTS = {"mlp-adamw-float32": (MLP, (64, 1), (32, 2)),
           "transformer-adamw-float32": (TRANSFORMER, (16, 1), (4, 4)),
           "cnn-sgd-momentum-float64": (CNN, (32, 1), (8, 4))}
PY = sys.executable


def _peak_children_kb() -> int:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def _measure(argvs: list[list[str]], together: bool, shm: Path | None = None) -> dict[str, float]:
    """Run ``argvs`` (one after the other, or at once), each in a fresh child of a fresh
    Python (so ``ru_maxrss`` is this measurement's alone): wall, peak RSS in MB, peak disk of
    the exchange folders in MB."""
    probe = ("import resource, subprocess, sys, json, time\n"
             "argvs = json.loads(sys.argv[1]); t = time.monotonic()\n"
             "procs = []\n"
             "for a in argvs:\n"
             "    p = subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
             "    procs.append(p)\n"
             f"    {'' if together else 'p.wait()'}\n"
             "codes = [p.wait() for p in procs]\n"
             "wall = time.monotonic() - t\n"
             "print(json.dumps({'wall': wall, 'codes': codes, 'rss': "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n")
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            size = 0
            for folder in (shm or Path("/dev/shm")).glob("lrcheck-lockstep-*"):
                for f in folder.glob("*"):
                    try:
                        size += f.stat().st_size
                    except OSError:
                        pass
            peak[0] = max(peak[0], size)
            time.sleep(0.005)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    out = subprocess.run([PY, "-c", probe, json.dumps(argvs)], capture_output=True, text=True,
                         check=True)
    done.set()
    watcher.join()
    res = json.loads(out.stdout)
    assert all(c in (0, 1) for c in res["codes"]), res
    return {"wall": res["wall"], "rss": res["rss"] / 1024, "disk": peak[0] / 2**20}


def measure(name: str, runs: int) -> dict[str, object]:
    """Medians of each way of running script ``name`` (``SCRIPTS``), and their ratios to the
    two commands run bare one after the other."""
    text, (rb, ra), (cb, ca) = SCRIPTS[name]
    with tempfile.TemporaryDirectory(prefix="lrcheck-lockstep-bench-") as tmp:
        script = Path(tmp) / "user.py"
        script.write_text(text)
        ref, cand = [PY, str(script), str(rb), str(ra)], [PY, str(script), str(cb), str(ca)]
        line = [shlex.join(ref), shlex.join(cand)]
        lrcheck = [PY, "-m", "lrcheck", "run", "--quiet", "--out", f"{tmp}/r"]
        kinds = {"bare one after the other": ([ref, cand], False),
                 "bare side by side": ([ref, cand], True),
                 "lrcheck run (lockstep)": ([[*lrcheck, *line]], False),
                 "lrcheck run --free": ([[*lrcheck, "--free", *line]], False)}
        got: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for _ in range(runs):
            for kind, (argvs, together) in kinds.items():
                got[kind].append(_measure(argvs, together))
    medians: dict[str, object] = {
        kind: {key: round(statistics.median(r[key] for r in rows), 3)
               for key in ("wall", "rss", "disk")} for kind, rows in got.items()}
    base = got["bare one after the other"]
    wall0 = statistics.median(r["wall"] for r in base)
    rss0 = statistics.median(r["rss"] for r in base)
    med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
    medians["ratios"] = {kind: {"wall": round(med(rows, "wall") / wall0, 3),
                                "rss": round(med(rows, "rss") / rss0, 3)}
                         for kind, rows in got.items()}
    return {"script": name, "runs": runs, "load": os.getloadavg()[0], **medians}


def main(runs: int, names: list[str]) -> None:
    for name in names:
        print(json.dumps(measure(name, runs)), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3,
         sys.argv[2].split(",") if len(sys.argv) > 2 else list(SCRIPTS))
