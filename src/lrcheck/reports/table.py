"""Rich renderables for a report. Rendering only: the CLI decides where they are printed."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from lrcheck.plan.frameworks import FRAMEWORKS, PLAIN
from lrcheck.result import Report
from lrcheck.trace import METRICS, metric_values

STATUS_STYLE = {"pass": "bold green", "fail": "bold red", "warn": "bold yellow",
                "skip": "dim", "incomplete": "bold red"}


def status_text(status: str) -> Text:
    return Text(status.upper(), style=STATUS_STYLE.get(status, ""))


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def pair_title(report: Report, subject: str) -> str:
    """The checks table's title for two runs of a ``PairSpec``."""
    ref, cand = report.specs()
    against = ("" if ref.framework == cand.framework == PLAIN else f", {ref.trained_by}")
    return (f"lrcheck: {cand.label} (world {cand.world}, {cand.trained_by}) "
            f"vs {ref.label} (world {ref.world}{against}) · {subject} · {cand.scheduler}"
            + "".join(f" · {name} {version}" for name, version in framework_versions(report)))


def framework_versions(report: Report) -> list[tuple[str, str]]:
    """The frameworks the two runs trained through, with their versions (from the
    environment)."""
    names = {FRAMEWORKS[spec.framework].module for spec in report.specs()}
    versions = report.environment.frameworks
    return [(name, versions[name]) for name in sorted(n for n in names if n) if name in versions]


def files_title(report: Report, subject: str) -> str:
    """The checks table's title for two Recorder files, or two recorded commands: their
    command lines and world sizes."""
    pair, commands = report.pair, report.commands()
    if commands is not None:
        return (f"lrcheck: candidate {commands[1].label()} vs reference {commands[0].label()} · "
                "aligned by samples_seen")
    how = "from their logs" if from_logs(report) else "aligned by samples_seen"
    return f"lrcheck diff: candidate {pair.candidate} vs reference {pair.reference} · {how}"


def from_logs(report: Report) -> bool:
    """Whether a diff compared two runs' own logs (``checks.logs``, whose ``limits`` check says
    what they cannot prove)."""
    return any(c.name == "limits" for c in report.checks)


