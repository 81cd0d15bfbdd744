"""report.html: one page for a report of any kind (compare, trace, diff), verdict first.

Then the checks, each first divergence a link that zooms the plot to it; the plots — the LR
and the loss interactive over every update (``series.py`` packs them, ``assets/report.js`` draws
them with uPlot), each over its static matplotlib picture, which is what shows without
JavaScript; both runs' settings side by side, those that differ marked; the kind's own table;
the environment.

``report_page`` builds everything that is text in this process (milliseconds) and returns a
``Plot`` whose drawing — inlining the PNGs, packing the traces — runs after the PNGs are drawn,
in the plot helper when there is one (``render.py``).
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from lrcheck.reports.html import (
    UPLOT,
    Cell,
    Html,
    asset,
    esc,
    grid,
    inline_script,
    join,
    json_script,
    page,
    rich_grid,
    status,
    tag,
)
from lrcheck.reports.plots import Plot
from lrcheck.result import Kind, Report

if TYPE_CHECKING:
    from rich.table import Table

    from lrcheck.trace import EpochMetrics

# The plots that are interactive, by PNG: (id, y-axis label).
class LivePlot(TypedDict):
    """A chart the page's script draws from packed series."""

    id: str
    ylabel: str
    series: tuple[np.ndarray, np.ndarray, np.ndarray]  # reference, candidate, difference
    divergence: int | None
    diff_label: str


class Figure(TypedDict):
    """One figure of the page: its PNG, else its table, and the live chart where it has one."""

    png: Path | None
    id: str
    caption: str
    table: Html | None
    live: LivePlot | None


LIVE = {"lr.png": ("lr", "learning rate (group 0)"), "loss.png": ("loss", "training loss")}
CAPTIONS = {
    "lr.png": "The LR each optimizer update used (param group 0), every update of both runs. "
              "Drag across the plot to zoom, double-click for the whole run; hover to read "
              "update k in both runs and their difference.",
    "loss.png": "The training loss of each update (mean over the effective batch).",
    "metrics.png": "Accuracy and macro-F1 on the test split after every epoch.",
}


def report_page(report: Report, path: Path, pictures: list[Path]) -> Plot:
    """report.html of ``report`` at ``path`` as a ``Plot``, drawn after ``pictures`` (the
    report's PNGs, inlined as the static pictures). A plot of the report's kind whose PNG is
    not among them (a suite's passing pair, ``kinds.drawn_plots``) is there all the same: the
    LR and the loss as charts from the page's data, the metrics as a table of every epoch."""
    from lrcheck.reports.kinds import kind_of, left_out, plots_of
    from lrcheck.reports.logs import logs_html

    kind = kind_of(report)
    subject = kind.subject(report)
    drawn = {picture.name: picture for picture in pictures}
    figures: list[Figure] = []
    for name in plots_of(report):
        picture = drawn.get(name)
        live = LIVE.get(name)
        series = _series(report, name) if live else None
        if series is not None and np.isnan(series[0]).all() and np.isnan(series[1]).all():
            live, series = None, None  # nothing recorded (a trace has no loss)
        if picture is None and live is None and name != "metrics.png":
            continue  # no PNG, and nothing else to show it by
        check = "loss" if name == "loss.png" else "lr"
        chart: LivePlot | None = None if live is None or series is None else {
            "id": live[0], "ylabel": live[1], "series": series,
            "divergence": _first(report, check), "diff_label": "cand − ref"}
        figures.append({"png": picture, "id": live[0] if live else name.removesuffix(".png"),
                        "caption": CAPTIONS[name],
                        "table": _epochs(report) if picture is None and live is None else None,
                        "live": chart})
    before = join([_verdict(report, kind.heading(report), kind.title(report, subject)),
                   _checks(report), logs_html(report)])
    after = join([*(tag("p", why, class_="left-out")
                    for why in left_out(report).values()),
                  _settings(report), rich_grid(kind.table(report)) if report.kind != Kind.DIFF
                  else "", _environment(report.environment.to_dict())])
    return Plot(path, write_page, {
        "title": f"lrcheck {report.verdict.upper()}: {kind.heading(report)}",
        "before": before, "after": after, "figures": figures,
        "footer": Html(f"lrcheck {esc(report.environment.lrcheck)} · every number is "
                       f"in result.json beside this page · plots drawn with {UPLOT}, inlined")})


