"""result.json of an interrupted comparison keeps the schema_version 1 keys."""

from __future__ import annotations

import json

from lrcheck.environment import Environment
from lrcheck.reports.files import write_incomplete
from lrcheck.result import IncompleteResult
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.trace import RunTrace, UpdateRecord


def test_incomplete_result_json(tmp_path):
    pair = PairSpec.build(RunSpec(bs=8, accum=2, world=2, task="wine"))
    ref_updates = [UpdateRecord(k, (0.1, 0.1), 1.0, 32 * (k + 1), k, 0) for k in range(4)]
    reference = RunTrace.partial(pair.reference, ref_updates, 4, "interrupted after 4 of 4")
    candidate = RunTrace.partial(pair.candidate, ref_updates[:2], 4, "interrupted after 2 of 4")
    result = IncompleteResult(pair, reference, candidate,
                              Environment(lrcheck="test", device="cpu", world_size=2),
                              "interrupted (Ctrl-C) during the candidate run")
    path = write_incomplete(result, tmp_path / "out")
    data = json.loads(path.read_text())
    assert path.name == "result.json"
    assert {"schema_version", "verdict", "checks", "runs", "environment"} <= set(data)
    assert (data["schema_version"], data["verdict"], data["checks"]) == (1, "incomplete", [])
    assert data["mode"] == "compare"  # what was being compared, as a finished report says
    cand = data["runs"]["candidate"]
    assert {"spec", "updates", "metrics"} <= set(cand)
    assert cand["spec"]["world"] == 2 and cand["metrics"] is None
    assert [u["step"] for u in cand["updates"]] == [0, 1]
    assert cand["stopped"] == "interrupted after 2 of 4"
    assert data["incomplete"] == "interrupted (Ctrl-C) during the candidate run"


def test_result_json_says_how_the_effects_were_judged():
    """``judging`` (``plan.judging.judging_mode``), beside the schema_version 1 keys, for the
    pairs lrcheck trains; a schedule's trace and a diff of records have none."""
    from lrcheck.plan.judging import Judging
    from lrcheck.result import Kind, Report

    pair = PairSpec.build(RunSpec(bs=8, accum=2, task="wine"))
    updates = [UpdateRecord(k, (0.1,), 1.0, 16 * (k + 1), k, 0) for k in range(2)]
    reference = RunTrace.partial(pair.reference, updates, 2, "")
    candidate = RunTrace.partial(pair.candidate, updates, 2, "")
    environment = Environment(lrcheck="test", device="cpu", world_size=1)
    report = Report(pair, reference, candidate, [], environment, judging=pair.judging)
    assert pair.judging is Judging.LOCKSTEP
    assert report.to_dict()["judging"] == "lockstep"
    assert "judging" not in Report(pair, reference, candidate, [], environment,
                                   Kind.TRACE).to_dict()
    incomplete = IncompleteResult(pair, reference, candidate, environment, "stopped",
                                  Judging.TWIN)
    assert incomplete.to_dict()["judging"] == "twin"
