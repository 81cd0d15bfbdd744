"""Merging the shards of a suite: the merged report is the suite's (its JUnit and summary too);
shards of different suites and pairs present twice are refused; a lost shard's pairs are errors
that name them; a baseline is saved only from a complete merge. Reports built by hand."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest

from lrcheck.api import merge_suites
from lrcheck.errors import SpecError
from lrcheck.reports.files import result_json, write_json, write_suite, write_text
from lrcheck.suite.merge import read_shard
from lrcheck.suite.outcome import PairOutcome, SuiteResult
from lrcheck.suite.shard import shard_of
from lrcheck.suite.spec import parse_suite

SCHEDULERS = ("cosine", "linear", "wsd", "constant")


def suite(schedulers=SCHEDULERS, path="ci.toml"):
    pairs = [{"name": f"p-{s}", "scheduler": s, "bs": 8, "accum": 2} for s in schedulers]
    return parse_suite({"defaults": {"task": "wine"}, "pair": pairs}, path)


def write_shards(tmp_path, make_report, whole, count, prefix="S", broken=()):
    """Each shard's folder as ``lrcheck suite --shard k/count`` writes it; the pairs named in
    ``broken`` have a candidate whose LR is off."""
    folders = []
    for k in range(1, count + 1):
        part, info = shard_of(whole, k, count)
        folder = tmp_path / f"{prefix}{k}"
        outcomes = []
        for entry in part.entries:
            report = replace(make_report(lr_shift=0.01 if entry.name in broken else 0.0,
                                         scheduler=entry.pair.candidate.scheduler),
                             pair=entry.pair)
            (folder / entry.name).mkdir(parents=True)  # the merge reads result.json alone
            write_text(folder / entry.name / "result.json", result_json(report))
            outcomes.append(PairOutcome(entry, report=report, seconds=1.5))
        write_json(folder / "suite.json",
                   SuiteResult(part, outcomes, seconds=2.0, shard=info).to_dict())
        folders.append(folder)
    return folders


def test_merged_shards_are_the_whole_suite_in_its_order(tmp_path, make_report):
    whole = suite()
    folders = write_shards(tmp_path, make_report, whole, 3, broken={"p-wsd"})
    result = merge_suites(tmp_path / "M", list(reversed(folders)))
    assert [o.entry.name for o in result.outcomes] == [e.name for e in whole.entries]
    assert [o.status for o in result.outcomes] == ["ok", "ok", "unexpected", "ok"]
    assert result.exit_code == 1 and result.complete
    wsd = result.outcomes[2]
    assert wsd.report.check("lr").first_divergence == 2
    saved = json.loads((tmp_path / "M" / "suite.json").read_text())
    assert saved["merge"]["missing"] == [] and sorted(saved["merge"]["shards"]) == ["1/3", "2/3",
                                                                                     "3/3"]
    assert "shard" not in saved
    for name in ("p-cosine", "p-wsd"):  # each pair's folder is copied in
        assert json.loads((tmp_path / "M" / name / "result.json").read_text())["pair"]["name"]


def test_the_junit_and_summary_of_a_merge_tell_every_pair(tmp_path, make_report):
    folders = write_shards(tmp_path, make_report, suite(), 2, broken={"p-linear"})
    merge_suites(tmp_path / "M", folders)
    root = ET.parse(tmp_path / "M" / "junit.xml").getroot()
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert sorted(suites) == sorted(f"p-{s}" for s in SCHEDULERS)
    assert root.get("failures") == "1" and suites["p-linear"].get("failures") == "1"
    summary = (tmp_path / "M" / "summary.md").read_text()
    assert summary.startswith("## ❌ lrcheck suite `ci.toml`: FAIL")
    assert all(f"`p-{s}`" in summary for s in SCHEDULERS)
    assert "- **`p-linear`**" in summary
    assert (tmp_path / "M" / "index.html").exists() and (tmp_path / "M" / "matrix.png").exists()


def test_a_lost_shard_is_an_error_naming_its_pairs_and_saves_no_baseline(tmp_path, make_report):
    whole = suite()
    folders = write_shards(tmp_path, make_report, whole, 3)
    lost = {e.name for e in shard_of(whole, 2, 3)[0].entries}
    assert lost
    result = merge_suites(tmp_path / "M", [folders[0], folders[2]],
                          save_baseline=tmp_path / "base.json")
    assert result.exit_code == 3 and not result.complete and result.verdict == "fail"
    assert set(result.missing) == lost
    for outcome in result.outcomes:
        if outcome.entry.name in lost:
            assert outcome.status == "error"
            assert outcome.reason == "no result: missing: its shard, 2/3, was not merged"
    assert not (tmp_path / "base.json").exists()
    merge_suites(tmp_path / "M", folders, save_baseline=tmp_path / "base.json")
    assert sorted(json.loads((tmp_path / "base.json").read_text())["pairs"]) == sorted(
        e.name for e in whole.entries)


def test_a_baseline_applies_to_the_merged_result(tmp_path, make_report):
    whole = suite()
    merge_suites(tmp_path / "M0", write_shards(tmp_path, make_report, whole, 2),
                 save_baseline=tmp_path / "base.json")
    changed = write_shards(tmp_path, make_report, whole, 2, prefix="T", broken={"p-constant"})
    result = merge_suites(tmp_path / "M", changed, baseline=tmp_path / "base.json")
    regressed = {o.entry.name: [r.what for r in o.regressions] for o in result.outcomes}
    assert regressed == {"p-cosine": [], "p-linear": [], "p-wsd": [], "p-constant": ["lr"]}


def test_shards_of_different_suites_are_refused(tmp_path, make_report):
    ours = write_shards(tmp_path, make_report, suite(), 2)
    theirs = write_shards(tmp_path, make_report, suite(SCHEDULERS[:3]), 2, prefix="T")
    with pytest.raises(SpecError, match=r"^shards of different suites: .*digest"):
        merge_suites(tmp_path / "M", [ours[0], theirs[1]])
    other_split = write_shards(tmp_path, make_report, suite(), 3, prefix="U")
    with pytest.raises(SpecError, match="^shards of different suites"):
        merge_suites(tmp_path / "M", [ours[0], other_split[1]])
    assert not (tmp_path / "M").exists()  # refused before anything is written


def test_a_pair_present_twice_is_refused(tmp_path, make_report):
    folders = write_shards(tmp_path, make_report, suite(), 2)
    again = write_shards(tmp_path, make_report, suite(), 2, prefix="T")
    with pytest.raises(SpecError, match=r"^pair 'p-\w+' is present twice: in .*S1.* and in "
                                        r".*T1"):
        merge_suites(tmp_path / "M", [folders[0], folders[1], again[0]])


def test_a_folder_that_is_not_a_shard_is_refused(tmp_path, make_report):
    with pytest.raises(SpecError, match="has no suite.json"):
        read_shard(tmp_path)
    whole = suite()
    write_suite(SuiteResult(whole, [PairOutcome(e, not_run=True) for e in whole.entries]),
                tmp_path / "W")
    with pytest.raises(SpecError, match="holds a whole suite, not a shard"):
        read_shard(tmp_path / "W")


def test_a_shard_whose_pair_report_is_gone_gives_that_pair_an_error(tmp_path, make_report):
    folders = write_shards(tmp_path, make_report, suite(), 1)
    (folders[0] / "p-wsd" / "result.json").unlink()
    result = merge_suites(tmp_path / "M", folders)
    wsd = next(o for o in result.outcomes if o.entry.name == "p-wsd")
    assert wsd.status == "error" and "is missing from the shard's folder" in wsd.reason
    assert result.exit_code == 3


def test_a_pair_of_commands_is_sharded_at_a_fixed_cost_and_merged_back_as_a_diff(
        tmp_path, make_report):
    from lrcheck.result import Kind
    from lrcheck.spec import CommandPair, FilePair
    from lrcheck.suite.shard import COMMAND_COST, groups

    whole = parse_suite({"defaults": {"task": "wine"}, "pair": [
        {"name": "own", "bs": 8, "accum": 2},
        {"name": "mine", "ref_command": "python t.py --bs 32",
         "command": "python t.py --bs 16 --accum 2", "samples_per_update": 32}]}, "ci.toml")
    mine = next(g for g in groups(whole) if isinstance(g.reference, CommandPair))
    assert (mine.indices, mine.cost, mine.cores) == ((1,), COMMAND_COST, 1)
    folders = []
    for k in (1, 2):
        part, info = shard_of(whole, k, 2)
        folder, outcomes = tmp_path / f"S{k}", []
        for entry in part.entries:
            report = make_report()
            if isinstance(entry.pair, CommandPair):
                report = replace(report, pair=FilePair("x/reference", "x/candidate"),
                                 kind=Kind.DIFF)
            else:
                report = replace(report, pair=entry.pair)
            (folder / entry.name).mkdir(parents=True)
            write_text(folder / entry.name / "result.json", result_json(report))
            outcomes.append(PairOutcome(entry, report=report, seconds=1.0))
        write_json(folder / "suite.json",
                   SuiteResult(part, outcomes, seconds=2.0, shard=info).to_dict())
        folders.append(folder)
    result = merge_suites(tmp_path / "M", folders)
    merged = {o.entry.name: o for o in result.outcomes}
    assert merged["mine"].entry.pair == whole.entries[1].pair
    assert merged["mine"].report.kind == Kind.DIFF and merged["own"].report.kind == Kind.COMPARE
    assert merged["mine"].report.pair.candidate.endswith("/mine/candidate")  # its shard's
    assert result.exit_code == 0 and result.complete


def test_a_pair_read_back_keeps_how_its_effects_were_judged(tmp_path, make_report):
    from lrcheck.plan.judging import Judging
    from lrcheck.suite.merge import read_report

    report = replace(make_report(), judging=Judging.TWIN)
    write_text(tmp_path / "result.json", result_json(report))
    assert read_report(tmp_path / "result.json", report.pair).judging is Judging.TWIN
    write_text(tmp_path / "result.json", result_json(replace(report, judging=None)))
    assert read_report(tmp_path / "result.json", report.pair).judging is None