def _epochs(report: Report) -> Html:
    """Accuracy and macro-F1 on the test split after every epoch, of both runs: what
    metrics.png draws, where it is not drawn."""
    from lrcheck.trace import METRICS

    ref, cand = ({e.epoch: e for e in run.epochs} for run in (report.reference,
                                                               report.candidate))
    rows: list[list[Cell]] = []
    for epoch in sorted({*ref, *cand}):
        rows.append([str(epoch + 1), *((_metric(run.get(epoch), key), "num")
                                       for key, _ in METRICS for run in (ref, cand))])
    heads = ["epoch", *(f"{label} ({role})" for _, label in METRICS
                        for role in ("reference", "candidate"))]
    return grid(heads, rows, caption="The test split after every epoch.")


def _metric(epoch: EpochMetrics | None, key: str) -> str:
    return "—" if epoch is None else f"{getattr(epoch, key):.4f}"


def _first(report: Report, name: str) -> int | None:
    found = [c.first_divergence for c in report.checks if c.name == name]
    return found[0] if found else None


def _series(report: Report, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Reference, candidate and candidate − reference over every update, as long as the
    longer run (NaN past a run's end), as float32 (what the page keeps; the difference is taken
    in float64 first). A diff's difference is taken between the updates at the same
    samples_seen, at the reference's index (as lr.png)."""
    runs = (report.reference, report.candidate)
    if name == "lr.png":
        ref, cand = (r.lrs()[:, 0] if len(r.updates) else np.empty(0) for r in runs)
    else:
        ref, cand = (r.losses() for r in runs)
    n = max(len(ref), len(cand))
    out = np.full((3, n), np.nan)
    out[0, :len(ref)], out[1, :len(cand)] = ref, cand
    if report.kind == Kind.DIFF:
        from lrcheck.checks import align

        ref_at, cand_at = align(report.reference, report.candidate)
        out[2, ref_at] = cand[cand_at] - ref[ref_at]
    else:
        m = min(len(ref), len(cand))
        out[2, :m] = cand[:m] - ref[:m]
    ref32, cand32, diff32 = out.astype(np.float32)
    return ref32, cand32, diff32


def _verdict(report: Report, heading: str, title: str) -> Html:
    failed = [c.name for c in report.checks if c.status == "fail"]
    warned = [c.name for c in report.checks if c.status == "warn"]
    words = [f"failed: {', '.join(failed)}" if failed else "",
             f"warnings: {', '.join(warned)}" if warned else ""]
    lines = [tag("h1", f"{report.verdict.upper()} · {heading}"), tag("p", title)]
    if any(words):
        lines.append(tag("p", "; ".join(w for w in words if w)))
    diverged = [c for c in report.checks if c.status == "fail" and c.first_divergence is not None]
    if diverged:
        first = min(diverged, key=lambda c: c.first_divergence or 0)
        lines.append(tag("p", join(["First divergence: ", _goto(first.name,
                                                                  first.first_divergence),
                                    f" ({first.name})"])))
    for role, run in (("reference", report.reference), ("candidate", report.candidate)):
        if run.stopped:
            lines.append(tag("p", f"The {role} stopped early: {run.stopped}"))
    lines += [tag("p", f"Note: {note.text}", class_="note") for note in report.notes]
    return tag("header", join(lines), class_=f"verdict {report.verdict}")


def _goto(check: str, k: int | None) -> Html:
    plot = "loss" if check == "loss" else "lr"
    return tag("a", f"update {k}", href=f"#plot-{plot}", data_goto=plot, data_k=k,
               class_="goto")


def _checks(report: Report) -> Html:
    rows = []
    for c in report.checks:
        diff = "—" if c.max_abs_diff is None else f"{c.max_abs_diff:.3g}"
        first = "—" if c.first_divergence is None else _goto(c.name, c.first_divergence)
        rows.append([tag("code", c.name), status(c.status), (diff, "num"), (first, "num"),
                     (c.detail, "detail")])
    return join([tag("h2", "Checks", id="checks"),
                 grid(["check", "status", "max |Δ|", "first divergence", "detail"], rows)])


def _value(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "—"
    if isinstance(value, dict):  # launch, deterministic: a setting and its value each
        return "; ".join(f"{k}: {v}" for k, v in value.items()) or "—"
    return "—" if value is None else str(value)


def _settings(report: Report) -> Html:
    """Both runs' settings side by side; a row whose values differ is marked (≠)."""
    title = tag("h2", "Settings", id="settings")
    tolerances = report.pair.tolerances
    note = tag("p", "Tolerances: " + ", ".join(
        f"{k} {v:g}" for k, v in vars(tolerances).items()) + ".")
    if report.kind == Kind.DIFF:
        return join([title, rich_grid(kind_table(report)), note])
    ref, cand = (s.to_dict() for s in report.specs())
    keys = list(dict.fromkeys([*ref, *cand]))
    rows = [[tag("code", key), _value(ref.get(key)), _value(cand.get(key))] for key in keys]
    rows.append(["effective batch", *(str(s.effective_batch) for s in report.specs())])
    marks = ["differs" if r[1] != r[2] else None for r in rows]
    return join([title, grid(["setting", "reference", "candidate"], rows, row_classes=marks,
                             caption="Settings that differ are marked ≠."), note])


def kind_table(report: Report) -> Table:
    from lrcheck.reports.kinds import kind_of

    return kind_of(report).table(report)


def _environment(environment: dict[str, object]) -> Html:
    rows = [[tag("code", k), _value(v)] for k, v in environment.items()]
    return join([tag("h2", "Environment", id="environment"), grid(["", "value"], rows)])


def write_page(path: Path, *, title: str, before: Html, after: Html,
               figures: list[Figure], footer: Html) -> None:
    """Write report.html: inline each figure's PNG, pack its traces (after the PNGs are
    drawn: in the plot helper, when there is one)."""
    from lrcheck.reports.atomic import atomic_path
    from lrcheck.reports.series import pack

    blocks, plots = [tag("h2", "Plots", id="plots")], []
    for fig in figures:
        live = fig["live"]
        parts = [tag("figcaption", fig["caption"])]
        if fig["png"] is not None:
            png = base64.b64encode(fig["png"].read_bytes()).decode("ascii")
            parts.append(Html(f'<img class="static" alt="{esc(fig["png"].name)}" '
                              f'src="data:image/png;base64,{png}">'))
        elif fig["table"] is not None:
            parts.append(fig["table"])
        else:
            parts.append(tag("noscript", "This chart is drawn by the page's script; its "
                                         "numbers are in result.json beside this page."))
        if live is not None:
            ref, cand, diff = live["series"]
            plots.append({"id": live["id"], "ylabel": live["ylabel"], "n": len(ref),
                          "divergence": live["divergence"], "diff_label": live["diff_label"],
                          "ref": pack(ref), "cand": pack(cand, ref), "diff": pack(diff)})
            links = [tag("a", "whole run", href=f"#plot-{live['id']}", data_goto=live["id"],
                         data_k="all")]
            if live["divergence"] is not None:
                links.insert(0, tag("a", f"first divergence (update {live['divergence']})",
                                    href=f"#plot-{live['id']}", data_goto=live["id"],
                                    data_k=live["divergence"]))
            parts += [tag("div", join(links), class_="controls"), tag("div", "", class_="live"),
                      tag("p", "", class_="readout", aria_live="polite")]
        blocks.append(tag("figure", join(parts), id=f"plot-{fig['id']}"))
    scripts = [json_script("lrcheck-data", {"plots": plots}),
               inline_script(asset("uPlot.iife.min.js")), inline_script(asset("report.js"))]
    text = page(title, join([before, *blocks, after]), scripts=scripts if plots else (),
                footer=footer)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
