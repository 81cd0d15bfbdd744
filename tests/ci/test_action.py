"""The GitHub Action, ``action.yml``: its structure (a composite action whose every input,
step output and command it names exists), and its shell steps run here as Actions runs them,
``bash -e`` with ``GITHUB_OUTPUT`` and ``GITHUB_STEP_SUMMARY`` files: lrcheck replaced by a stub
that records its arguments (nothing trains), the comment step against the fake API
(``fake_github.py``)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lrcheck.cli.app import app
from tests.ci.fake_github import PR, REPO
from tests.helpers import HANG_S

ROOT = Path(__file__).resolve().parents[2]
ACTION = yaml.safe_load((ROOT / "action.yml").read_text(encoding="utf-8"))
STEPS = ACTION["runs"]["steps"]
TEXT = (ROOT / "action.yml").read_text(encoding="utf-8")


def _step(name: str) -> dict:
    return next(s for s in STEPS if s["name"] == name)


def test_a_composite_action_whose_shell_steps_say_their_shell():
    assert ACTION["runs"]["using"] == "composite"
    assert {"suite", "merge", "ref-command", "command", "out", "python-version", "torch", "comment",
            "github-token", "artifact-name", "args"} <= set(ACTION["inputs"])
    for step in STEPS:
        assert ("run" in step) != ("uses" in step), step["name"]
        if "run" in step:
            assert step["shell"] == "bash", step["name"]
    assert {s["uses"] for s in STEPS if "uses" in s} == {"actions/setup-python@v5",
                                                         "actions/upload-artifact@v4"}


def test_every_input_and_step_output_it_names_exists():
    inputs = set(re.findall(r"inputs\.([\w-]+)", TEXT))
    assert inputs and inputs <= set(ACTION["inputs"]), inputs - set(ACTION["inputs"])
    ids = [s.get("id") for s in STEPS]
    for index, step in enumerate(STEPS):
        for used in re.findall(r"steps\.([\w-]+)\.outputs", yaml.safe_dump(step)):
            assert used in ids[:index], f"{step['name']} reads steps.{used}, not before it"
    for output in ACTION["outputs"].values():
        used = re.findall(r"steps\.([\w-]+)\.outputs\.([\w-]+)", output["value"])
        assert used and all(step in ids for step, _ in used)


def test_the_commands_and_modules_it_runs_exist():
    commands = {c.name for c in app.registered_commands}
    for step in STEPS:
        for command in re.findall(r"^\s*lrcheck (\w+)", step.get("run", ""), re.M):
            assert command in commands, command
        for module in re.findall(r"python -m ([\w.]+)", step.get("run", "")):
            assert module == "pip" or importlib.util.find_spec(module) is not None, module
    assert "python -m lrcheck.ci.comment" in _step("Comment on the pull request")["run"]


def test_the_exit_code_is_lrcheck_s_after_the_artifact_and_the_comment():
    names = [s["name"] for s in STEPS]
    assert names.index("Run lrcheck") < names.index("Upload the report") < names.index(
        "Comment on the pull request") < names.index("Exit with lrcheck's code") == len(names) - 1
    for name in ("Upload the report", "Comment on the pull request", "Exit with lrcheck's code"):
        assert _step(name)["if"].startswith("always()"), name
    assert _step("Exit with lrcheck's code")["env"]["CODE"] == (
        "${{ steps.lrcheck.outputs.exit-code }}")


# lrcheck, as far as the run step sees it: its arguments recorded, a summary written, an exit code.
STUB = """#!/bin/sh
printf '%s\\n' "$@" > "$STUB_ARGS"
mkdir -p lrcheck-report && echo "**Verdict: FAIL**" > "lrcheck-report/$STUB_WRITES"
exit "$STUB_EXIT"
"""


def _run_step(tmp_path: Path, name: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """The step ``name``'s script run as Actions runs a bash step, with ``env`` (the step's own
    ``env`` keys, given here) and a stub ``lrcheck`` and a ``python`` first on PATH."""
    step = _step(name)
    assert set(step.get("env", {})) <= set(env), set(step.get("env", {})) - set(env)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "lrcheck").write_text(STUB)
    (bin_dir / "lrcheck").chmod(0o755)
    if not (bin_dir / "python").exists():
        (bin_dir / "python").symlink_to(sys.executable)
    for file in ("output", "summary"):
        (tmp_path / file).touch()
    full = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": str(ROOT / "src"), "GITHUB_OUTPUT": str(tmp_path / "output"),
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), "STUB_ARGS": str(tmp_path / "args"),
            **env}
    return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
                          cwd=tmp_path, env=full, capture_output=True, text=True, timeout=HANG_S)


def _outputs(tmp_path: Path) -> dict[str, str]:
    lines = (tmp_path / "output").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines)


RUN_ENV = {"SUITE": "", "MERGE": "", "REF": "", "CAND": "", "ARGS": "", "INTERRUPT_AT": "",
           "RESUME": "", "OUT": "lrcheck-report",
           "STUB_EXIT": "1", "STUB_WRITES": "summary.md"}


@pytest.mark.slow
def test_the_run_step_runs_a_suite_keeping_its_exit_code(tmp_path):
    done = _run_step(tmp_path, "Run lrcheck", {**RUN_ENV, "SUITE": "ci.toml",
                                               "ARGS": "--jobs auto"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "args").read_text().split("\n")[:-1] == [
        "suite", "ci.toml", "--out", "lrcheck-report", "--jobs", "auto"]
    assert _outputs(tmp_path) == {"exit-code": "1", "report": "lrcheck-report",
                                  "body": "lrcheck-report/summary.md"}
    assert (tmp_path / "summary").read_text() == ""  # lrcheck suite writes its own


@pytest.mark.slow
def test_the_run_step_runs_a_pair_and_writes_its_report_to_the_step_summary(tmp_path):
    done = _run_step(tmp_path, "Run lrcheck", {
        **RUN_ENV, "REF": "python train.py --bs 32", "CAND": "python train.py --bs 16 --accum 2",
        "STUB_EXIT": "0", "STUB_WRITES": "report.md"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "args").read_text().split("\n")[:-1] == [
        "run", "--out", "lrcheck-report", "python train.py --bs 32",
        "python train.py --bs 16 --accum 2"]
    assert _outputs(tmp_path)["exit-code"] == "0"
    assert _outputs(tmp_path)["body"] == "lrcheck-report/report.md"
    assert (tmp_path / "summary").read_text() == "**Verdict: FAIL**\n"


@pytest.mark.slow
def test_the_run_step_interrupts_the_candidate_and_resumes_it_with_a_command_of_spaces(tmp_path):
    done = _run_step(tmp_path, "Run lrcheck", {
        **RUN_ENV, "REF": "python train.py", "CAND": "python train.py --ckpt c.pt",
        "INTERRUPT_AT": "12", "RESUME": "python train.py --ckpt c.pt --resume",
        "ARGS": "--strict", "STUB_EXIT": "0", "STUB_WRITES": "report.md"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "args").read_text().split("\n")[:-1] == [
        "run", "--out", "lrcheck-report", "--interrupt-at", "12", "--resume",
        "python train.py --ckpt c.pt --resume", "--strict", "python train.py",
        "python train.py --ckpt c.pt"]


@pytest.mark.slow
def test_the_run_step_merges_shards_from_a_glob(tmp_path):
    for k in (1, 2):
        (tmp_path / "shards" / f"lrcheck-shard-{k}").mkdir(parents=True)
    done = _run_step(tmp_path, "Run lrcheck", {**RUN_ENV, "MERGE": "shards/lrcheck-shard-*",
                                               "STUB_EXIT": "3"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "args").read_text().split("\n")[:-1] == [
        "suite", "merge", "lrcheck-report", "shards/lrcheck-shard-1", "shards/lrcheck-shard-2"]
    assert _outputs(tmp_path)["exit-code"] == "3"
    assert _outputs(tmp_path)["body"] == "lrcheck-report/summary.md"


@pytest.mark.slow
@pytest.mark.parametrize("given", [{}, {"SUITE": "ci.toml", "REF": "python a.py"},
                                   {"SUITE": "ci.toml", "MERGE": "shards/*"},
                                   {"REF": "python a.py"}])
def test_the_run_step_refuses_neither_or_both_as_bad_input(tmp_path, given):
    done = _run_step(tmp_path, "Run lrcheck", {**RUN_ENV, **given})
    assert done.returncode == 0, done.stderr
    assert ("::error title=lrcheck::give one of the inputs suite, merge, or ref-command and "
            "command") in done.stdout
    assert _outputs(tmp_path) == {"exit-code": "2", "report": "lrcheck-report", "body": ""}
    assert not (tmp_path / "args").exists()


@pytest.mark.slow
def test_the_comment_step_posts_then_a_refusal_only_warns(tmp_path, github):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": PR}}))
    (tmp_path / "report.md").write_text("**Verdict: PASS**\n")
    env = {"GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": REPO,
           "GITHUB_API_URL": github.url, "GITHUB_WORKFLOW": "lrcheck", "GITHUB_TOKEN": "t",
           "BODY": "report.md", "LINK": "https://github.test/artifact/1"}
    done = _run_step(tmp_path, "Comment on the pull request", env)
    assert done.returncode == 0, done.stderr
    assert "lrcheck: posted the comment on pull request #7" in done.stdout
    assert [r["method"] for r in github.requests][-1] == "POST"
    github.refuse = 403
    refused = _run_step(tmp_path, "Comment on the pull request", env)
    assert refused.returncode == 0
    assert "HTTP 403" in refused.stderr
    assert "::warning title=lrcheck::the pull request comment was not posted" in refused.stdout


@pytest.mark.slow
@pytest.mark.parametrize(("code", "expected"), [("0", 0), ("3", 3), ("", 1)])
def test_the_last_step_exits_with_lrcheck_s_code(tmp_path, code, expected):
    assert _run_step(tmp_path, "Exit with lrcheck's code", {"CODE": code}).returncode == expected


@pytest.mark.slow
def test_every_shell_step_parses(tmp_path):
    for step in STEPS:
        if "run" in step:
            checked = subprocess.run(["bash", "-n", "-c", step["run"]], capture_output=True,
                                     text=True, timeout=HANG_S)
            assert checked.returncode == 0, (step["name"], checked.stderr)


def test_the_example_workflow_merges_through_the_action_with_inputs_it_has():
    example = yaml.safe_load((ROOT / "examples" / "github-workflow.yml").read_text())
    steps = [s for s in example["jobs"]["merge"]["steps"] if s.get("uses") == "./"]
    assert len(steps) == 1 and set(steps[0]["with"]) <= set(ACTION["inputs"])
    assert steps[0]["with"]["merge"] == "shards/lrcheck-shard-*"
    assert example["permissions"]["pull-requests"] == "write"


@pytest.mark.parametrize(("wanted", "env", "version"), [
    ("auto", {"pythonLocation": "/opt/hostedtoolcache/Python/3.12.1/x64"}, ""),
    ("auto", {"VIRTUAL_ENV": "/home/runner/venv"}, ""),
    ("auto", {}, "3.11"), ("3.12", {"pythonLocation": "/opt/py"}, "3.12"), ("", {}, "")])
def test_auto_keeps_the_python_the_workflow_set_up(tmp_path, wanted, env, version):
    """The Python that holds the user's project (set up before the action) is not switched."""
    clean = {"pythonLocation": "", "VIRTUAL_ENV": "", "CONDA_PREFIX": ""}
    done = _run_step(tmp_path, "Choose Python", {**clean, "WANTED": wanted, **env})
    assert done.returncode == 0, done.stderr
    assert _outputs(tmp_path) == {"version": version}


@pytest.mark.parametrize(("args", "extra"), [
    ("--logs out --ref-logs ref", "[logs]"), ("--tag lr=LearningRate", "[logs]"),
    ("--jobs auto", "")])
def test_the_logs_extra_is_installed_where_logs_are_asked_for(tmp_path, args, extra):
    (tmp_path / "bin").mkdir()
    stub = tmp_path / "bin" / "python"
    stub.write_text('#!/bin/sh\necho "$@" >> "$STUB_ARGS"\n')
    stub.chmod(0o755)
    done = _run_step(tmp_path, "Install lrcheck", {"TORCH": "", "ARGS": args,
                                                   "GITHUB_ACTION_PATH": "/action"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "args").read_text() == f"-m pip install /action{extra}\n"
