"""Every kind of page opened in headless Chromium: no console error, no request, plots drawn;
zoom and hover driven with the mouse, the values read under the plot checked against the
report; readable with JavaScript off and in the dark scheme; user strings shown as text.

`make test` installs the browser first (scripts/browser.sh) and sets LRCHECK_REQUIRE_BROWSER,
so there a missing browser fails these tests instead of skipping them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import lrcheck
from lrcheck.checks import schedule_checks
from lrcheck.environment import Environment
from lrcheck.reports.files import write_report, write_suite
from lrcheck.result import Kind, Report
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.suite.outcome import PairOutcome, SuiteResult
from lrcheck.suite.spec import Suite, SuiteEntry
from lrcheck.trace import UpdateColumns, simulated_trace
from tests.conftest import fake_report
from tests.reports.browser import browser, missing, open_page, pixel_spread

pytestmark = pytest.mark.slow

EVIL = "<script>alert(1)</script>"
MILLION = 1_000_000
LATE_FROM = 123_457  # the candidate of the million-update trace runs one update late from here


@pytest.fixture(scope="module")
def chrome() -> Any:
    why = missing()
    if why is not None:
        if os.environ.get("LRCHECK_REQUIRE_BROWSER") == "1":
            pytest.fail(f"the browser tests cannot run: {why}")
        pytest.skip(why)
    with browser() as instance:
        yield instance


def million_update_trace() -> Report:
    """A trace report of 10⁶ updates (built from columns, not simulated): a cosine, and a
    candidate one update late from ``LATE_FROM`` on — a gap no 4,000-point picture shows."""
    pair = PairSpec.build(RunSpec(task="synthetic", bs=1, accum=1, samples=MILLION, epochs=1),
                          ref_bs=1)  # a trace's placeholder task, as TRACE_DEFAULTS has it
    k = np.arange(MILLION)
    ref = 0.05 * 0.5 * (1 + np.cos(np.pi * k / MILLION))
    cand = np.where(k < LATE_FROM, ref, 0.05 * 0.5 * (1 + np.cos(np.pi * (k - 1) / MILLION)))

    def run(spec: RunSpec, lr: np.ndarray) -> Any:
        columns = UpdateColumns(np.stack([lr, lr], axis=1), k + 1, k, np.zeros(MILLION))
        return simulated_trace(spec, columns, MILLION, planned_updates=MILLION, context=None,
                               stopped=None, seconds=1.0)

    reference, candidate = run(pair.reference, ref), run(pair.candidate, cand)
    checks = schedule_checks(reference, candidate, pair.tolerances)
    return Report(pair, reference, candidate, checks,
                  Environment(lrcheck="test", torch="test", device="cpu"), kind=Kind.TRACE)


def recorder_file(path: Path, per_micro_batch: bool) -> Path:
    """A Recorder file of 200 updates of a linear decay, stepped twice per update when
    ``per_micro_batch``."""
    pace = 2 if per_micro_batch else 1
    path.write_text("".join(json.dumps({
        "step": k, "samples_seen": 32 * (k + 1), "lr": [0.1 * max(0.0, 1 - pace * k / 200)],
        "loss": 1.0 / (k + 1)}) + "\n" for k in range(200)))
    return path


@pytest.fixture(scope="module")
def pages(tmp_path_factory: Any) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("pages")
    compare = lrcheck.compare(policy="per-micro-batch", epochs=1)
    trace = million_update_trace()
    diff = lrcheck.diff(recorder_file(out / "ref.jsonl", False),
                        recorder_file(out / "cand.jsonl", True))
    for name, report in (("compare", compare), ("trace", trace), ("diff", diff)):
        write_report(report, out / name)
    good, bad = fake_report(), fake_report(lr_shift=0.01)
    outcomes = [PairOutcome(SuiteEntry(EVIL, bad.pair, "pass", f"[[pair]] {EVIL}"), report=bad),
                PairOutcome(SuiteEntry("caught", bad.pair, "fail", "[[pair]] caught"),
                            report=bad),
                PairOutcome(SuiteEntry("fine", good.pair, "pass", "[[pair]] fine"),
                            report=good)]
    suite = SuiteResult(Suite(f"{EVIL}.toml", tuple(o.entry for o in outcomes)), outcomes,
                        seconds=2.0)
    for outcome in outcomes:
        assert outcome.report is not None
        write_report(outcome.report, out / "suite" / outcome.entry.name)
    write_suite(suite, out / "suite")
    return {"out": out, "compare": compare, "trace": trace, "diff": diff}


def drawn(visit: Any, selector: str) -> None:
    """The element's screenshot is a picture, not a blank: many colours, spread out."""
    spread, colours = pixel_spread(visit.page.locator(selector).first.screenshot())
    print(selector, f"pixel std {spread:.1f}, {colours} colours")
    assert spread > 10 and colours > 20, (selector, spread, colours)


