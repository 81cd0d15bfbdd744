"""How ``lrcheck suite FILE --jobs N`` scales with N, reasoned from the per-pair costs lrcheck
computes before training (``suite.shard.run_cost``: micro-batch steps), not measured: this
project's machine has 2 cores. The schedule is ``suite.queue.PairQueue``'s own, replayed in time:
a pair takes ``PAIR_S`` (building, evaluating, checking, saving) plus ``STEP_S`` a micro-batch
step (its candidate's, and its reference's for the pair that trains it, which is handed on as
soon as it has trained); the imports of the process the workers are forked from come first,
once. Plots are drawn aside, by the suite process's one plot helper, on a core of its own: since
issue 32 (``--plots failed``, the default) only a failing pair's PNGs (``PLOT_S`` a pair) and
matrix.png, drawn once every pair has ended: the suite's wall is the later of the schedule's and
the helper's (its import and the failing pairs' PNGs, ``plots_floor``), plus matrix.png.
Printed beside it: the schedule where a reference group was the unit (one worker per group), as
before issue 23's last change.

    python benchmarks/jobs_scaling.py [FILE.toml ...] [--jobs 1,2,4,8,16]
                                      [--fit SUITE_DIR] [--step S] [--pair S]

Defaults: ``benchmarks/suite-12.toml`` (3 references, 12 candidates) and a suite of one
reference and 8 candidates built here (``one_reference``). ``--fit DIR``: ``PAIR_S`` and
``STEP_S`` fitted (least squares) to the pairs' ``seconds`` in a sequential run's
``DIR/suite.json`` of the first file, its first pair (which imports torch) left out; the
defaults are that fit of ``benchmarks/suite-12.toml`` on the 2-core machine (2026-12-01).
"""

from __future__ import annotations

import argparse
import heapq
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from lrcheck.spec import PairSpec  # noqa: E402
from lrcheck.suite.queue import PairQueue  # noqa: E402
from lrcheck.suite.shard import entry_cost, groups, run_cost  # noqa: E402
from lrcheck.suite.spec import Suite, load_suite, parse_suite  # noqa: E402

STEP_S = 0.00032
PAIR_S = 0.22
IMPORT_S = 3.0  # torch and scikit-learn, imported once by the workers' leader (runner.workers)
# The plot helper (issue 32, on the 2-core machine, quiet): matplotlib's import, matrix.png, and a
# failing pair's three PNGs (lr.png 0.10 s, metrics.png 0.085 s, loss.png 0.065 s).
PLOT_IMPORT_S, MATRIX_S, PLOT_S = 0.7, 0.19, 0.25


def one_reference() -> Suite:
    """One reference (bs 32 on one process) and 8 candidates: the four splits of 32 on one
    process and on two (whose pairs count two cores and a launch)."""
    pairs = [{"name": f"bs{bs}-x{accum}-n{nproc}", "bs": bs, "accum": accum, "nproc": nproc}
             for nproc, splits in ((1, ((16, 2), (8, 4), (4, 8), (2, 16))),
                                   (2, ((8, 2), (4, 4), (2, 8), (1, 16))))
             for bs, accum in splits]
    return parse_suite({"defaults": {"task": "digits"}, "pair": pairs}, "one-reference.toml")


def fit(suite: Suite, folder: Path) -> tuple[float, float]:
    """(PAIR_S, STEP_S) fitted to the pairs' seconds of a sequential run of ``suite``."""
    import json

    seconds = {p["name"]: p["seconds"] for p in json.loads(
        (folder / "suite.json").read_text())["pairs"]}
    trained: set[object] = set()
    rows = []
    for entry in suite.entries:
        pair = entry.pair
        steps = entry_cost(entry)
        if isinstance(pair, PairSpec) and pair.reference not in trained:
            trained.add(pair.reference)
            steps += run_cost(pair.reference)
        rows.append((steps, seconds[entry.name]))
    rows = rows[1:]
    mx = sum(x for x, _ in rows) / len(rows)
    my = sum(y for _, y in rows) / len(rows)
    slope = (sum((x - mx) * (y - my) for x, y in rows)
             / sum((x - mx) ** 2 for x, _ in rows))
    return my - slope * mx, slope


def by_pairs(suite: Suite, jobs: int, step: float, each: float) -> float:
    """The wall of ``suite`` on ``jobs`` workers as ``PairQueue`` hands its pairs out."""
    queue = PairQueue(suite, jobs)
    now, free, events = IMPORT_S, jobs, []  # events: (time, kind, index)
    while queue.todo or events:
        while (index := queue.take(free)) is not None:
            free -= queue.cores(index)
            pair = suite.entries[index].pair
            trains = isinstance(pair, PairSpec) and not queue.given(index)
            ref_s = run_cost(pair.reference) * step if trains else 0.0
            if trains:
                heapq.heappush(events, (now + ref_s, "trained", index))
            heapq.heappush(events, (now + each + ref_s + entry_cost(suite.entries[index])
                                    * step, "ended", index))
        if not events:
            break
        now, kind, index = heapq.heappop(events)
        if kind == "trained":
            pair = suite.entries[index].pair
            queue.trained(index, pair.reference, b"")
        else:
            free += queue.cores(index)
            queue.ended(index)
    return now


def by_groups(suite: Suite, jobs: int, step: float, each: float) -> float:
    """The wall with a reference group as the unit, costliest group first (a group on one
    worker: its cores are not modelled)."""
    ends = [IMPORT_S] * jobs
    for group in sorted(groups(suite), key=lambda g: -g.cost):
        first = min(range(jobs), key=ends.__getitem__)
        ends[first] += group.cost * step + len(group.indices) * each
    return max(ends)


def plots_floor(suite: Suite) -> float:
    """The plot helper's wall for ``suite``'s pairs under ``--plots failed``: its import and a
    PNG set for each pair expected to fail."""
    return PLOT_IMPORT_S + sum(PLOT_S for entry in suite.entries if entry.expect == "fail")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--jobs", default="1,2,4,8,16")
    parser.add_argument("--step", type=float, default=STEP_S)
    parser.add_argument("--pair", type=float, default=PAIR_S)
    parser.add_argument("--fit", type=Path)
    args = parser.parse_args()
    suites = [load_suite(f) for f in args.files] or [load_suite(HERE / "suite-12.toml"),
                                                      one_reference()]
    each, step = fit(suites[0], args.fit) if args.fit else (args.pair, args.step)
    counts = [int(n) for n in args.jobs.split(",")]
    for suite in suites:
        print(f"{suite.path}: {len(suite.entries)} pairs, {len(groups(suite))} reference "
              f"group(s); {IMPORT_S:.0f} s of imports, {each:.2f} s a pair + "
              f"{step * 1e3:.3f} ms a step")
        print(f"  {'--jobs':>6}  {'pairs (now)':>16}  {'groups (before)':>16}")
        floor = plots_floor(suite)
        serial = max(by_pairs(suite, 1, step, each), floor) + MATRIX_S
        for jobs in counts:
            pairs = max(by_pairs(suite, jobs, step, each), floor) + MATRIX_S
            grouped = by_groups(suite, jobs, step, each) + MATRIX_S
            print(f"  {jobs:>6}  {pairs:6.1f} s ({serial / pairs:4.1f}×)  "
                  f"{grouped:6.1f} s ({serial / grouped:4.1f}×)")


if __name__ == "__main__":
    main()
