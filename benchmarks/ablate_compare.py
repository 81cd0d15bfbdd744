"""Where `lrcheck compare`'s time goes: the current code against the same with one change
undone, and the bare baseline, alternated.

    python benchmarks/ablate_compare.py [ROUNDS]

- ``now``: ``lrcheck compare --quiet`` as shipped;
- ``plots-here``: the plots drawn in this process instead of a helper (``reports.render``);
- ``full-teardown``: leaving through Python's normal finalisation instead of ``cli.main``'s
  ``os._exit``;
- ``bare``: ``benchmarks/baseline.py``.

Each variant is a whole process timed from start to exit; prints the median and every run.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    out = tempfile.mkdtemp(prefix="lrcheck-ablate-")
    argv = f"['lrcheck', 'compare', '--quiet', '--out', {out!r}]"
    variants = {
        "now": f"import sys; sys.argv = {argv}\nfrom lrcheck.cli import main\nmain()",
        "plots-here": (f"import sys; sys.argv = {argv}\nimport lrcheck.reports.render as r\n"
                       "r.second_cpu = lambda: False\nfrom lrcheck.cli import main\nmain()"),
        "full-teardown": f"import sys; sys.argv = {argv}\nfrom lrcheck.cli import app\napp()",
        "bare": None,
    }
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, code in variants.items():
            cmd = ([sys.executable, str(HERE / "baseline.py")] if code is None
                   else [sys.executable, "-c", code])
            started = time.perf_counter()
            done = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            times[name].append(time.perf_counter() - started)
            if done.returncode != 0:  # a crash would be timed as fast: stop instead
                sys.exit(f"{name} exited {done.returncode}:\n{done.stderr[-2000:]}")
    for name, spent in times.items():
        print(f"{name:14} median {statistics.median(spent):.2f} s   "
              + " ".join(f"{t:.2f}" for t in spent))


if __name__ == "__main__":
    main()