def clean(visit: Any) -> None:
    assert visit.problems == [], visit.problems
    assert visit.requests == [], visit.requests


def hover(visit: Any, plot: str, fraction: float) -> dict[str, str]:
    """Move the mouse over ``fraction`` of the width of the plot's top chart; the readout under
    the plot then."""
    page = visit.page
    over = page.locator(f"#plot-{plot} .live .u-over").first
    box = over.bounding_box()
    page.mouse.move(box["x"] + fraction * box["width"], box["y"] + box["height"] / 2)
    return page.locator(f"#plot-{plot} .readout").evaluate("e => ({...e.dataset})")


def hover_update(visit: Any, plot: str, k: int) -> dict[str, str]:
    """``hover`` over update ``k`` of the zoomed range."""
    low, high = zoomed(visit, plot)
    return hover(visit, plot, (k - low) / (high - low))


def zoomed(visit: Any, plot: str) -> tuple[float, float]:
    data = visit.page.locator(f"#plot-{plot}").evaluate("e => [e.dataset.xmin, e.dataset.xmax]")
    return float(data[0]), float(data[1])


def f32(value: float) -> float:
    return float(np.float32(value))


def assert_reads(readout: dict[str, str], ref: np.ndarray, cand: np.ndarray) -> int:
    """The readout of update k is the report's value of k in both runs (as float32, what the
    page keeps) and their difference (taken in float64)."""
    k = int(readout["k"])
    want = (f32(ref[k]), f32(cand[k]), f32(cand[k] - ref[k]))
    got = (float(readout["ref"]), float(readout["cand"]), float(readout["diff"]))
    assert got == want, (k, got, want)
    return k


def test_compare_page_zooms_to_the_first_divergence_and_hovers_update_values(chrome, pages):
    report = pages["compare"]
    result = json.loads((pages["out"] / "compare" / "result.json").read_text())
    ref, cand = ([u["lr"][0] for u in result["runs"][role]["updates"]]
                 for role in ("reference", "candidate"))
    first = report.check("lr").first_divergence
    started = time.perf_counter()
    with open_page(chrome, pages["out"] / "compare" / "report.html") as visit:
        print(f"compare page ready in {time.perf_counter() - started:.2f} s")
        page = visit.page
        assert page.locator("header.verdict.fail h1").inner_text().startswith("FAIL")
        drawn(visit, "#plot-lr .live")
        drawn(visit, "#plot-loss .live")
        # One click from the checks table to the first divergence.
        page.locator("#checks + table a.goto").first.click()
        low, high = zoomed(visit, "lr")
        assert low <= first <= high and high - low <= 41
        readout = hover_update(visit, "lr", first)
        assert assert_reads(readout, np.array(ref), np.array(cand)) == first
        # Drag across a third of the plot: zoomed in; hover reads the updates there.
        page.locator("#plot-lr a", has_text="whole run").click()
        assert zoomed(visit, "lr") == (0, len(ref) - 1)
        box = page.locator("#plot-lr .live .u-over").first.bounding_box()
        y = box["y"] + box["height"] / 2
        page.mouse.move(box["x"] + 0.3 * box["width"], y)
        page.mouse.down()
        page.mouse.move(box["x"] + 0.6 * box["width"], y, steps=5)
        page.mouse.up()
        low, high = zoomed(visit, "lr")
        assert 0.25 * len(ref) < low < high < 0.65 * len(ref)
        k = assert_reads(hover(visit, "lr", 0.5), np.array(ref), np.array(cand))
        assert low <= k <= high
        # The loss plot reads the losses the same way.
        losses = [np.array([u["loss"] for u in result["runs"][r]["updates"]])
                  for r in ("reference", "candidate")]
        assert_reads(hover(visit, "loss", 0.25), *losses)
        clean(visit)


