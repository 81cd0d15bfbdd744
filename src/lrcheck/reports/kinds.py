"""The kinds of report and how each is shown, in one registry that the table, the plots, report.md
and the suite's pages all read: ``KINDS[report.kind]``.

- ``compare``: both runs trained (``lrcheck compare``, ``lrcheck.compare``, a suite's pairs);
- ``trace``: both schedules stepped without a model (``lrcheck trace``): no loss, no metrics;
- ``diff``: two files written by ``lrcheck.Recorder`` (``lrcheck diff``), their updates aligned
  by samples seen: no spec, no evaluation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from lrcheck.plan.frameworks import PLAIN
from lrcheck.reports.plots import (
    Plot,
    aligned_loss_plot,
    aligned_lr_plot,
    loss_plot,
    lr_plot,
    metrics_plot,
)
from lrcheck.reports.table import (
    checks_table,
    files_table,
    files_title,
    framework_versions,
    from_logs,
    metrics_table,
    pair_title,
    trace_table,
    verdict_text,
)
from lrcheck.result import Kind, Report
from lrcheck.spec import RunSpec, samples_per_epoch
from lrcheck.trace import METRICS, metric_values
from lrcheck.words import plural

MakePlot = Callable[[Report, Path], Plot]


def _no_lines(report: Report) -> list[str]:
    return []


def _pair_name(report: Report) -> str:
    return report.pair.name


@dataclass(frozen=True)
class ReportKind:
    """How one kind of report is shown. ``subject`` is what was run, in words (in the title and
    report.md); ``title`` and ``settings`` take the report and its subject and give the checks
    table's title and report.md's list of what was compared; ``table`` is the table printed under
    the checks, ``plots`` the PNGs by file name, ``markdown`` report.md's lines after the
    checks, and ``heading`` the name report.md and report.html are headed with."""

    name: Kind
    subject: Callable[[Report], str]
    title: Callable[[Report, str], str]
    settings: Callable[[Report, str], list[str]]
    table: Callable[[Report], Table]
    plots: dict[str, MakePlot] = field(default_factory=dict)
    markdown: Callable[[Report], list[str]] = _no_lines
    heading: Callable[[Report], str] = _pair_name


def _task(report: Report) -> str:
    return f"task {report.specs()[1].task}"


def _schedule_only(report: Report) -> str:
    return f"schedule only, {samples_per_epoch(report.specs()[1]):,} samples per epoch"


def _files(report: Report) -> str:
    return f"Recorder files {report.pair.candidate} vs {report.pair.reference}"


def metrics_markdown(report: Report) -> list[str]:
    """report.md's table of the final evaluation."""
    lines = ["", "| metric | reference | candidate |", "| --- | --- | --- |"]
    ref, cand = metric_values(report.reference.metrics), metric_values(report.candidate.metrics)
    for key, _ in METRICS:
        r, c = ref.get(key), cand.get(key)
        lines.append(f"| {key} | {'—' if r is None else f'{r:.4f}'} | "
                     f"{'—' if c is None else f'{c:.4f}'} |")
    return lines


def file_settings(report: Report, subject: str) -> list[str]:
    """The bullet list of what was compared: two Recorder files, or two recorded commands (their
    command lines and world sizes, and the folders they were recorded into)."""
    pair, commands = report.pair, report.commands()
    if from_logs(report):
        return [*(f"- {role}: `{run.source}`, {plural(len(run.updates), 'update')} logged"
                  for role, run in (("candidate", report.candidate),
                                    ("reference", report.reference))),
                f"- the runs' own logs, {report.check('updates').detail.split('; ')[0]}; "
                f"lrcheck {report.environment.lrcheck}"]
    if commands is None:
        return [f"- candidate: `{pair.candidate}`, "
                f"{plural(len(report.candidate.updates), 'update')}",
                f"- reference: `{pair.reference}`, "
                f"{plural(len(report.reference.updates), 'update')}",
                "- Recorder files, updates aligned by samples_seen; "
                f"lrcheck {report.environment.lrcheck}"]
    return [*(f"- {role}: `{command.line}`, world {command.world_size}, "
              f"{plural(len(run.updates), 'update')}, recorded into `{folder}`"
              for role, command, run, folder in (
                  ("candidate", commands[1], report.candidate, pair.candidate),
                  ("reference", commands[0], report.reference, pair.reference))),
            "- recorded by lrcheck record, updates aligned by samples_seen; "
            f"lrcheck {report.environment.lrcheck}"]


def diff_heading(report: Report) -> str:
    """Two recorded commands by their command lines and world sizes; two files by the pair's
    name."""
    commands = report.commands()
    if commands is None:
        return report.pair.name
    return f"{commands[1].label()} vs {commands[0].label()}"


