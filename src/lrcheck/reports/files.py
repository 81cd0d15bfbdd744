"""The files of a report, each written atomically (a reader never sees half a file)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from lrcheck.errors import SpecError
from lrcheck.result import Report


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed onto it when the block succeeds."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def result_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, allow_nan=True) + "\n"


def prepare_out(out: Path) -> Path:
    """``out`` as a folder to write into; an existing file there is bad input."""
    if out.exists() and not out.is_dir():
        raise SpecError(f"--out {str(out)!r} is an existing file; give a folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def report_markdown(report: Report) -> str:
    pair = report.pair
    ref, cand = pair.reference, pair.candidate
    lines = [
        f"# lrcheck: {pair.name}",
        "",
        f"**Verdict: {report.verdict.upper()}**",
        "",
        f"- candidate: bs {cand.bs} × accum {cand.accum} × world {cand.world} "
        f"(effective {cand.effective_batch}), policy `{cand.policy}`",
        f"- reference: bs {ref.bs} × accum 1 × world {ref.world}, policy `{ref.policy}`",
        f"- task `{cand.task}`, scheduler `{cand.scheduler}` (warmup {cand.warmup:g}), "
        f"optimizer `{cand.optimizer}` lr {cand.lr:g}, {cand.epochs} epochs, tail `{cand.tail}`, "
        f"loss-norm `{cand.loss_norm}`, {cand.dtype}, seed {cand.seed}",
        f"- environment: torch {report.environment.get('torch')}"
        + (f", accelerate {report.environment['accelerate']}"
           if "accelerate" in report.environment else "")
        + f" on {report.environment.get('device')}",
        "",
        "| check | status | max abs diff | first divergence | detail |",
        "| --- | --- | --- | --- | --- |",
    ]
    for c in report.checks:
        diff = "—" if c.max_abs_diff is None else f"{c.max_abs_diff:.3g}"
        first = "—" if c.first_divergence is None else str(c.first_divergence)
        lines.append(f"| {c.name} | {c.status} | {diff} | {first} | "
                     f"{c.detail.replace('|', '/')} |")
    lines += ["", "| metric | reference | candidate |", "| --- | --- | --- |"]
    for key in ("accuracy", "f1_macro"):
        r = (report.reference.metrics or {}).get(key)
        c = (report.candidate.metrics or {}).get(key)
        lines.append(f"| {key} | {'—' if r is None else f'{r:.4f}'} | "
                     f"{'—' if c is None else f'{c:.4f}'} |")
    lines += ["", "![LR](lr.png)", "", "![loss](loss.png)", "", "![metrics](metrics.png)", ""]
    return "\n".join(lines)


def write_report(report: Report, out: Path) -> Path:
    """result.json, report.md, lr.png, loss.png and metrics.png in ``out``."""
    from lrcheck.reports.plots import PLOTS

    out = prepare_out(out)
    write_text(out / "result.json", result_json(report))
    write_text(out / "report.md", report_markdown(report))
    for name, plot in PLOTS.items():
        plot(report, out / name)
    return out