def test_a_million_update_trace_reads_every_update_from_a_small_page(chrome, pages):
    path = pages["out"] / "trace" / "report.html"
    size = path.stat().st_size
    print(f"1,000,000-update trace: report.html {size / 1e3:.0f} KB")
    assert size < 400_000
    report = pages["trace"]
    ref, cand = (r.lrs()[:, 0] for r in (report.reference, report.candidate))
    assert report.check("lr").first_divergence == LATE_FROM
    started = time.perf_counter()
    with open_page(chrome, path) as visit:
        print(f"1,000,000-update page ready in {time.perf_counter() - started:.2f} s")
        drawn(visit, "#plot-lr .live")
        visit.page.locator("#plot-lr a", has_text="first divergence").click()
        assert assert_reads(hover_update(visit, "lr", LATE_FROM), ref, cand) == LATE_FROM
        # Any update, not only the ones result.json keeps: the page holds the whole trace.
        stored = {u["step"] for u in json.loads((path.parent / "result.json").read_text())[
            "runs"]["reference"]["updates"]}
        assert 777_777 not in stored
        visit.page.goto(path.resolve().as_uri() + "#update-777777-lr")
        visit.page.reload()
        visit.page.locator("html[data-plots]").wait_for(state="attached")
        assert assert_reads(hover_update(visit, "lr", 777_777), ref, cand) == 777_777
        clean(visit)


def test_diff_page_opens_clean_with_both_plots(chrome, pages):
    with open_page(chrome, pages["out"] / "diff" / "report.html") as visit:
        drawn(visit, "#plot-lr .live")
        drawn(visit, "#plot-loss .live")
        visit.page.locator("#checks + table a.goto").first.click()
        ref, cand = (r.lrs()[:, 0] for r in (pages["diff"].reference, pages["diff"].candidate))
        assert assert_reads(hover_update(visit, "lr", 1), ref, cand) == 1
        clean(visit)


def test_suite_page_shows_a_script_name_as_text_and_links_each_pair(chrome, pages):
    with open_page(chrome, pages["out"] / "suite" / "index.html") as visit:
        page = visit.page
        matrix = page.locator("#matrix + table")
        assert EVIL in matrix.inner_text()  # shown, not run (a run alert is a problem below)
        assert EVIL in page.title()
        drawn(visit, "#matrix + table")
        clean(visit)
        page.locator("#matrix + table a", has_text="fine").click()
        page.locator("html[data-plots]").wait_for(state="attached")
        assert page.url.endswith("/fine/report.html")
        assert visit.requests == [page.url]  # the linked page itself, nothing else
        visit.requests.clear()
        assert page.locator("header.verdict.pass").count() == 1
        clean(visit)


def test_pages_read_without_javascript(chrome, pages):
    with open_page(chrome, pages["out"] / "compare" / "report.html", javascript=False) as visit:
        page = visit.page
        assert page.locator("figure.is-live").count() == 0
        for name in ("lr", "loss", "metrics"):
            assert page.locator(f"#plot-{name} img.static").is_visible()
            drawn(visit, f"#plot-{name} img.static")
        assert "first differs at update" in page.locator("#checks + table").inner_text()
        clean(visit)


def test_dark_scheme_is_dark_and_still_drawn(chrome, pages):
    with open_page(chrome, pages["out"] / "compare" / "report.html", scheme="dark") as visit:
        background = visit.page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"
        drawn(visit, "#plot-lr .live")
        clean(visit)


def test_suite_page_fits_a_1400_px_window(chrome, tmp_path):
    """index.html of lrcheck's own pairs (one with a long name) beside a pair of recorded
    commands, its grad-norm column too: in a 1400 px window nothing sticks out sideways."""
    from tests.reports.test_suite_page import mixed_suite

    mixed_suite(tmp_path)
    with open_page(chrome, tmp_path / "suite" / "index.html", width=1400) as visit:
        page = visit.page
        wide = page.evaluate("document.documentElement.scrollWidth")
        right = page.locator("#matrix + table").bounding_box()
        print("scrollWidth", wide, "matrix", right)
        assert wide <= 1400 and right["x"] + right["width"] <= 1400
        assert "grad-norm" in page.locator("#matrix + table th").all_inner_texts()
        clean(visit)
