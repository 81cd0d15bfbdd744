"""``lrcheck diff`` on Recorder files: written by a plain PyTorch loop (the central test), by hand
for alignment and bad input, through the library and through typer's CliRunner."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import lrcheck
from lrcheck.cli import app
from lrcheck.errors import SpecError
from tests.helpers import HANG_S

SAMPLES, FEATURES, EPOCHS = 256, 8, 2
runner = CliRunner()


def invoke(*args: str):
    result = runner.invoke(app, [str(a) for a in args])
    print("exit", result.exit_code, "\nstdout:\n", result.stdout, "\nstderr:\n", result.stderr)
    return result


def plain_loop(path: Path, bs: int, accum: int, *, per_micro_batch: bool = False) -> None:
    """A hand-written loop as users write it: a linear model, SGD, a LinearLR warmup over the
    run's optimizer updates, and ``scheduler.step()`` after each update — or, the bug, after
    each micro-batch."""
    data = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=data)
    y = x @ torch.randn(FEATURES, 1, generator=data) + 0.1 * torch.randn(SAMPLES, 1, generator=data)
    torch.manual_seed(0)
    model = torch.nn.Linear(FEATURES, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    updates = SAMPLES // (bs * accum) * EPOCHS
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, end_factor=1.0,
                                                  total_iters=updates)
    with lrcheck.Recorder(path) as recorder, warnings.catch_warnings():
        # The bug itself steps the schedule before the first optimizer.step(); torch warns.
        warnings.simplefilter("ignore", UserWarning)
        for epoch in range(EPOCHS):
            order = torch.randperm(SAMPLES, generator=torch.Generator().manual_seed(epoch))
            loss_sum = 0.0
            for i in range(SAMPLES // bs):
                batch = order[i * bs:(i + 1) * bs]
                loss = torch.nn.functional.mse_loss(model(x[batch]), y[batch]) / accum
                loss.backward()
                loss_sum += loss.item()
                if (i + 1) % accum == 0:
                    recorder.record(optimizer, samples=bs * accum, loss=loss_sum)
                    optimizer.step()
                    optimizer.zero_grad()
                    loss_sum = 0.0
                    if not per_micro_batch:
                        scheduler.step()
                if per_micro_batch:
                    scheduler.step()


@pytest.fixture(scope="module")
def loop_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("loops")
    files = {"ref": folder / "bs32.jsonl", "accum": folder / "bs16x2.jsonl",
             "micro": folder / "bs16x2-per-micro-batch.jsonl"}
    plain_loop(files["ref"], 32, 1)
    plain_loop(files["accum"], 16, 2)
    plain_loop(files["micro"], 16, 2, per_micro_batch=True)
    return files


def test_plain_loop_with_accumulation_passes(loop_files):
    report = lrcheck.diff(loop_files["ref"], loop_files["accum"])
    statuses = {c.name: c.status for c in report.checks}
    print(statuses, [c.detail for c in report.checks])
    assert report.ok and report.kind == "diff"
    assert statuses == {"updates": "pass", "data": "skip", "weights": "skip", "lr": "pass",
                        "params": "skip", "loss": "pass", "metrics": "skip", "evidence": "pass"}
    assert len(report.reference.updates) == SAMPLES // 32 * EPOCHS
    # float32 in both loops: the losses differ in their last bits only.
    assert report.check("loss").max_rel_diff < 1e-5


def test_plain_loop_stepping_per_micro_batch_fails_at_the_first_update(loop_files):
    report = lrcheck.diff(loop_files["ref"], loop_files["micro"])
    lr = report.check("lr")
    print(lr)
    assert not report.ok and report.exit_code == 1
    assert report.check("updates").status == "pass"
    # The bug steps the schedule once before update 0's optimizer.step(): update 0 already uses
    # the LR of schedule step 1. LinearLR from 0.1·lr to lr over 16 steps.
    expected = 0.1 * (0.1 + 0.9 * 1 / 16)
    assert lr.status == "fail" and lr.first_divergence == 0
    assert "first differs at update 0: reference 0.01, candidate " in lr.detail
    assert float(lr.detail.split("candidate ")[1].split(";")[0]) == pytest.approx(expected,
                                                                                  rel=1e-9)
    assert "too fast" in lr.detail


def write(path: Path, rows: list[tuple[int, float, float | None]]) -> Path:
    """A Recorder file by hand: (samples_seen, lr, loss) per update."""
    path.write_text("".join(json.dumps({"step": k, "samples_seen": s, "lr": [lr], "loss": loss})
                            + "\n" for k, (s, lr, loss) in enumerate(rows)))
    return path


def schedule(samples: int) -> float:
    return 0.1 * (1 - samples / 1000)


def test_updates_are_aligned_by_samples_seen_not_by_position(tmp_path):
    rows = [(32 * (k + 1), schedule(32 * (k + 1)), 1.0 / (k + 1)) for k in range(10)]
    ref = write(tmp_path / "ref.jsonl", rows)
    # The candidate lost the line of its update 2 (samples 96): by position every later update
    # would differ; by samples seen the LR and the loss still agree.
    cand = write(tmp_path / "cand.jsonl", rows[:2] + rows[3:])
    report = lrcheck.diff(ref, cand)
    updates = report.check("updates")
    print(updates)
    assert updates.status == "fail" and updates.first_divergence == 2
    assert "reference update 2 (samples_seen 96) has no candidate update" in updates.detail
    assert report.check("lr").status == "pass" and report.check("loss").status == "pass"
    assert "9 updates" in report.check("loss").detail


def test_a_coarser_candidate_is_compared_where_both_recorded(tmp_path):
    """Effective batch 64 against 32: the candidate's updates meet every other reference
    update, and the LR is compared there (named by the reference's update)."""
    ref = write(tmp_path / "ref.jsonl", [(32 * (k + 1), 0.1, None) for k in range(8)])
    cand = write(tmp_path / "cand.jsonl", [(64 * (k + 1), 0.1 if k < 2 else 0.05, None)
                                           for k in range(4)])
    report = lrcheck.diff(ref, cand)
    print(report.checks)
    assert report.check("updates").first_divergence == 0
    lr = report.check("lr")
    assert lr.status == "fail" and lr.first_divergence == 5  # samples_seen 192
    assert report.check("loss").status == "skip" and "not recorded" in report.check("loss").detail


def test_bad_files_are_spec_errors_naming_file_and_line(tmp_path):
    good = write(tmp_path / "good.jsonl", [(32, 0.1, 1.0), (64, 0.1, 1.0)])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + '{"step": 2, "samples_seen": 96, "lr": [0.1]\n')
    with pytest.raises(SpecError, match=f"{bad}:3: not JSON"):
        lrcheck.diff(good, bad)
    result = invoke("diff", good, bad, "--out", tmp_path / "r")
    assert result.exit_code == 2 and f"{bad}:3" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    missing = invoke("diff", good, tmp_path / "missing.jsonl", "--out", tmp_path / "r")
    assert missing.exit_code == 2 and "missing.jsonl" in missing.stderr


