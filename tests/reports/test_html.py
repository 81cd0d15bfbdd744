"""report.html and index.html without a browser: the packed traces read back bit for bit,
user strings are escaped, the pages are self-contained and small."""

from __future__ import annotations

import re

import numpy as np
import pytest

from lrcheck.reports.files import write_report, write_suite
from lrcheck.reports.html import esc, grid, json_script, tag
from lrcheck.reports.html_suite import suite_page
from lrcheck.reports.series import pack, unpack
from lrcheck.suite.outcome import PairOutcome, SuiteResult
from lrcheck.suite.spec import Suite, SuiteEntry

EVIL = "<script>alert(1)</script>"
N = 1_000_000


def _cosine(n: int, periods: float = 0.5, warmup: int = 0) -> np.ndarray:
    k = np.arange(n)
    main = 0.05 * 0.5 * (1 + np.cos(2 * np.pi * periods * (k - warmup) / (n - warmup)))
    return np.where(k < warmup, 0.05 * k / max(warmup, 1), main)


@pytest.mark.parametrize("name, values, base", [
    ("cosine with warmup", _cosine(N, warmup=N // 10), None),
    ("equal to its reference", _cosine(N), _cosine(N)),
    ("twice too fast", _cosine(N, periods=1.0), _cosine(N)),
    ("one update late", np.r_[0.0, _cosine(N)[:-1]], _cosine(N)),
    ("steps", 0.05 * 0.5 ** (np.arange(N) // 250_000), None),
    ("a difference of 1e-13", np.full(N, 1e-13), None),
    ("NaN and infinities", np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40]), None),
    ("empty", np.empty(0), None),
])
def test_packed_series_read_back_bit_for_bit_and_stay_small(name, values, base):
    packed = pack(values, base)
    got = unpack(packed, None if base is None else base.astype(np.float32))
    want = values.astype(np.float32)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), name
    # A million smooth or constant float32 values (4 MB) in under 110 KB of base64.
    assert len(packed["data"]) < 110_000, (name, len(packed["data"]))


def test_esc_and_tag_escape_every_user_string():
    assert esc(EVIL) == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert tag("a", EVIL, href='x" onclick="y') == (
        '<a href="x&quot; onclick=&quot;y">&lt;script&gt;alert(1)&lt;/script&gt;</a>')
    assert "<script>" not in grid([EVIL], [[EVIL]], caption=EVIL)
    assert "</script" not in json_script("d", {"name": EVIL})[:-len("</script>")]


@pytest.fixture
def evil_suite(make_report) -> SuiteResult:
    good, bad = make_report(), make_report(lr_shift=0.01, scheduler=f"{EVIL}.py:make")
    outcomes = [PairOutcome(SuiteEntry(EVIL, bad.pair, "pass", f"[[pair]] {EVIL}"), report=bad),
                PairOutcome(SuiteEntry("fine", good.pair, "pass", "[[pair]] fine"), report=good)]
    return SuiteResult(Suite(f"{EVIL}.toml", tuple(o.entry for o in outcomes)), outcomes,
                       seconds=1.0, baseline_path=f"{EVIL}.json")


def test_suite_page_shows_user_strings_as_text(evil_suite):
    text = suite_page(evil_suite)
    assert "<script" not in text.lower()  # the suite page has no script at all
    assert text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4
    # The pair's folder is linked with its name percent-encoded.
    assert 'href="%3Cscript%3Ealert%281%29%3C%2Fscript%3E/report.html"' in text


def test_report_page_is_self_contained_and_escapes_the_factory_path(make_report, tmp_path):
    report = make_report(lr_shift=0.01, scheduler=f"{EVIL}.py:make")
    write_report(report, tmp_path)
    text = (tmp_path / "report.html").read_text()
    scripts = re.findall(r"<script[^>]*>", text)
    assert scripts == ['<script type="application/json" id="lrcheck-data">', "<script>",
                       "<script>"]  # the data, uPlot and report.js: nothing else runs
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.py:make" in text
    assert not re.search(r"""(src|href)=["'](https?:|//)""", text)  # nothing is fetched
    assert "default-src &#x27;none&#x27;" in text  # the page's CSP: no request at all
    assert text.count("data:image/png;base64,") == 3  # lr, loss, metrics: the static pictures
    assert 'data-goto="lr" data-k="2"' in text  # the first divergence, one click away


def test_index_html_is_written_with_the_suite(evil_suite, tmp_path):
    write_suite(evil_suite, tmp_path)
    assert "Pairs × checks" in (tmp_path / "index.html").read_text()
