"""Seconds a suite spends drawing its plots: ``benchmarks/suite-12.toml`` (or FILE) run in this
process with every plot drawn here, each ``Plot.draw`` timed; matplotlib's import (which the
suite's plot helper pays once, at its start) timed apart. With ``--plots``, the suite's own
choice of which pairs' PNGs it draws (``lrcheck suite --plots``).

    python benchmarks/plot_cost.py [FILE.toml] [--plots all|failed|none] [--out DIR]
"""

from __future__ import annotations

import argparse
import inspect
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from lrcheck.reports.plots import Plot  # noqa: E402
from lrcheck.reports.render import Renderer  # noqa: E402
from lrcheck.suite.spec import load_suite  # noqa: E402
from lrcheck.suite_api import run_suite  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", default=str(HERE / "suite-12.toml"))
    parser.add_argument("--plots", default=None)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    started = time.perf_counter()
    import matplotlib.figure  # noqa: F401 - the helper's import, timed apart

    imported = time.perf_counter() - started
    spent: dict[str, list[float]] = defaultdict(list)
    draw = Plot.draw

    def timed(plot: Plot) -> None:
        began = time.perf_counter()
        draw(plot)
        spent[plot.path.suffix].append(time.perf_counter() - began)

    Plot.draw = timed  # type: ignore[method-assign]
    options = {} if args.plots is None else {"plots": args.plots}
    if options and "plots" not in inspect.signature(run_suite).parameters:
        raise SystemExit("this lrcheck's run_suite has no plots option")
    out = Path(args.out or tempfile.mkdtemp(prefix="plot-cost-"))
    began = time.perf_counter()
    run_suite(load_suite(Path(args.file)), out, renderer=Renderer(background=False), **options)
    total = time.perf_counter() - began
    pngs, pages = spent[".png"], spent[".html"]
    print(f"suite {total:.2f} s in all; matplotlib import {imported:.2f} s (once, in the helper)")
    print(f"PNGs: {len(pngs)} drawn in {sum(pngs):.2f} s; report pages: {len(pages)} in "
          f"{sum(pages):.2f} s; plots in all (import included) "
          f"{imported + sum(pngs) + sum(pages):.2f} s")


if __name__ == "__main__":
    main()