def test_cli_prints_the_table_and_writes_the_report(loop_files, tmp_path):
    result = invoke("diff", loop_files["ref"], loop_files["micro"], "--out", tmp_path / "r")
    assert result.exit_code == 1
    for text in ("lrcheck diff", "updates", "lr", "FAIL", "update 0", "recorded runs",
                 "verdict: FAIL"):
        assert text in result.stdout
    assert sorted(p.name for p in (tmp_path / "r").iterdir()) == [
        "loss.png", "lr.png", "report.html", "report.md", "result.json"]
    ok = invoke("diff", loop_files["ref"], loop_files["accum"], "--quiet", "--out",
                tmp_path / "ok")
    assert ok.exit_code == 0 and ok.stdout.strip() == "verdict: PASS"


def test_cli_json_is_result_json_with_the_files_as_specs(loop_files, tmp_path):
    result = invoke("diff", loop_files["ref"], loop_files["micro"], "--json", "--tol-lr", "0",
                    "--out", tmp_path / "r")
    data = json.loads(result.stdout)
    assert result.exit_code == 1
    assert data == json.loads((tmp_path / "r" / "result.json").read_text())
    assert data["schema_version"] == 1 and data["verdict"] == "fail" and data["mode"] == "diff"
    assert [c["name"] for c in data["checks"]] == ["updates", "data", "weights", "lr", "params",
                                                   "loss", "metrics", "evidence"]
    assert data["pair"]["tolerances"]["lr"] == 0
    runs = data["runs"]
    assert runs["reference"]["spec"] == str(loop_files["ref"])
    assert runs["candidate"]["spec"] == str(loop_files["micro"])
    first = runs["candidate"]["updates"][0]
    assert first["samples_seen"] == 32 and first["scheduler_steps"] is None
    assert isinstance(first["loss"], float)


