"""Plots of a report (matplotlib, Agg backend), in two halves. ``lr_plot``, ``loss_plot`` and
``metrics_plot`` turn a report into a ``Plot``: a drawing function and the plain data it draws
(numpy arrays and strings, long traces thinned to at most ``MAX_POINTS`` points per line, so
plotting cost does not grow with the run). ``Plot.draw()`` draws it. A ``Plot`` pickles, so
``reports.render`` can draw it in a helper process while this one goes on.

matplotlib is imported only by the drawing functions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lrcheck.plan.digest import thin_indices
from lrcheck.trace import METRICS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from lrcheck.result import Report
    from lrcheck.trace import RunTrace

MAX_POINTS = 4000
DPI = 100
REF_STYLE = {"color": "tab:blue", "label": "reference"}
CAND_STYLE = {"color": "tab:orange", "linestyle": "--", "label": "candidate"}
# Fixed margins (fractions of the figure) for the report's plots, whose labels do not change
# size: laying a figure out with tight_layout draws it once more (about 0.07 s a figure).
MARGINS = {"left": 0.11, "right": 0.97, "bottom": 0.1, "top": 0.93, "hspace": 0.08}


@dataclass(frozen=True)
class Plot:
    """One PNG: ``draw_fn(path, **args)``, where ``draw_fn`` is a module-level function and
    ``args`` plain data. ``weight``: its drawing time, in loss.png's (about 0.065 s on a 2-CPU
    machine), for ``render.halves``."""

    path: Path
    draw_fn: Callable[..., None]
    args: dict[str, object]
    weight: float = 1.0

    def draw(self) -> None:
        self.draw_fn(self.path, **self.args)


Line = tuple[np.ndarray, np.ndarray]


def _thin(values: np.ndarray, x: np.ndarray | None = None) -> Line:
    """(x, y) of at most about ``MAX_POINTS`` points of ``values`` (x: their indices, or
    ``x`` at them)."""
    pick = thin_indices(len(values), MAX_POINTS)
    return (pick if x is None else np.asarray(x)[pick]), np.asarray(values)[pick]


def lr_plot(report: Report, path: Path) -> Plot:
    """lr.png: each run's LR (group 0) per update, and the candidate's minus the reference's
    (update k against update k), with the first divergence marked."""
    ref, cand = report.reference.lrs()[:, :1].ravel(), report.candidate.lrs()[:, :1].ravel()
    n = min(len(ref), len(cand))
    return _lr_plot(report, path, ref, cand, _thin(cand[:n] - ref[:n]))


def aligned_lr_plot(report: Report, path: Path) -> Plot:
    """``lr_plot`` of two Recorder files, record folders or logs, on the update axis (each
    update's own index: a log written every 10 updates at 9, 19, 29): the difference is taken
    between the updates at the same samples_seen, at the reference's update."""
    from lrcheck.checks import align

    ref, cand = _group0(report.reference), _group0(report.candidate)
    at = _updates(report.reference), _updates(report.candidate)
    ref_at, cand_at = align(report.reference, report.candidate)
    return _lr_plot(report, path, ref, cand, _thin(cand[cand_at] - ref[ref_at], x=at[0][ref_at]),
                    at)


def aligned_loss_plot(report: Report, path: Path) -> Plot:
    """``loss_plot`` on the update axis, as ``aligned_lr_plot``."""
    return Plot(path, draw_loss, {
        "ref": _thin(report.reference.losses(), _updates(report.reference)),
        "cand": _thin(report.candidate.losses(), _updates(report.candidate)),
        "title": f"loss — {report.pair.name}"})


def _group0(trace: RunTrace) -> np.ndarray:
    """Group 0's LR per update (empty where the trace has no update)."""
    found = trace.lrs()[:, :1].ravel() if trace.updates else np.zeros(0)
    return found if len(found) == len(trace.updates) else np.full(len(trace.updates), np.nan)


def _updates(trace: RunTrace) -> np.ndarray:
    """Each update's own index (a log's updates are those it logged)."""
    return np.array([u.step for u in trace.updates], dtype=np.int64)


def _lr_plot(report: Report, path: Path, ref: np.ndarray, cand: np.ndarray, gap: Line,
             at: tuple[np.ndarray | None, np.ndarray | None] = (None, None)) -> Plot:
    return Plot(path, draw_lr, {
        "ref": _thin(ref, at[0]), "cand": _thin(cand, at[1]), "gap": gap,
        "divergence": report.check("lr").first_divergence,
        "title": f"LR used by each optimizer update — {report.pair.name}"}, weight=1.5)


def loss_plot(report: Report, path: Path) -> Plot:
    """loss.png: each run's training loss per update."""
    return Plot(path, draw_loss, {"ref": _thin(report.reference.losses()),
                                  "cand": _thin(report.candidate.losses()),
                                  "title": f"loss — {report.pair.name}"})


def metrics_plot(report: Report, path: Path) -> Plot:
    """metrics.png: accuracy and macro-F1 on the test split after every epoch."""
    def series(trace: RunTrace) -> dict[str, list[float]]:
        return {"epoch": [e.epoch + 1 for e in trace.epochs],
                "accuracy": [e.accuracy for e in trace.epochs],
                "f1_macro": [e.f1_macro for e in trace.epochs]}

    return Plot(path, draw_metrics, {"ref": series(report.reference),
                                     "cand": series(report.candidate),
                                     "title": f"test split — {report.pair.name}"},
                weight=1.3)


def new_figure(*args: int, figsize: tuple[float, float],
               **kwargs: Any) -> tuple[Figure, Any]:
    """A figure and its axes, without pyplot: importing pyplot (its backends and figure manager)
    costs about half a second per process, and a ``Figure`` made directly is drawn by the Agg
    canvas ``savefig`` picks for a png and freed like any object."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(*args, **kwargs)


def draw_lr(path: Path, *, ref: Line, cand: Line, gap: Line, divergence: int | None,
            title: str) -> None:
    fig, (top, bottom) = new_figure(2, 1, figsize=(8, 6), sharex=True,
                                    gridspec_kw={"height_ratios": [3, 2]})
    top.plot(*ref, **REF_STYLE)
    top.plot(*cand, **CAND_STYLE)
    top.set_ylabel("learning rate (group 0)")
    top.set_title(title, fontsize=9)
    bottom.plot(*gap, color="tab:red")
    bottom.axhline(0.0, color="grey", linewidth=0.5)
    if divergence is not None:
        top.axvline(divergence, color="tab:red", linestyle=":", label="first divergence")
        bottom.axvline(divergence, color="tab:red", linestyle=":")
    top.legend()
    bottom.set_ylabel("candidate − reference")
    bottom.set_xlabel("optimizer update")
    save_figure(fig, path, MARGINS)


def draw_loss(path: Path, *, ref: Line, cand: Line, title: str) -> None:
    fig, axis = new_figure(figsize=(8, 4))
    axis.plot(*ref, **REF_STYLE)
    axis.plot(*cand, **CAND_STYLE)
    axis.set_xlabel("optimizer update")
    axis.set_ylabel("training loss (effective batch)")
    axis.set_title(title, fontsize=9)
    axis.legend()
    save_figure(fig, path, {**MARGINS, "bottom": 0.13, "top": 0.9})


def draw_metrics(path: Path, *, ref: dict[str, list[float]], cand: dict[str, list[float]],
                 title: str) -> None:
    fig, axes = new_figure(1, 2, figsize=(9, 3.5), sharex=True)
    for axis, (key, name) in zip(axes, METRICS, strict=True):
        for series, style in ((ref, REF_STYLE), (cand, CAND_STYLE)):
            axis.plot(series["epoch"], series[key], marker="o", **style)
        axis.set_title(name)
        axis.set_xlabel("epoch")
    axes[0].legend()
    fig.suptitle(title, fontsize=9)
    save_figure(fig, path, {"left": 0.08, "right": 0.98, "bottom": 0.14, "top": 0.84,
                            "wspace": 0.22})


def save_figure(fig: Figure, path: Path, margins: dict[str, float] | None = None) -> None:
    """Write ``fig`` as a png (atomically); laid out with ``margins``, or by tight_layout."""
    from lrcheck.reports.atomic import atomic_path

    if margins is None:
        fig.tight_layout()
        # tight_layout leaves a placeholder layout engine, for which savefig draws the whole
        # figure once more before drawing it for the file; the layout is done, so none is left.
        fig.set_layout_engine(None)
    else:
        fig.subplots_adjust(**margins)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=DPI, format="png")

