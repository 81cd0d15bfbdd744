"""docs/img's screenshots, taken by the headless Chromium of the browser tests (`make
screenshots`): report.html of a failing compare zoomed to its first divergence, and the
index.html of a small suite. Run from the repository root:

    python scripts/screenshots.py docs/img
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.reports.browser import browser, missing, open_page  # noqa: E402

SUITE = """\
[defaults]
epochs = 2

[[pair]]
name = "accum-x2"
accum = 2
bs = 16

[[pair]]
name = "adamw-x4"
accum = 4
bs = 8
optimizer = "adamw"

[[pair]]
name = "bug-step-every-micro-batch"
policy = "per-micro-batch"
accum = 4
bs = 8
expect = "fail"
"""


def lrcheck(cwd: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "lrcheck", *args, "--quiet"], check=False, cwd=cwd)


def main(folder: Path) -> None:
    why = missing()
    if why is not None:
        sys.exit(f"screenshots: {why}")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lrcheck(work, "compare", "--accum", "2", "--bs", "16", "--ref-bs", "32", "--policy",
                "per-micro-batch", "--out", "compare")
        (work / "ci.toml").write_text(SUITE)
        lrcheck(work, "suite", "ci.toml", "--out", "suite")
        with browser() as instance:
            with open_page(instance, work / "compare" / "report.html", height=1000) as visit:
                page = visit.page
                page.locator("#checks + table a.goto").first.click()
                over = page.locator("#plot-lr .live .u-over").first
                box = over.bounding_box()
                low, high = (float(v) for v in page.locator("#plot-lr").evaluate(
                    "e => [e.dataset.xmin, e.dataset.xmax]"))
                k = int(page.locator("#plot-lr .readout").evaluate("e => e.dataset.k"))
                page.mouse.move(box["x"] + (k - low) / (high - low) * box["width"],
                                box["y"] + box["height"] / 3)
                bottom = page.locator("#plot-lr .readout").bounding_box()
                scrolled = page.evaluate("window.scrollY")
                page.screenshot(path=folder / "report-first-divergence.png", full_page=True,
                                clip={"x": 0, "y": 0, "width": 1100,
                                      "height": scrolled + bottom["y"] + bottom["height"] + 16})
                assert not visit.problems and not visit.requests, (visit.problems,
                                                                   visit.requests)
            with open_page(instance, work / "suite" / "index.html", height=700) as visit:
                visit.page.screenshot(path=folder / "suite-index.png", full_page=True)
                assert not visit.problems and not visit.requests
    print(f"screenshots: {folder / 'report-first-divergence.png'}, "
          f"{folder / 'suite-index.png'}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
