"""The JSON Schemas of result.json, suite.json and run.json (``lrcheck.schemas``): the files in
the repository and the package are what the code generates, their words are the code's enums,
the files lrcheck writes validate, and a file with an unknown word, a missing key or a key no
schema lists does not. tests/conftest.py validates every such file the other tests write."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

import lrcheck
from lrcheck import schemas
from lrcheck.checks.status import Status
from lrcheck.environment import Environment
from lrcheck.plan.judging import Judging
from lrcheck.reports.files import result_json
from lrcheck.result import IncompleteResult, Kind, Verdict
from lrcheck.suite.outcome import PairOutcome, PairStatus, SuiteResult
from lrcheck.suite.spec import Suite, SuiteEntry
from lrcheck.trace import RunTrace
from tests import schema_files
from tests.schema_files import errors

ROOT = Path(__file__).resolve().parents[1]




def test_the_schema_files_are_what_the_code_generates():
    stale = schemas.stale(ROOT)
    assert not stale, f"stale schema files (run python -m lrcheck.schemas --write): {stale}"
    for name in schemas.NAMES:
        repo = (ROOT / "schemas" / schemas.file_name(name)).read_text(encoding="utf-8")
        assert json.loads(repo) == schemas.load(name)  # the package ships the same file


def test_each_schema_is_draft_2020_12_and_an_unknown_name_is_refused():
    for name in schemas.NAMES:
        schema = schemas.load(name)
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema_version"] == {"const": 1}
    with pytest.raises(ValueError, match="no schema 'report'; choose one of: result, suite"):
        schemas.load("report")


def test_the_words_are_the_codes_enums():
    result, suite = schemas.load("result"), schemas.load("suite")
    defs = result["$defs"]
    assert result["properties"]["verdict"]["enum"] == [v.value for v in Verdict]
    assert result["properties"]["mode"]["enum"] == [k.value for k in Kind]
    assert result["properties"]["judging"]["enum"] == [j.value for j in Judging]
    assert defs["check"]["properties"]["status"]["enum"] == [s.value for s in Status]
    assert (suite["$defs"]["suite_pair"]["properties"]["status"]["enum"]
            == [s.value for s in PairStatus])
    spec = defs["run_spec"]["properties"]
    assert set(spec) == set(lrcheck.RunSpec().to_dict())
    assert "digits" in spec["task"]["enum"] and "float32" in spec["dtype"]["enum"]


def _trace_report():
    return lrcheck.trace_schedule(samples=400, bs=8, accum=2, epochs=2)


def _diff_report(tmp_path):
    for name, shift in (("ref", 0.0), ("cand", 0.01)):
        lines = [{"step": k, "samples_seen": 16 * (k + 1), "lr": [0.1 / (k + 1) + shift * k],
                  "loss": 1.0 / (k + 1)} for k in range(4)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return lrcheck.diff(tmp_path / "ref.jsonl", tmp_path / "cand.jsonl")


def test_a_compare_a_trace_a_diff_and_an_interrupted_result_json_validate(make_report,
                                                                          tmp_path):
    compare, trace, diff = make_report(lr_shift=0.01), _trace_report(), _diff_report(tmp_path)
    assert (compare.kind, trace.kind, diff.kind) == (Kind.COMPARE, Kind.TRACE, Kind.DIFF)
    assert not diff.ok and diff.check("lr").first_divergence == 1
    partial = RunTrace.partial(compare.pair.candidate, list(compare.candidate.updates[:2]), 5,
                               "interrupted after 2 of 5 updates")
    incomplete = IncompleteResult(compare.pair, compare.reference, partial, None, "Ctrl-C",
                                  Judging.LOCKSTEP)
    for report in (compare, trace, diff, incomplete):
        data = json.loads(result_json(report))
        assert errors("result", data) == [], data["verdict"]
    assert json.loads(result_json(incomplete))["mode"] == "compare"


@pytest.fixture
def compared(make_report) -> dict:
    return json.loads(result_json(make_report(lr_shift=0.01)))


@pytest.mark.parametrize(("place", "value", "error"), [
    (("verdict",), "passed", "$.verdict: 'passed' is not one of ['pass', 'fail', 'incomplete']"),
    (("checks", 0, "status"), "ok", "$.checks[0].status: 'ok' is not one of ['pass', 'fail', "),
    (("mode",), "train", "$.mode: 'train' is not one of ['compare', 'trace', 'diff']"),
    (("judging",), "exact", "$.judging: 'exact' is not one of ['lockstep', 'twin', "),
    (("schema_version",), 2, "$.schema_version: 1 was expected"),
    (("pair", "candidate", "dtype"), "float8", "'float8' is not one of"),
])
def test_an_unknown_word_does_not_validate(compared, place, value, error):
    compared.setdefault("judging", "lockstep")
    assert errors("result", compared) == []
    broken = copy.deepcopy(compared)
    *above, last = place
    target = broken
    for key in above:
        target = target[key]
    target[last] = value
    found = errors("result", broken)
    assert any(error in e for e in found), found


@pytest.mark.parametrize(("place", "key"), [
    ((), "runs"), ((), "verdict"), (("runs", "candidate", "updates", 0), "lr"),
    (("environment",), "device"), (("checks", 0), "first_divergence"),
    (("pair", "reference"), "bs"),
])
def test_a_missing_required_key_does_not_validate(compared, place, key):
    target = compared
    for step in place:
        target = target[step]
    del target[key]
    found = errors("result", compared)
    assert any(f"'{key}' is a required property" in e for e in found), found


def test_a_key_beside_the_others_is_a_change_of_the_schema(compared):
    """A key no schema lists fails until it is added to the generator (docs/contributing.md,
    "Schemas"); what only some files have is optional, and the rules between keys hold."""
    for where in (compared, compared["checks"][0], compared["runs"]["reference"],
                  compared["environment"]):
        where["surprise"] = 1
        assert any("'surprise' was unexpected" in e for e in errors("result", compared))
        del where["surprise"]
    compared["environment"]["transformers"] = "5.24.0"  # a framework's version: listed
    compared["runs"]["candidate"]["wall_seconds"] = 1.5  # optional
    assert errors("result", compared) == []
    stopped = {**compared, "verdict": "incomplete"}
    assert any("'incomplete' is a required property" in e for e in errors("result", stopped))
    assert errors("result", {**compared, "mode": "diff"})  # a diff's pair is two paths
    assert errors("result", {k: v for k, v in compared.items() if k != "notes"})


def test_suite_json_of_its_outcomes_validates(make_report):
    good, bad = make_report(), make_report(lr_shift=0.01)
    outcomes = [PairOutcome(SuiteEntry("good", good.pair, "pass", "[[pair]] #1"), report=good),
                PairOutcome(SuiteEntry("bad", bad.pair, "fail", "[[pair]] #2"), report=bad,
                            baseline="new"),
                PairOutcome(SuiteEntry("crash", good.pair, "pass", "[[pair]] #3"),
                            error="the candidate run crashed: boom", error_code=3)]
    result = SuiteResult(Suite("ci.toml", tuple(o.entry for o in outcomes)), outcomes,
                         environment=Environment(lrcheck="test", device="cpu"))
    data = json.loads(json.dumps(result.to_dict()))
    assert errors("suite", data) == []
    data["pairs"][2]["status"] = "crashed"
    assert errors("suite", data) == [
        "$.pairs[2].status: 'crashed' is not one of "
        "['ok', 'unexpected', 'regression', 'error', 'incomplete', 'not_run']"]


def test_run_json_as_a_test_writes_it_validates_and_a_broken_one_does_not():
    assert errors("run", schema_files.run_json()) == []
    broken = schema_files.run_json(processes=[schema_files.process_json(optimizers=[{}])])
    assert any("'index' is a required property" in e for e in errors("run", broken))
    assert errors("run", schema_files.run_json(
        processes=[{"file": "rank0.json", "unreadable": True}])) == []


def test_the_conftest_check_names_the_file_and_its_error(tmp_path):
    bad = tmp_path / "a" / "result.json"
    bad.parent.mkdir()
    bad.write_text(json.dumps({"schema_version": 1, "verdict": "maybe"}))
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "suite.json").write_text("{not json")
    (tmp_path / "other.json").write_text("{}")  # no schema: not looked at
    files = schema_files.files_under([tmp_path])
    assert [p.relative_to(tmp_path).as_posix() for p in files] == ["a/result.json",
                                                                   "b/suite.json"]
    text = schema_files.report(files)
    assert f"{bad} does not match lrcheck/schemas/result.schema.json" in text
    assert "at $.verdict: 'maybe' is not one of" in text and "suite.json" in text
    assert "not JSON" in text
    assert schema_files.files_under([tmp_path], skip=[tmp_path / "a"]) == files[1:]
    bad.unlink()
    (tmp_path / "b" / "suite.json").unlink()  # this test's own folder is checked after it


def test_a_fields_type_becomes_its_schema_and_an_unknown_one_is_named():
    from lrcheck.schemas.build import field_schema
    from lrcheck.spec import Dtype

    assert field_schema(int | None, {}) == {"type": ["integer", "null"]}
    assert field_schema(tuple[float, ...], {}) == {"type": "array", "items": {"type": "number"}}
    assert field_schema(dict[str, bool], {}) == {"type": "object",
                                                 "additionalProperties": {"type": "boolean"}}
    # An enum that may be null lets null through its type too (jsonschema checks both).
    assert field_schema(Dtype | None, {}) == {"type": ["string", "null"],
                                              "enum": [d.value for d in Dtype] + [None]}
    assert field_schema(Environment, {Environment: "environment"}) == {
        "$ref": "#/$defs/environment"}
    with pytest.raises(TypeError, match="no schema for the type <class 'complex'>"):
        field_schema(complex, {})
    with pytest.raises(TypeError, match="give the field an override"):
        field_schema(int | str | None, {})
