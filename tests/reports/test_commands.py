"""The report of two recorded commands (``lrcheck run``, or ``lrcheck diff`` of two record
folders): it names both command lines and each run's world size, from the folders' run.json,
in the printed tables, report.md and report.html."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

from rich.console import Console

import lrcheck
from lrcheck.reports.files import write_report
from lrcheck.reports.kinds import render
from tests.schema_files import optimizer_json, process_json, run_json

REF = ["python", "train.py", "--bs", "32"]
CAND = ["torchrun", "--nproc-per-node", "2", "train.py", "--bs", "8", "--accum", "2"]


def record_folder(path: Path, command: list[str], world: int, losses: bool = True,
                  samples: int | None = 32) -> Path:
    """A record folder as ``lrcheck record`` writes it: run.json and one Recorder file per
    rank, 8 updates of a linear decay (with their losses, or none)."""
    path.mkdir(parents=True)
    lines = [{"step": k, "samples_seen": 32 * (k + 1), "lr": [0.1 * (1 - k / 8)],
              "loss": (2.0 - 0.1 * k) if losses else None, "scheduler_steps": 1,
              "grad_sq": 1.0 / (k + 1)}
             for k in range(8)]
    for rank in range(world):
        (path / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (path / "run.json").write_text(json.dumps(run_json(
        command=command, samples_per_update=samples, world_size=world,
        updates={f"rank{r}.jsonl": 8 for r in range(world)},
        processes=[process_json(optimizers=[optimizer_json(updates=8)])])))
    return path


def printed(report) -> str:
    console = Console(file=StringIO(), width=200)
    console.print(render(report))
    return " ".join(console.file.getvalue().split())  # the title wraps at the table's width


def test_the_report_of_two_commands_names_their_lines_and_world_sizes(tmp_path):
    report = lrcheck.diff(record_folder(tmp_path / "r" / "reference", REF, 1),
                          record_folder(tmp_path / "r" / "candidate", CAND, 2))
    ref_line, cand_line = "python train.py --bs 32", ("torchrun --nproc-per-node 2 train.py "
                                                      "--bs 8 --accum 2")
    table = printed(report)
    print(table)
    assert f"candidate {cand_line} (world 2) vs reference {ref_line} (world 1)" in table
    assert "world size" in table
    out = write_report(report, tmp_path / "out")
    md = (out / "report.md").read_text()
    print(md)
    assert md.startswith(f"# lrcheck: {cand_line} (world 2) vs {ref_line} (world 1)\n")
    assert f"- candidate: `{cand_line}`, world 2, 8 updates" in md
    assert f"- reference: `{ref_line}`, world 1, 8 updates" in md
    html = (out / "report.html").read_text()
    assert f"<title>lrcheck PASS: {cand_line} (world 2) vs {ref_line} (world 1)</title>" in html
    assert f"<h1>PASS · {cand_line} (world 2) vs {ref_line} (world 1)</h1>" in html
    assert "candidate-vs-reference" not in md + html + table
    result = json.loads((out / "result.json").read_text())
    assert result["runs"]["candidate"]["command"] == {"line": cand_line, "world_size": 2,
                                                        "samples_known": True}
    assert result["runs"]["reference"]["command"] == {"line": ref_line, "world_size": 1,
                                                        "samples_known": True}


def test_no_loss_plot_where_neither_run_recorded_a_loss_and_the_report_says_why(tmp_path):
    report = lrcheck.diff(record_folder(tmp_path / "r" / "reference", REF, 1, losses=False),
                          record_folder(tmp_path / "r" / "candidate", CAND, 2, losses=False))
    out = write_report(report, tmp_path / "out")
    assert (out / "lr.png").exists() and not (out / "loss.png").exists()
    why = "No loss plot: neither run recorded a loss"
    md = (out / "report.md").read_text()
    assert "![loss](loss.png)" not in md and why in md
    html = (out / "report.html").read_text()
    assert 'alt="loss.png"' not in html and why in html
    assert json.loads((out / "result.json").read_text())["files"] == [
        "lr.png", "report.html", "report.md", "result.json"]
    # A loss in one run is drawn, and an earlier report's loss.png does not outlive its report.
    with_loss = lrcheck.diff(record_folder(tmp_path / "s" / "reference", REF, 1),
                             record_folder(tmp_path / "s" / "candidate", CAND, 2, losses=False))
    write_report(with_loss, out)
    assert (out / "loss.png").exists() and why not in (out / "report.md").read_text()
    write_report(report, out)
    assert not (out / "loss.png").exists()


def test_samples_not_given_are_said_so_not_shown_as_the_count_of_updates(tmp_path):
    report = lrcheck.diff(record_folder(tmp_path / "r" / "reference", REF, 1, samples=None),
                          record_folder(tmp_path / "r" / "candidate", CAND, 2))
    table = printed(report)
    print(table)
    # the candidate's 256 are not shown: the updates are aligned by their index, not by samples
    assert "samples seen │ not given (--samples) │ not compared (the other's not given)" in table
