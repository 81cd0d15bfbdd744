"""What ``lrcheck run`` in lockstep costs against the two commands run bare: a user's script of
a 2.1 M-parameter MLP (AdamW, float32, one torch thread each), the reference at bs 64 and the
candidate at 32 × 2, 100 updates. Alternated ``runs`` times:

- bare: the two commands one after the other (what a user runs without lrcheck), and side by
  side (both at once, as lrcheck runs them);
- ``lrcheck run`` (lockstep, the default) and ``lrcheck run --free``.

Wall time, the peak resident memory of the largest process (``ru_maxrss`` of the children) and
the peak size of lockstep's exchange folder (sampled every 5 ms). One JSON line of medians.

    python benchmarks/lockstep_cost.py [RUNS]
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

SCRIPT = '''
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


def main(runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="lrcheck-lockstep-bench-") as tmp:
        script = Path(tmp) / "user.py"
        script.write_text(SCRIPT)
        ref, cand = [PY, str(script), "64", "1"], [PY, str(script), "32", "2"]
        line = [shlex.join(ref), shlex.join(cand)]
        lrcheck = [PY, "-m", "lrcheck", "run", "--quiet", "--out", f"{tmp}/r"]
        kinds = {"bare one after the other": ([ref, cand], False),
                 "bare side by side": ([ref, cand], True),
                 "lrcheck run (lockstep)": ([[*lrcheck, *line]], False),
                 "lrcheck run --free": ([[*lrcheck, "--free", *line]], False)}
        got: dict[str, list[dict[str, float]]] = {k: [] for k in kinds}
        for _ in range(runs):
            for name, (argvs, together) in kinds.items():
                got[name].append(_measure(argvs, together))
    medians = {name: {key: round(statistics.median(r[key] for r in rows), 3)
                      for key in ("wall", "rss", "disk")} for name, rows in got.items()}
    base = medians["bare one after the other"]
    medians["ratios"] = {name: {"wall": round(m["wall"] / base["wall"], 3),
                                "rss": round(m["rss"] / base["rss"], 3)}
                         for name, m in medians.items() if name != "ratios"}
    print(json.dumps({"runs": runs, "load": os.getloadavg()[0], **medians}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
