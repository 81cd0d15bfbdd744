"""What ``lrcheck run --interrupt-at N --resume CMD`` costs against the same pair uninterrupted
(issue 41: at most 1.2×): ``tests/fixtures/user_lockstep.py`` (an MLP on scikit-learn's digits,
AdamW, float32, a checkpoint every 8 updates), ``--bs 16`` against ``--bs 4 --accum 4``, 100
updates, in lockstep; interrupted (SIGTERM) before update 50's step, resumed from the checkpoint
of update 47 (updates 48-49 trained twice); and the same at ``LONG`` updates. Both write the
same checkpoints; the interrupted pair starts one process more (the resume, which imports torch
again): the last row measures what that restart costs the candidate alone, without lrcheck.
Wall time and peak RSS, medians of ``runs`` alternations.

    python benchmarks/resume_cost.py [RUNS]      # or: python benchmarks/bench.py --only resume
"""

from __future__ import annotations

import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SCRIPT = HERE.parent / "tests" / "fixtures" / "user_lockstep.py"
UPDATES, EVERY, AT = 100, 8, 50
# The same pair trained 60 times as long: the resumed process's start (importing torch, and
# torch._dynamo with the first optimizer: 6 s of a 1-update run of this script here) is a
# constant, which a training of 100 updates of 5 ms does not dwarf as real ones do.
LONG = 6000
RESUME_TARGET = 1.2


def commands(out: Path, updates: int = UPDATES) -> tuple[list[str], list[str]]:
    """``lrcheck run`` of the pair uninterrupted, and interrupted (at the middle) then
    resumed."""
    py = sys.executable
    run = [py, str(SCRIPT), "--updates", str(updates)]
    saved = str(out / "c.pt")
    cand = [*run, "--bs", "4", "--accum", "4", "--save-every", str(EVERY), "--save", saved]
    pair = [py, "-m", "lrcheck", "run", "--quiet", shlex.join([*run, "--bs", "16"]),
            shlex.join(cand)]
    return ([*pair, "--out", str(out / "plain")],
            [*pair, "--out", str(out / "interrupted"), "--interrupt-at", str(updates // 2),
             "--resume", shlex.join([*cand, "--resume", saved])])


def bare(out: Path) -> tuple[list[str], list[str]]:
    """The candidate alone, without lrcheck: run whole, and stopped at the middle (saving
    there) then resumed by a second process: what a restart costs the training itself."""
    cand = [sys.executable, str(SCRIPT), "--updates", str(UPDATES), "--bs", "4", "--accum",
            "4", "--save", str(out / "b.pt")]
    stopped = shlex.join([*cand, "--stop-after", str(AT)])
    resumed = shlex.join([*cand, "--resume", str(out / "b.pt")])
    return cand, ["bash", "-c", f"{stopped} && {resumed}"]


def bench(table: Any, runs: int, out: Path, alternate: Callable[..., Any],
          wall_rss: Callable[[float, float], str]) -> None:
    """Rows of ``bench.py``'s table: the interrupted pair's wall time against the pair's, at
    ``UPDATES`` and ``LONG`` updates, and the candidate's own restart, bare."""
    for updates in (UPDATES, LONG):
        plain, interrupted = commands(out, updates)
        stopped, whole = alternate(interrupted, plain, runs)
        table.add(f"lrcheck run --interrupt-at {updates // 2} (resumed, {updates} updates) "
                  "against the pair uninterrupted, wall", wall_rss(*stopped), wall_rss(*whole),
                  stopped[0] / whole[0], RESUME_TARGET)
    whole_run, restarted = bare(out)
    stopped, whole = alternate(restarted, whole_run, runs)
    table.add(f"bare, no lrcheck: the candidate stopped at {AT} and resumed ({UPDATES} updates) "
              "against it run whole, wall", wall_rss(*stopped), wall_rss(*whole),
              stopped[0] / whole[0], RESUME_TARGET)


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from bench import Table, alternate, wall_rss

    rows = Table()
    with tempfile.TemporaryDirectory(prefix="lrcheck-resume-") as tmp:
        bench(rows, int(sys.argv[1]) if len(sys.argv) > 1 else 3, Path(tmp), alternate, wall_rss)
    rows.print()
