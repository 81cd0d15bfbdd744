"""``spec.resolve``: a run as its framework trains it, a new value with a note for each value it
changed (the two that ``RunSpec`` once rewrote in place, silently), and the notes carried by the
pair into result.json and the report. Ludwig itself is not needed: a spec imports none of it."""

from __future__ import annotations

import json

import pytest

from lrcheck.environment import Environment
from lrcheck.errors import SpecError
from lrcheck.result import IncompleteResult, Report
from lrcheck.spec import CompareOptions, Note, PairSpec, RunSpec, resolve
from lrcheck.trace import RunTrace, UpdateRecord

LUDWIG_DTYPE = "--framework ludwig trains in float32: --dtype float64 changed to float32"
TAIL = "--framework {} ends each epoch itself: --tail drop changed to flush"


def test_ludwig_float64_is_resolved_to_float32_with_a_note():
    given = RunSpec(framework="ludwig", dtype="float64")
    spec, notes = resolve(given)
    assert given.dtype == "float64"  # a new value: the spec given is as it was
    assert spec.dtype == "float32" and spec.tail == "flush"
    assert [n.text for n in notes] == [LUDWIG_DTYPE, TAIL.format("ludwig")]
    assert notes[0] == Note("dtype", "--dtype", "float64", "float32",
                            "--framework ludwig trains in float32")
    assert resolve(spec) == (spec, ())  # resolved: itself, no notes


def test_ludwig_asked_for_float32_has_no_dtype_note():
    _, notes = resolve(RunSpec(framework="ludwig", dtype="float32"))
    assert [n.setting for n in notes] == ["tail"]


@pytest.mark.parametrize("framework", ["transformers", "lightning", "deepspeed"])
def test_a_framework_that_owns_the_epoch_flushes_with_a_note(framework):
    spec, notes = resolve(RunSpec(framework=framework, dtype="float32"))
    assert spec.tail == "flush" and [n.text for n in notes] == [TAIL.format(framework)]
    assert resolve(RunSpec(framework=framework, dtype="float32", tail="flush"))[1] == ()


@pytest.mark.parametrize("framework", ["plain", "accelerate", "fsdp"])
def test_lrchecks_tail_and_dtype_stand_elsewhere(framework):
    spec = RunSpec(framework=framework, tail="carry")
    assert resolve(spec) == (spec, ())


def test_carry_is_still_refused_where_it_is_given_not_resolved():
    with pytest.raises(SpecError, match="ends each epoch itself: --tail carry does not apply"):
        RunSpec(framework="lightning", tail="carry")


def test_the_pair_keeps_the_notes_and_the_tolerances_of_the_type_it_trains_in():
    pair = CompareOptions.of(caller="test", framework="ludwig", bs=16, accum=2,
                             ref_bs=32).pair()
    assert pair.candidate.dtype == pair.reference.dtype == "float32"
    assert pair.tolerances.params == 1e-4  # float32's
    assert [n.text for n in pair.notes] == [LUDWIG_DTYPE, TAIL.format("ludwig")]
    reference = PairSpec.build(RunSpec(dtype="float32"), ref_framework="lightning")
    assert [n.text for n in reference.notes] == [
        "--ref-framework lightning ends each epoch itself: --tail drop changed to flush"]
    assert PairSpec.build(RunSpec()).notes == ()


def test_a_pair_of_runs_not_resolved_is_refused():
    spec = RunSpec(framework="transformers", dtype="float32")
    with pytest.raises(SpecError, match="candidate's RunSpec is not resolved"):
        PairSpec(resolve(spec)[0].replace(bs=32, accum=1), spec)


def _traces(pair: PairSpec) -> tuple[RunTrace, RunTrace]:
    updates = [UpdateRecord(k, (0.1,), 1.0, 32 * (k + 1), k, 0) for k in range(2)]
    return (RunTrace.partial(pair.reference, updates, 2, ""),
            RunTrace.partial(pair.candidate, updates, 2, ""))


def test_result_json_and_the_report_carry_the_notes():
    from lrcheck.reports.html_report import _verdict
    from lrcheck.reports.kinds import KINDS, render
    from lrcheck.testing import render_text

    pair = CompareOptions.of(caller="test", framework="ludwig", bs=16, accum=2,
                             ref_bs=32).pair()
    environment = Environment(lrcheck="test", device="cpu", world_size=1)
    report = Report(pair, *_traces(pair), [], environment)
    data = json.loads(json.dumps(report.to_dict()))
    assert [n["note"] for n in data["notes"]] == [LUDWIG_DTYPE, TAIL.format("ludwig")]
    assert data["notes"][0] == {"setting": "dtype", "flag": "--dtype", "given": "float64",
                                "used": "float32", "why": "--framework ludwig trains in float32",
                                "note": LUDWIG_DTYPE}
    assert [Note.from_dict(n) for n in data["notes"]] == list(pair.notes)
    incomplete = IncompleteResult(pair, *_traces(pair), environment, "stopped")
    assert incomplete.to_dict()["notes"] == data["notes"]
    kind = KINDS[report.kind]
    assert f"- note: {LUDWIG_DTYPE}" in kind.settings(report, "digits")
    assert LUDWIG_DTYPE in render_text(report, width=200) and render(report) is not None
    assert f"Note: {LUDWIG_DTYPE}" in _verdict(report, "heading", "title")
    plain = PairSpec.build(RunSpec())
    assert Report(plain, *_traces(plain), [], environment).to_dict()["notes"] == []


def test_a_shards_plan_keeps_the_notes_for_the_merge():
    """``lrcheck suite --shard``: a merge rebuilds each pair from the shard's plan, notes and
    all."""
    from lrcheck.suite.merge import _entry
    from lrcheck.suite.shard import shard_of
    from lrcheck.suite.spec import parse_suite

    suite = parse_suite({"pair": [{"framework": "lightning", "dtype": "float32"}, {}]},
                        "s.toml")
    _, info = shard_of(suite, 1, 1)
    plans = json.loads(json.dumps(info.to_dict()))["plan"]
    rebuilt = [_entry(plan).pair for plan in plans]
    assert [p.notes for p in rebuilt] == [e.pair.notes for e in suite.entries]
    assert [n.setting for n in rebuilt[0].notes] == ["tail"] and rebuilt[1].notes == ()
