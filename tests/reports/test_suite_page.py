"""The suite's matrix (index.html, summary.md) of lrcheck's own pairs beside a pair of recorded
commands: a column for each check some pair has, grad-norm among them."""

from __future__ import annotations

import re
from pathlib import Path

import lrcheck
from lrcheck.reports.files import write_report, write_suite
from lrcheck.spec import CommandPair
from lrcheck.suite.outcome import PairOutcome, SuiteResult
from lrcheck.suite.spec import Suite, SuiteEntry
from tests.conftest import fake_report
from tests.reports.test_commands import CAND, REF, record_folder

LONG = "digits-cosine-restarts-bs4x8-transformers-per-micro-batch-tail-flush-e3-adamw-vs-bs32"


def mixed_suite(out: Path) -> SuiteResult:
    """A suite of two of lrcheck's own pairs (one with a long name) and one pair of recorded
    commands, each pair's report written beside index.html."""
    commands = lrcheck.diff(record_folder(out / "records" / "reference", REF, 1),
                            record_folder(out / "records" / "candidate", CAND, 2))
    own, bad = fake_report(), fake_report(lr_shift=0.01)
    outcomes = [PairOutcome(SuiteEntry(LONG, bad.pair, "fail", f"[[pair]] {LONG}"), report=bad),
                PairOutcome(SuiteEntry("fine", own.pair, "pass", "[[pair]] fine"), report=own),
                PairOutcome(SuiteEntry("my-train-torchrun-2-ranks-bs8-accum2-vs-bs32",
                                       CommandPair(" ".join(REF), " ".join(CAND)), "pass",
                                       "[[pair]] commands"), report=commands)]
    result = SuiteResult(Suite("suite.toml", tuple(o.entry for o in outcomes)), outcomes,
                         seconds=2.0)
    for outcome in outcomes:
        assert outcome.report is not None
        write_report(outcome.report, out / "suite" / outcome.entry.name)
    write_suite(result, out / "suite")
    return result


def test_a_command_pair_s_grad_norm_has_its_column_in_index_html_and_summary_md(tmp_path):
    mixed_suite(tmp_path)
    html = (tmp_path / "suite" / "index.html").read_text()
    matrix = html[html.index('id="matrix"'):html.index('id="expectations"')]
    headers = re.findall(r"<th>(.*?)</th>", matrix)
    print(headers)
    assert "grad-norm" in headers
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", matrix, re.S)[1:]
    column = headers.index("grad-norm")
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)[column] for row in rows]
    print(cells)
    assert "—" in cells[0] and "—" in cells[1] and "pass" in cells[2].lower()
    summary = (tmp_path / "suite" / "summary.md").read_text()
    head = next(line for line in summary.splitlines() if line.startswith("| pair |"))
    assert "| grad-norm |" in head