def test_cli_into_a_folder_of_the_user_s_removes_none_of_its_files(tmp_path, monkeypatch):
    """``lrcheck diff A B --out .`` where the user keeps a metrics.png of their own: a diff
    report writes none, and lrcheck removes only what an earlier report of its own wrote."""
    rows = [(32 * (k + 1), schedule(32 * (k + 1)), 1.0 / (k + 1)) for k in range(4)]
    ref, cand = write(tmp_path / "a.jsonl", rows), write(tmp_path / "b.jsonl", rows)
    (tmp_path / "metrics.png").write_bytes(b"the user's own plot")
    monkeypatch.chdir(tmp_path)
    for _ in range(2):  # into a folder with no report, then over the report written there
        assert invoke("diff", "a.jsonl", "b.jsonl", "--quiet", "--out", ".").exit_code == 0
        assert (tmp_path / "metrics.png").read_bytes() == b"the user's own plot"
    assert {ref.name, cand.name, "lr.png", "loss.png", "report.html"} <= {
        p.name for p in tmp_path.iterdir()}


@pytest.mark.slow
def test_diff_imports_no_torch(loop_files, tmp_path):
    code = ("import sys; sys.argv = ['lrcheck', *%r]\n"
            "from lrcheck.cli import app\n"
            "try:\n    app()\nexcept SystemExit:\n    pass\n"
            "print('TORCH', 'torch' in sys.modules, file=sys.stderr)")
    for argv in (["diff", "--help"],
                 ["diff", str(loop_files["ref"]), str(loop_files["accum"]), "--quiet", "--out",
                  str(tmp_path / "r")]):
        done = subprocess.run([sys.executable, "-c", code % (argv,)], capture_output=True,
                              text=True, timeout=HANG_S)
        assert "TORCH False" in done.stderr, done.stderr


def test_cli_on_a_file_that_is_not_utf8_exits_2_with_one_line(tmp_path):
    good = tmp_path / "ref.jsonl"
    good.write_text('{"step": 0, "samples_seen": 8, "lr": [0.1], "loss": 1.0}\n')
    bad = tmp_path / "cand.jsonl"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    result = invoke("diff", good, bad, "--out", tmp_path / "out")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lrcheck: error:") and str(bad) in lines[0]
    assert "not UTF-8" in lines[0] and "Traceback" not in result.output


def fingerprinted(path: Path, perturb_at: int | None = None, *, every: int = 1,
                  tol: float = 1e-9, extra_tensor: bool = False) -> Path:
    """Four updates of a small model recorded with parameter fingerprints (every ``every``-th
    update); ``perturb_at``: from that update on, one element moved by 2·tol·max|p|."""
    from lrcheck.integrations.core import fingerprint
    from lrcheck.recorder import Recorder

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).double()
    params = list(model.parameters()) + ([torch.zeros(2, dtype=torch.float64)]
                                         if extra_tensor else [])
    with Recorder(path) as rec, torch.no_grad():
        for k in range(4):
            for p in model.parameters():
                p.mul_(0.9).add_(0.01)
            if k == perturb_at:
                peak = max(float(p.abs().max()) for p in params)
                model[1].weight[1, 2] += 2 * tol * peak
            fp = fingerprint(params) if k % every == 0 else None
            rec.log(lr=[0.1], samples=32, loss=1.0, fingerprint=fp)
    return path


def test_fingerprints_are_checked_as_params(tmp_path):
    ref = fingerprinted(tmp_path / "ref.jsonl")
    same = lrcheck.diff(ref, fingerprinted(tmp_path / "same.jsonl"),
                        tolerances=lrcheck.Tolerances(params=1e-9))
    params = same.check("params")
    print(params)
    assert params.status == "pass" and params.max_abs_diff == 0.0
    # Named for what it is: a tensor's sum moved, over the largest |p|, not a relative gap.
    assert params.detail.startswith("max |Δsum|/max|p| 0 ≤ 1e-09 over 4 updates; from parameter "
                                    "fingerprints")
    assert "not an element's relative gap" in params.detail
    moved = lrcheck.diff(ref, fingerprinted(tmp_path / "moved.jsonl", perturb_at=2),
                         tolerances=lrcheck.Tolerances(params=1e-9))
    params = moved.check("params")
    print(params)
    assert params.status == "fail" and params.first_divergence == 2
    assert "jumped at update 2" in params.detail  # from 0: not drift
    assert params.max_rel_diff is not None and 1.5e-9 < params.max_rel_diff < 2.5e-9
    assert moved.verdict == "fail"


