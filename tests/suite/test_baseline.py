"""Baselines: saved per pair, compared by name; a changed LR trace or a metric drop beyond the
pair's tolerance is a regression; a bad baseline file is bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lrcheck.errors import SpecError
from lrcheck.plan.digest import lr_digest
from lrcheck.suite.baseline import baseline_document, load_baseline, record, regressions
from lrcheck.suite.outcome import PairOutcome
from lrcheck.suite.spec import SuiteEntry


def saved(tmp_path, report) -> dict:
    entry = SuiteEntry("p", report.pair, "pass", "[[pair]] #1")
    path = tmp_path / "baseline.json"
    path.write_text(json.dumps(baseline_document([PairOutcome(entry, report=report)], "ci.toml")))
    return load_baseline(path)


def test_an_unchanged_run_has_no_regression(tmp_path, make_report):
    records = saved(tmp_path, make_report())
    assert set(records) == {"p"} and records["p"]["updates"] == 5
    assert regressions(make_report(), records["p"]) == []
    # Within tol_metrics (0.01) is not a regression; better is not either.
    assert regressions(make_report(accuracy=0.895, f1=0.95), records["p"]) == []


def test_a_changed_schedule_and_dropped_metrics_are_regressions(tmp_path, make_report):
    rec = saved(tmp_path, make_report())["p"]
    found = regressions(make_report(scheduler="linear", lr_shift=1e-3, accuracy=0.85), rec)
    assert [r.what for r in found] == ["lr", "accuracy"]
    assert "the candidate's LR trace changed" in found[0].detail
    assert "settings changed: scheduler 'cosine' → 'linear'" in found[0].detail
    assert found[1].detail == "accuracy dropped 0.9000 → 0.8500 (-0.0500, tolerance 0.01)"
    f1 = regressions(make_report(f1=0.8), rec)
    assert [r.what for r in f1] == ["f1_macro"]


def test_the_digest_ignores_last_bit_noise_but_not_real_changes():
    lrs = np.array([[0.1, 0.1], [0.05, 0.05], [1e-7, 1e-7]])
    assert lr_digest(lrs) == lr_digest(lrs * (1 + 2e-16))
    assert lr_digest(lrs) != lr_digest(lrs * (1 + 1e-9))
    assert lr_digest(lrs) != lr_digest(lrs[:2])
    assert lr_digest(lrs) != lr_digest(lrs[:, :1])


def test_record_holds_what_the_issue_asks(make_report):
    rec = record(make_report())
    assert rec["lr_digest"].startswith("sha256:") and rec["metrics"]["accuracy"] == 0.9
    assert rec["pair"]["candidate"]["scheduler"] == "cosine"


@pytest.mark.parametrize("content, says", [
    (None, "does not exist; save one with --save-baseline"),
    ("{not json", "is corrupt: not JSON"),
    ('{"schema_version": 1, "pairs": {}}', "is not an lrcheck baseline"),
    ('{"kind": "lrcheck-baseline", "schema_version": 2, "pairs": {}}',
     "has schema version 2; this lrcheck reads version 1"),
    ('{"kind": "lrcheck-baseline", "schema_version": 1, "pairs": []}',
     "\"pairs\" is not an object"),
    ('{"kind": "lrcheck-baseline", "schema_version": 1, "pairs": {"p": {"lr_digest": "x"}}}',
     "pair 'p' lacks reference_lr_digest, updates, metrics, pair"),
    ('{"kind": "lrcheck-baseline", "schema_version": 1, "pairs": {"p": {"lr_digest": "x", '
     '"reference_lr_digest": "y", "updates": 3, "metrics": {"accuracy": "high"}, "pair": {}}}}',
     "pair 'p''s 'metrics' is {'accuracy': 'high'}"),
    ('{"kind": "lrcheck-baseline", "schema_version": 1, "pairs": {"p": {"lr_digest": "x", '
     '"reference_lr_digest": "y", "updates": "3", "metrics": null, "pair": {}}}}',
     "pair 'p''s 'updates' is '3'"),
])
def test_bad_baselines_are_bad_input_with_the_reason(tmp_path, content, says):
    path = tmp_path / "baseline.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SpecError) as caught:
        load_baseline(path)
    assert says in str(caught.value) and "baseline.json" in str(caught.value)
    assert caught.value.exit_code == 2


def test_a_diff_reports_sides_are_folders_not_settings_so_a_new_out_changes_nothing(
        make_report):
    from dataclasses import replace

    from lrcheck.result import Kind
    from lrcheck.spec import FilePair

    def diff(out: str, lr_shift: float = 0.0):
        return replace(make_report(lr_shift=lr_shift), kind=Kind.DIFF,
                       pair=FilePair(f"{out}/mine/reference", f"{out}/mine/candidate"))

    assert regressions(diff("B2"), record(diff("B"))) == []
    moved = regressions(diff("B2", lr_shift=0.01), record(diff("B")))
    assert [r.what for r in moved] == ["lr"] and "settings changed" not in moved[0].detail
