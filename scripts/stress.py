"""Launch multi-process comparisons again and again and count the ones that fail.

    python scripts/stress.py --launches 210            # 70 of each kind below, round robin
    python scripts/stress.py --launches 30 --kinds nproc2 --epochs 5

Each launch is a passing comparison, so anything but exit 0 is a failure; so is a process left
running once it has exited (every process it starts carries a marker in its environment), and
"terminate called" anywhere in its output. Kinds:

- ``nproc2``: ``lrcheck compare --nproc 2`` (lrcheck launches torchrun; rank 0 trains the
  reference after the candidate, in the same job, while rank 1 leaves)
- ``torchrun2``: ``torchrun --nproc-per-node 2 -m lrcheck compare`` (torchrun launches lrcheck)
- ``nproc3``: ``lrcheck compare --nproc 3``

The output of a failed launch is kept in ``--keep`` (default ./stress-failures). Not part of
``make test``: 200 launches take about half an hour on 2 cores. The figures from a run are in
docs/multiprocess.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from lrcheck.procs.marks import marked

MARK = "LRCHECK_STRESS_MARK"
COMPARE = [sys.executable, "-m", "lrcheck", "compare"]
KINDS = {
    "nproc2": [*COMPARE, "--nproc", "2", "--bs", "8", "--accum", "2", "--ref-bs", "32"],
    "torchrun2": [sys.executable, "-m", "torch.distributed.run", "--standalone",
                  "--nproc-per-node", "2", "-m", "lrcheck", "compare", "--bs", "8", "--accum",
                  "2", "--ref-bs", "32"],
    "nproc3": [*COMPARE, "--nproc", "3", "--bs", "4", "--accum", "2", "--ref-bs", "24"],
}


def launch(kind: str, epochs: int, timeout: float) -> tuple[str | None, str, float]:
    """One launch: (why it failed or None, its output, seconds)."""
    mark = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="lrcheck-stress-") as tmp:
        argv = [*KINDS[kind], "--epochs", str(epochs), "--quiet", "--out", str(Path(tmp) / "out")]
        env = {**os.environ, MARK: mark, "TMPDIR": tmp}
        began = time.monotonic()
        try:
            done = subprocess.run(argv, env=env, cwd=tmp, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as exc:
            code, output = None, f"{exc.stdout or ''}{exc.stderr or ''}"
        seconds = time.monotonic() - began
        left = marked(mark, MARK)
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    why = (f"no exit after {timeout:g} s" if code is None
           else f"exit {code}" if code != 0
           else "terminate called" if "terminate called" in output
           else f"{len(left)} processes left running" if left else None)
    return why, " ".join(argv) + "\n" + output, seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launches", type=int, default=210, help="launches in all")
    parser.add_argument("--kinds", default=",".join(KINDS),
                        help=f"comma-separated, taken in turn: {', '.join(KINDS)}")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600, help="seconds a launch may take")
    parser.add_argument("--keep", type=Path, default=Path("stress-failures"))
    args = parser.parse_args()
    kinds = args.kinds.split(",")
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    counts = {kind: [0, 0, 0.0] for kind in kinds}  # launches, failures, seconds
    began = time.monotonic()
    for n, kind in zip(range(1, args.launches + 1), itertools.cycle(kinds)):
        why, output, seconds = launch(kind, args.epochs, args.timeout)
        tally = counts[kind]
        tally[0] += 1
        tally[2] += seconds
        if why is not None:
            tally[1] += 1
            args.keep.mkdir(parents=True, exist_ok=True)
            (args.keep / f"{n:04d}-{kind}.log").write_text(output)
        print(f"[{n}/{args.launches}] {kind}: {why or 'ok'} ({seconds:.1f} s)", flush=True)
    print("\n| kind | launches | failures | mean s |\n| --- | ---: | ---: | ---: |")
    for kind, (runs, failures, seconds) in counts.items():
        print(f"| {kind} | {runs} | {failures} | {seconds / max(runs, 1):.1f} |")
    total = sum(c[1] for c in counts.values())
    print(f"\n{args.launches} launches, {total} failures, {time.monotonic() - began:.0f} s "
          f"(epochs {args.epochs}; load average {os.getloadavg()[0]:.1f} at the end)")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