def test_fingerprints_every_n_updates_and_a_different_model(tmp_path):
    ref = fingerprinted(tmp_path / "ref.jsonl")
    sparse = lrcheck.diff(ref, fingerprinted(tmp_path / "sparse.jsonl", every=2))
    assert sparse.check("params").status == "pass"
    assert "over 2 updates" in sparse.check("params").detail
    other = lrcheck.diff(ref, fingerprinted(tmp_path / "other.jsonl", extra_tensor=True))
    params = other.check("params")
    assert params.status == "fail" and params.first_divergence == 0
    assert params.detail == ("the fingerprints at update 0 cover 4 parameter tensors in the "
                             "reference, 5 in the candidate: not the same model")
    plain = write(tmp_path / "plain.jsonl", [(32 * (k + 1), 0.1, 1.0) for k in range(4)])
    assert (lrcheck.diff(ref, plain).check("params").detail
            == "not recorded: only the reference file has parameter fingerprints")


@pytest.mark.parametrize("bad", [[1.0], ["x", 1.0], [float("nan"), 1.0], "1,2", [True, 1.0]])
def test_a_malformed_fingerprint_is_a_spec_error(tmp_path, bad):
    path = tmp_path / "bad.jsonl"
    line = {"step": 0, "samples_seen": 32, "lr": [0.1], "fingerprint": bad}
    path.write_text(json.dumps(line) + "\n")
    with pytest.raises(SpecError, match=f"{path}:1: 'fingerprint' must be a list of numbers"):
        lrcheck.diff(path, path)


def one_line_error(result) -> str:
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lrcheck: error:"), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_two_runs_in_one_file_exit_2_naming_the_file_and_line(tmp_path):
    rows = [(32 * (k + 1), 0.1, 1.0) for k in range(3)]
    ref = write(tmp_path / "ref.jsonl", rows)
    both = tmp_path / "both.jsonl"
    both.write_text(ref.read_text() * 2)
    with pytest.raises(SpecError, match=f"{both}:4: 'samples_seen' goes back: 32 after 96"):
        lrcheck.diff(ref, both)
    line = one_line_error(invoke("diff", ref, both, "--out", tmp_path / "r"))
    assert f"{both}:4" in line and "goes back" in line


def test_a_reports_result_json_is_named_with_what_to_pass_instead(tmp_path, make_report):
    from lrcheck.reports.files import result_json

    ref = write(tmp_path / "ref.jsonl", [(32, 0.1, 1.0), (64, 0.1, 1.0)])
    cand = write(tmp_path / "cand.jsonl", [(32, 0.1, 1.0), (64, 0.1, 1.0)])
    assert invoke("diff", ref, cand, "--quiet", "--out", tmp_path / "r").exit_code == 0
    result = tmp_path / "r" / "result.json"
    line = one_line_error(invoke("diff", ref, result, "--out", tmp_path / "again"))
    assert f"{result} is a report's result.json" in line and "not a Recorder file" in line
    assert f"lrcheck diff {ref} {cand}" in line  # the files that diff compared
    compared = tmp_path / "compare.json"
    compared.write_text(result_json(make_report()))
    with pytest.raises(SpecError, match="is a report's result.json") as info:
        lrcheck.diff(compared, ref)
    assert "lrcheck.Recorder" in str(info.value) and "LrcheckCallback" in str(info.value)
    one_line = tmp_path / "one-line.json"  # the same report, compact, on one line
    one_line.write_text(json.dumps(json.loads(result.read_text())))
    with pytest.raises(SpecError, match="is a report's result.json"):
        lrcheck.diff(ref, one_line)


def test_a_loss_that_is_not_finite_fails_the_loss_check(tmp_path):
    from lrcheck.recorder import Recorder

    class Optimizer:
        param_groups = [{"lr": 0.1}]

    ref = write(tmp_path / "ref.jsonl", [(32 * (k + 1), 0.1, 1.0) for k in range(4)])
    cand = tmp_path / "cand.jsonl"
    with Recorder(cand) as rec:
        for loss in (1.0, 1.0, float("nan"), 1.0):
            rec.record(Optimizer(), samples=32, loss=loss)
    def refuse(constant):
        raise AssertionError(f"{constant} in a Recorder line: not strict JSON")

    lines = [json.loads(line, parse_constant=refuse) for line in cand.read_text().splitlines()]
    assert [line["loss"] for line in lines] == [1.0, 1.0, "NaN", 1.0]  # the NaN as a string
    loss = lrcheck.diff(ref, cand).check("loss")
    assert loss.status == "fail" and loss.first_divergence == 2, loss
    assert "not finite" in loss.detail
