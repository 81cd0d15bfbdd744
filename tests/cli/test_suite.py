"""``lrcheck suite`` and ``lrcheck trace`` end to end through the command line (small runs)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

import lrcheck
from lrcheck import comparison
from lrcheck.cli import app
from lrcheck.runner import pair as pair_module
from tests import schema_files
from tests.helpers import HANG_S, default_sigint, hanging_suite, wait_for

SUITE = """
    [defaults]
    task = "wine"
    epochs = 2

    [[pair]]
    name = "accum"
    accum = 2
    bs = 8
    scheduler = "{scheduler}"

    # Shares its reference (bs 16, cosine) with "accum" while that one runs cosine.
    [[pair]]
    name = "bug"
    accum = 2
    bs = 8
    policy = "per-micro-batch"
    expect = "{expect}"
"""


def invoke(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    print(result.output)  # shown when a test fails
    return result


def write(tmp_path, scheduler="cosine", expect="fail"):
    path = tmp_path / "ci.toml"
    path.write_text(textwrap.dedent(SUITE.format(scheduler=scheduler, expect=expect)))
    return path


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The suite run once, with a baseline saved, counting the runs trained."""
    tmp = tmp_path_factory.mktemp("suite")
    trained = []
    original = pair_module._run_here
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pair_module, "_run_here",
                   lambda spec, step, *args: trained.append(step.role)
                   or original(spec, step, *args))
        result = invoke("suite", write(tmp), "--out", tmp / "R",
                        "--save-baseline", tmp / "baseline.json",
                        env={"GITHUB_STEP_SUMMARY": str(tmp / "step-summary.md")})
    return tmp, result, trained


@pytest.mark.slow
def test_suite_writes_the_report_and_exits_0_when_every_expectation_is_met(first_run):
    tmp, result, trained = first_run
    assert result.exit_code == 0
    assert "suite: PASS — 2 of 2 pairs as expected" in result.output
    assert trained == ["reference", "candidate", "candidate"]  # the reference trained once
    out = tmp / "R"
    assert {"summary.md", "junit.xml", "suite.json", "matrix.png", "index.html", "accum",
            "bug"} <= {p.name for p in out.iterdir()}
    # --plots failed, the default: PNGs only for the pair that fails; every page complete.
    assert {p.name for p in (out / "bug").iterdir()} == {
        "result.json", "report.md", "report.html", "lr.png", "loss.png", "metrics.png"}
    assert {p.name for p in (out / "accum").iterdir()} == {
        "result.json", "report.md", "report.html"}
    for name, static in (("accum", False), ("bug", True)):
        page = (out / name / "report.html").read_text()
        assert all(f'id="plot-{plot}"' in page for plot in ("lr", "loss", "metrics"))
        assert ('<img class="static"' in page) is static
        assert ("The test split after every epoch." in page) is not static
        data = json.loads(re.search(r'id="lrcheck-data">(.*?)</script>', page).group(1))
        # The LR's and the loss's every update, which uPlot draws in the page.
        assert [(p["id"], p["n"] > 0) for p in data["plots"]] == [("lr", True), ("loss", True)]
    assert "[report](accum/report.html) |" in (out / "summary.md").read_text()
    data = json.loads((out / "suite.json").read_text())
    assert schema_files.problems(out / "suite.json") == []  # as a real suite wrote it
    assert [(p["name"], p["verdict"], p["status"], p["shared_reference"])
            for p in data["pairs"]] == [("accum", "pass", "ok", False),
                                        ("bug", "fail", "ok", True)]
    ET.parse(out / "junit.xml")
    assert (tmp / "step-summary.md").read_text() == (out / "summary.md").read_text()
    assert json.loads((tmp / "baseline.json").read_text())["kind"] == "lrcheck-baseline"


@pytest.mark.slow
def test_flipping_an_expectation_exits_1_and_says_which_pair_and_why(first_run, tmp_path):
    result = invoke("suite", write(tmp_path, expect="pass"), "--out", tmp_path / "R")
    assert result.exit_code == 1
    assert "suite: FAIL — 1 of 2 pairs as expected" in result.output
    assert "UNEXPECTED bug: expected pass but failed (lr" in result.output