def _how(spec: RunSpec) -> str:
    """``policy `per-update``` for lrcheck's own loop, ``trained by `transformers, ...``` for a
    framework."""
    return (f"policy `{spec.policy}`" if spec.framework == PLAIN
            else f"trained by `{spec.trained_by}`")


def run_settings(report: Report, subject: str) -> list[str]:
    """The bullet list of what was compared: two runs of a ``PairSpec``."""
    ref, cand = report.specs()
    return [
        f"- candidate: bs {cand.bs} × accum {cand.accum} × world {cand.world} "
        f"(effective {cand.effective_batch}), {_how(cand)}",
        f"- reference: bs {ref.bs} × accum 1 × world {ref.world}, {_how(ref)}",
        f"- {subject}, scheduler `{cand.scheduler}` (warmup {cand.warmup:g}), "
        f"optimizer `{cand.optimizer}` lr {cand.lr:g}, {plural(cand.epochs, 'epoch')}, "
        f"tail `{cand.tail}`, loss-norm `{cand.loss_norm}`, {cand.dtype}, seed {cand.seed}",
        f"- environment: torch {report.environment.torch}"
        + "".join(f", {name} {version}" for name, version in framework_versions(report))
        + f" on {report.environment.device}"
        + (", --deterministic (its settings: result.json's environment)"
           if report.environment.deterministic else ""),
        *(f"- note: {note.text}" for note in report.notes),
    ]


KINDS: dict[Kind, ReportKind] = {kind.name: kind for kind in (
    ReportKind(Kind.COMPARE, _task, pair_title, run_settings, metrics_table,
               {"lr.png": lr_plot, "loss.png": loss_plot, "metrics.png": metrics_plot},
               metrics_markdown),
    # A schedule has no model: only its LR is drawn.
    ReportKind(Kind.TRACE, _schedule_only, pair_title, run_settings, trace_table,
               {"lr.png": lr_plot}),
    # A Recorder file records no evaluation.
    ReportKind(Kind.DIFF, _files, files_title, file_settings, files_table,
               {"lr.png": aligned_lr_plot, "loss.png": aligned_loss_plot}, heading=diff_heading),
)}


def kind_of(report: Report) -> ReportKind:
    return KINDS[report.kind]


def render(report: Report) -> Group:
    """The checks, the table of the report's kind under them, and the verdict: what the CLI
    prints."""
    kind = kind_of(report)
    from lrcheck.reports.logs import logs_table

    return Group(checks_table(report, kind.title(report, kind.subject(report))),
                 kind.table(report), *logs_table(report), *notes_text(report),
                 verdict_text(report))


def notes_text(report: Report) -> list[Text]:
    """A line for each setting a run was given and trains with otherwise (``spec.resolve``)."""
    return [Text(f"note: {note.text}", style="yellow") for note in report.notes]


def left_out(report: Report) -> dict[str, str]:
    """The plots of ``report``'s kind it does not draw, each with a sentence that says why: a
    loss plot where neither run recorded a loss would be empty."""
    if "loss.png" not in kind_of(report).plots or any(
            u.loss is not None for run in (report.reference, report.candidate)
            for u in run.updates):
        return {}
    return {"loss.png": "No loss plot: neither run recorded a loss (lrcheck record does not see "
                        "it; lrcheck.Recorder or a framework callback records it)."}


def plots_of(report: Report) -> dict[str, MakePlot]:
    """The plots ``report`` draws, by file name: its kind's, less those ``left_out``."""
    skip = left_out(report)
    return {name: make for name, make in kind_of(report).plots.items() if name not in skip}


# Which reports' PNGs a suite draws (``lrcheck suite --plots``): every pair's, only those of a
# pair whose verdict is not a pass (the default), or none. report.html is complete either way:
# the LR and the loss are charts drawn from the data in the page, the metrics a table.
PLOT_CHOICES = ("all", "failed", "none")


def drawn_plots(report: Report, choice: str = "all") -> dict[str, MakePlot]:
    """The PNGs drawn for ``report`` under ``choice`` (``PLOT_CHOICES``): ``plots_of`` or none."""
    if choice not in PLOT_CHOICES:
        raise ValueError(f"plots: {choice!r} is none of {', '.join(PLOT_CHOICES)}")
    if choice == "all" or (choice == "failed" and report.verdict != "pass"):
        return plots_of(report)
    return {}


def report_plots(report: Report, out: Path, choice: str = "all") -> list[Plot]:
    """The plots of ``report`` drawn under ``choice``, to be drawn into ``out``."""
    return [make(report, out / name) for name, make in drawn_plots(report, choice).items()]


def plot_names() -> set[str]:
    """Every PNG a report of any kind writes."""
    return {name for kind in KINDS.values() for name in kind.plots}