def checks_table(report: Report, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    table.add_column("check")
    table.add_column("status")
    table.add_column("max |Δ|", justify="right")
    table.add_column("first divergence", justify="right")
    table.add_column("detail", overflow="fold")
    for check in report.checks:
        first = "—" if check.first_divergence is None else f"update {check.first_divergence}"
        table.add_row(check.name, status_text(check.status), _number(check.max_abs_diff), first,
                      check.detail)
    return table


def metrics_table(report: Report) -> Table:
    table = Table(title="final evaluation (test split)", title_justify="left")
    table.add_column("")
    for role, spec in zip(("reference", "candidate"), report.specs(), strict=True):
        table.add_column(f"{role} {spec.label}", justify="right")
    table.add_column("Δ", justify="right")
    ref, cand = report.reference, report.candidate
    rows = [("optimizer updates", float(len(ref.updates)), float(len(cand.updates)), "{:.0f}"),
            ("final LR (group 0)", ref.updates[-1].lr[0] if ref.updates else None,
             cand.updates[-1].lr[0] if cand.updates else None, "{:.4g}"),
            ("final train loss", ref.updates[-1].loss if ref.updates else None,
             cand.updates[-1].loss if cand.updates else None, "{:.6f}")]
    ref_metrics, cand_metrics = metric_values(ref.metrics), metric_values(cand.metrics)
    for key, label in METRICS:
        rows.append((label, ref_metrics.get(key), cand_metrics.get(key), "{:.4f}"))
    for label, a, b, fmt in rows:
        delta = "—" if a is None or b is None else f"{b - a:+.4g}"
        table.add_row(label, "—" if a is None else fmt.format(a),
                      "—" if b is None else fmt.format(b), delta)
    return table


def verdict_text(report: Report) -> Text:
    failed = [c.name for c in report.checks if c.status == "fail"]
    warned = [c.name for c in report.checks if c.status == "warn"]
    text = Text("verdict: ")
    text.append(report.verdict.upper(), style=STATUS_STYLE[report.verdict])
    if failed:
        text.append(f" — failed: {', '.join(failed)}")
    if warned:
        text.append(f" — warnings: {', '.join(warned)}")
    return text


def trace_table(report: Report) -> Table:
    """What the two simulated schedules did, and what simulating them cost."""
    table = Table(title="simulated schedules (no model)", title_justify="left")
    table.add_column("")
    for role, spec in zip(("reference", "candidate"), report.specs(), strict=True):
        table.add_column(f"{role} {spec.label}", justify="right")
    runs = (report.reference, report.candidate)
    lrs = [trace.lrs()[:, 0] for trace in runs]
    steps = [0 if t.schedule is None else t.schedule.scheduler_steps for t in runs]
    rows = [
        ("optimizer updates", [f"{len(t.updates):,} of {t.planned_updates:,}" for t in runs]),
        ("scheduler.step() calls", [f"{n:,}" for n in steps]),
        ("peak LR (group 0)", [_number(float(v.max())) if len(v) else "—" for v in lrs]),
        ("final LR (group 0)", [_number(float(v[-1])) if len(v) else "—" for v in lrs]),
        ("simulated in", [f"{t.seconds:.2f} s ({1e6 * t.seconds / max(n, 1):.1f} µs per step)"
                          for t, n in zip(runs, steps, strict=True)]),
    ]
    for label, (ref, cand) in rows:
        table.add_row(label, ref, cand)
    return table


def files_table(report: Report) -> Table:
    """What each Recorder file holds (``lrcheck diff``)."""
    table = Table(title="recorded runs", title_justify="left")
    table.add_column("")
    table.add_column("reference", justify="right")
    table.add_column("candidate", justify="right")
    runs = (report.reference, report.candidate)
    losses = [[u.loss for u in t.updates if u.loss is not None] for t in runs]
    if from_logs(report):
        return _logs_table(report, table, losses)
    commands = report.commands()
    given = [True, True] if commands is None else [c.samples_known for c in commands]
    counted = [f"{t.updates[-1].samples_seen:,}" if all(given) else "not given (--samples)"
               if not known else "not compared (the other's not given)"
               for t, known in zip(runs, given, strict=True)]
    rows = [
        ("file", [str(t.source) for t in runs]),
        *([("command", [c.line for c in commands]),
           ("world size", [str(c.world_size) for c in commands])]
          if commands is not None else []),
        ("optimizer updates", [f"{len(t.updates):,}" for t in runs]),
        ("samples seen", counted),
        ("param groups", [str(len(t.updates[0].lr)) for t in runs]),
        ("final LR (group 0)", [f"{t.updates[-1].lr[0]:.4g}" for t in runs]),
        ("final loss", [f"{v[-1]:.6f}" if v else "not recorded" for v in losses]),
    ]
    for label, (ref, cand) in rows:
        table.add_row(label, ref, cand)
    return table



def _logs_table(report: Report, table: Table, losses: list[list[float]]) -> Table:
    """``files_table`` of two logs: the updates each logged, and the samples seen only where
    the updates were aligned by them."""
    runs = (report.reference, report.candidate)
    table.title = "logged runs"
    seen = "aligned by samples seen" in report.check("updates").detail
    rows = [("log", [str(t.source) for t in runs]),
            ("updates logged", [f"{len(t.updates):,}" for t in runs]),
            *([("samples seen", [f"{t.updates[-1].samples_seen:,}" for t in runs])]
              if seen else []),
            ("final LR (group 0)", [f"{t.updates[-1].lr[0]:.4g}" for t in runs]),
            ("final loss", [f"{v[-1]:.6f}" if v else "not logged" for v in losses])]
    for label, (ref, cand) in rows:
        table.add_row(label, ref, cand)
    return table