@pytest.mark.slow
def test_a_changed_scheduler_is_a_regression_against_the_baseline(first_run, tmp_path):
    base, _, _ = first_run
    result = invoke("suite", write(tmp_path, scheduler="linear"), "--out", tmp_path / "R",
                    "--baseline", base / "baseline.json")
    assert result.exit_code == 1
    assert "REGRESSION accum: regression against the baseline: the candidate's and the " \
           "reference's LR traces changed" in " ".join(result.output.split())
    assert "scheduler 'cosine' → 'linear'" in (tmp_path / "R" / "summary.md").read_text()
    junit = ET.parse(tmp_path / "R" / "junit.xml").getroot()
    failure = junit.find("testsuite[@name='accum']/testcase[@name='baseline']/failure")
    assert failure is not None and "LR traces changed" in failure.text


def untrained(pair, **kwargs):
    raise AssertionError(f"{pair.name} trained, but bad input must be refused before training")


@pytest.mark.parametrize("args, says", [
    (["--baseline", "missing.json"], "does not exist"),
    (["--out", ""], "--out '' names no folder"),
    (["--out", "ci.toml"], "is an existing file"),
    (["--out", "R"], "ci.toml: [[pair]] #1: the report folder of pair 'accum', 'R/accum', is an "
                     "existing file; remove it, or give another --out or 'name'"),
    (["--save-baseline", "R"], "--save-baseline 'R' is a folder; give a file name, such as "
                               "'R/baseline.json'"),
    (["--save-baseline", "ci.toml/baseline.json"],
     "--save-baseline 'ci.toml/baseline.json': 'ci.toml' is a file, not a folder"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_trains(tmp_path, monkeypatch, args,
                                                                 says):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(comparison, "compare_pair", untrained)
    write(tmp_path)
    (tmp_path / "R").mkdir()
    (tmp_path / "R" / "accum").write_text("a file where the pair's report folder goes")
    result = CliRunner().invoke(app, ["suite", "ci.toml", *args])
    print(result.output)
    assert result.exit_code == 2
    assert result.stderr.startswith("lrcheck: error: ") and result.stderr.count("\n") == 1
    assert says in result.stderr and result.stdout == ""


@pytest.mark.slow
def test_an_unwritable_step_summary_is_a_warning_and_the_verdict_stands(tmp_path, monkeypatch,
                                                                        make_report):
    monkeypatch.setattr(comparison, "compare_pair", lambda pair, **kwargs: make_report())
    summary = tmp_path / "step-summary"
    summary.mkdir()  # a folder: appending to it fails
    result = CliRunner().invoke(app, ["suite", str(write(tmp_path, expect="pass")), "--out",
                                      str(tmp_path / "R")],
                                env={"GITHUB_STEP_SUMMARY": str(summary)})
    print(result.output)
    assert result.exit_code == 0 and result.exception is None
    assert "suite: PASS — 2 of 2 pairs as expected" in result.stdout
    warning = [line for line in result.stderr.splitlines() if "warning" in line]
    assert warning == [f"lrcheck: warning: $GITHUB_STEP_SUMMARY: cannot append to "
                       f"{str(summary)!r}: Is a directory"]
    assert json.loads((tmp_path / "R" / "suite.json").read_text())["verdict"] == "pass"


def test_a_suite_of_one_pair_says_1_of_1_pair(tmp_path, monkeypatch, make_report):
    monkeypatch.setattr(comparison, "compare_pair", lambda pair, **kwargs: make_report())
    path = tmp_path / "one.toml"
    path.write_text('[[pair]]\nname = "only"\ntask = "wine"\n')
    result = invoke("suite", path, "--out", tmp_path / "R")
    assert result.exit_code == 0
    assert "suite: PASS — 1 of 1 pair as expected in " in result.stdout
    assert ("1 of 1 pair as expected (0 unexpected, 0 regressions, 0 errors)"
            in (tmp_path / "R" / "summary.md").read_text())


AMP_SUITE = """
    [defaults]
    task = "wine"
    epochs = 1
    dtype = "float32"
    amp = "fp16"
    inject_overflow = [1, 3]

    [[pair]]
    name = "skips"
    accum = 2
    bs = 8

    [[pair]]
    name = "bug"
    accum = 2
    bs = 8
    policy = "per-micro-batch"
    expect = "fail"

    [[pair]]
    name = "in-pair"
    task = "wine"
    amp = "off"
    inject_overflow = []
    dtype = "float64"

    [[pair]]
    name = "in-pair-fp16"
    amp = "fp16"
    dtype = "float32"
    inject_overflow = 2
"""


@pytest.mark.slow
def test_amp_fp16_and_inject_overflow_work_in_defaults_and_pairs(tmp_path):
    path = tmp_path / "amp.toml"
    path.write_text(textwrap.dedent(AMP_SUITE))
    result = invoke("suite", path, "--out", tmp_path / "R", "-q")
    assert result.exit_code == 0
    pairs = json.loads((tmp_path / "R" / "suite.json").read_text())["pairs"]
    skipped = {p["name"]: p["pair"]["candidate"]["inject_overflow"] for p in pairs}
    assert skipped == {"skips": [1, 3], "bug": [1, 3], "in-pair": [], "in-pair-fp16": [2]}
    checks = {p["name"]: {c["name"]: c["status"] for c in p["checks"]} for p in pairs}
    assert checks["skips"]["skipped-steps"] == "pass"
    assert checks["bug"]["skipped-steps"] == "fail"
    assert "skipped-steps" not in checks["in-pair"]


@pytest.mark.slow
def test_sigint_stops_the_suite_exits_130_and_writes_what_finished(tmp_path):
    path, mark = hanging_suite(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(Path(lrcheck.__file__).parents[1]),
           "OMP_NUM_THREADS": "1"}
    # Files, not pipes: nobody reads a pipe while the test waits, and a full one would stall it.
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "lrcheck", "suite", str(path), "--out",
                                 "R"], cwd=tmp_path, env=env, stdout=stdout, stderr=stderr,
                                preexec_fn=default_sigint)
    try:
        wait_for(mark.exists, HANG_S, "pair b to start training", proc=proc)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=HANG_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    out, err = (tmp_path / "stdout").read_text(), (tmp_path / "stderr").read_text()
    print(out, err)
    assert proc.returncode == 130
    R = tmp_path / "R"
    assert json.loads((R / "a" / "result.json").read_text())["verdict"] == "pass"
    partial = json.loads((R / "b" / "result.json").read_text())
    assert partial["verdict"] == "incomplete"
    # The third update is recorded once its scheduler.step() returns, which it did not.
    assert len(partial["runs"]["reference"]["updates"]) == 2
    assert not (R / "c").exists()
    data = json.loads((R / "suite.json").read_text())
    assert (data["verdict"], data["exit_code"]) == ("incomplete", 130)
    assert [p["status"] for p in data["pairs"]] == ["ok", "incomplete", "not_run"]
    skipped = ET.parse(R / "junit.xml").getroot().find("testsuite[@name='c']/testcase/skipped")
    assert skipped.get("message") == "not run: interrupted"
    assert "| `c` | pass | ➖ not run | ➖ not run |" in (R / "summary.md").read_text()
    assert (R / "matrix.png").exists()
    assert "[3/3] c: not run (interrupted)" in out
    assert "suite: INCOMPLETE — interrupted (Ctrl-C) during pair 2 of 3 ('b'): 1 of 3 pairs " \
           "as expected, 1 not run, in" in out
    assert "  NOT RUN c: not run: interrupted" in out
    assert "Traceback" not in err


@pytest.mark.slow
def test_trace_passes_fails_and_writes_the_schedule_report(tmp_path):
    args = ["trace", "--bs", "4", "--accum", "8", "--nproc", "64", "--ref-bs", "2048",
            "--samples", "2000000"]
    ok = invoke(*args, "--out", tmp_path / "ok")
    assert ok.exit_code == 0 and "verdict: PASS" in ok.output
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == ["lr.png", "report.html",
                                                                  "report.md", "result.json"]
    data = json.loads((tmp_path / "ok" / "result.json").read_text())
    assert data["mode"] == "trace" and data["runs"]["candidate"]["spec"]["world"] == 64
    bad = invoke(*args, "--policy", "per-micro-batch", "--out", tmp_path / "bad", "-q")
    assert bad.exit_code == 1 and "failed: lr" in bad.output
    wrong = invoke(*args[:-4], "--ref-bs", "1000", "--samples", "2000000")
    assert wrong.exit_code == 2 and "set --ref-bs 2048" in wrong.output


def test_a_missing_scheduler_factory_exits_2_naming_the_suite_and_the_pair(tmp_path):
    path = write(tmp_path, scheduler="missing_schedule.py:make")
    result = invoke("suite", path, "--out", tmp_path / "R")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0] == (f"lrcheck: error: {path}: [[pair]] #1 ('accum'), key 'scheduler': "
                        "'missing_schedule.py:make': no file 'missing_schedule.py'")


@pytest.mark.slow
def test_a_suite_of_a_users_own_commands_reports_each_pair_and_a_bug_fails_it(tmp_path):
    script = f"{sys.executable} {Path(__file__).parents[1] / 'fixtures' / 'user_train.py'}"
    path = tmp_path / "mine.toml"
    path.write_text(textwrap.dedent(f"""
        [defaults]
        task = "wine"  # lrcheck's own run keys: a pair of commands takes none of them

        [[pair]]
        name = "good"
        ref_command = "{script} --bs 32 --epochs 1"
        command = "{script} --bs 16 --accum 2 --epochs 1"
        samples_per_update = 32

        [[pair]]
        name = "bug"
        ref_command = "{script} --bs 32 --epochs 1"
        command = "{script} --bs 16 --accum 2 --epochs 1 --bug per-micro-batch"
    """))
    out = tmp_path / "R"
    result = invoke("suite", path, "--out", out)
    assert result.exit_code == 1
    assert "UNEXPECTED bug: expected pass but failed (lr" in result.output
    good = json.loads((out / "good" / "result.json").read_text())
    assert (good["verdict"], good["mode"]) == ("pass", "diff")
    assert {"reference", "candidate", "report.html"} <= {p.name for p in (out / "good").iterdir()}
    bug = json.loads((out / "bug" / "result.json").read_text())
    assert bug["verdict"] == "fail"
    assert "2 steps per update against 1" in next(
        c for c in bug["checks"] if c["name"] == "lr")["detail"]
    cases = {s.get("name"): s for s in ET.parse(out / "junit.xml").getroot()}
    assert cases["good"].find("properties/property[@name='candidate']").get("value").endswith(
        "--bs 16 --accum 2 --epochs 1")
    assert cases["good"].find(".//failure") is None
    assert cases["bug"].find("testcase[@name='lr']/failure") is not None
    summary = (out / "summary.md").read_text()
    rows = {line.split(" | ")[0]: line for line in summary.splitlines() if line.startswith("| `")}
    assert "| ✅ pass | ✅ ok |" in rows["| `good`"] and "| ❌ fail | ❌ unexpected |" in rows[
        "| `bug`"]
    assert "[metrics]" not in rows["| `good`"]  # a diff draws no metrics plot
    assert re.findall(r"\]\(good/([^)]+)\)", rows["| `good`"]) == ["report.html"]  # it passed
    plots = re.findall(r"\]\(bug/([^)]+)\.png\)", rows["| `bug`"])
    # A command pair records no loss: no loss plot (the report says why), only the LR's.
    assert plots == ["lr"] and (out / "bug" / "lr.png").exists()
    plan = json.loads((out / "suite.json").read_text())
    assert plan["pairs"][0]["pair"]["command"].endswith("--bs 16 --accum 2 --epochs 1")
