"""Plots of a report (matplotlib, Agg backend). Long traces are drawn as at most ``MAX_POINTS``
points per line, so plotting cost does not grow with the run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from lrcheck.result import Report
from lrcheck.trace import thin_indices

MAX_POINTS = 4000
REF_STYLE = {"color": "tab:blue", "label": "reference"}
CAND_STYLE = {"color": "tab:orange", "linestyle": "--", "label": "candidate"}


class _Figures:
    """The two pyplot calls the plots make, without pyplot: importing pyplot (its backends and
    figure manager) costs about half a second per process, and a ``Figure`` made directly is
    drawn by the Agg canvas ``savefig`` picks for a png and freed like any object."""

    @staticmethod
    def subplots(*args: Any, figsize: tuple[float, float] | None = None,
                 **kwargs: Any) -> tuple[Any, Any]:
        from matplotlib.figure import Figure

        fig = Figure(figsize=figsize)
        return fig, fig.subplots(*args, **kwargs)

    @staticmethod
    def close(fig: Any) -> None:
        """Nothing to do: no figure manager holds it."""


def figures() -> _Figures:
    return _Figures()


def _thin(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    pick = thin_indices(len(values), MAX_POINTS)
    return pick, values[pick]


def plot_lr(report: Report, path: Path) -> None:
    plt = figures()
    ref, cand = report.reference.lrs()[:, :1].ravel(), report.candidate.lrs()[:, :1].ravel()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    top.plot(*_thin(ref), **REF_STYLE)
    top.plot(*_thin(cand), **CAND_STYLE)
    top.set_ylabel("learning rate (group 0)")
    top.set_title(f"LR used by each optimizer update — {report.pair.name}", fontsize=9)
    top.legend()
    if report.mode == "diff":  # updates at the same samples_seen, at the reference's index
        from lrcheck.checks import align

        ref_at, cand_at = align(report.reference, report.candidate)
        pick, gap = _thin(cand[cand_at] - ref[ref_at])
        bottom.plot(ref_at[pick], gap, color="tab:red")
    else:
        n = min(len(ref), len(cand))
        bottom.plot(*_thin(cand[:n] - ref[:n]), color="tab:red")
    bottom.axhline(0.0, color="grey", linewidth=0.5)
    lr_check = report.check("lr")
    if lr_check.first_divergence is not None:
        for axis in (top, bottom):
            axis.axvline(lr_check.first_divergence, color="tab:red", linestyle=":",
                         label="first divergence")
    bottom.set_ylabel("candidate − reference")
    bottom.set_xlabel("optimizer update")
    save_figure(fig, path)


def plot_loss(report: Report, path: Path) -> None:
    plt = figures()
    fig, axis = plt.subplots(figsize=(8, 4))
    axis.plot(*_thin(report.reference.losses()), **REF_STYLE)
    axis.plot(*_thin(report.candidate.losses()), **CAND_STYLE)
    axis.set_xlabel("optimizer update")
    axis.set_ylabel("training loss (effective batch)")
    axis.set_title(f"loss — {report.pair.name}", fontsize=9)
    axis.legend()
    save_figure(fig, path)


def plot_metrics(report: Report, path: Path) -> None:
    plt = figures()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharex=True)
    for axis, key, title in ((axes[0], "accuracy", "accuracy"), (axes[1], "f1_macro", "macro-F1")):
        for trace, style in ((report.reference, REF_STYLE), (report.candidate, CAND_STYLE)):
            axis.plot([e.epoch + 1 for e in trace.epochs],
                      [getattr(e, key) for e in trace.epochs], marker="o", **style)
        axis.set_title(title)
        axis.set_xlabel("epoch")
    axes[0].legend()
    fig.suptitle(f"test split — {report.pair.name}", fontsize=9)
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    from lrcheck.reports.files import atomic_path

    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    figures().close(fig)


PLOTS = {"lr.png": plot_lr, "loss.png": plot_loss, "metrics.png": plot_metrics}
# A trace has no model: only its LR is drawn. A diff's files record no evaluation.
PLOTS_BY_MODE = {"compare": PLOTS, "trace": {"lr.png": plot_lr},
                 "diff": {"lr.png": plot_lr, "loss.png": plot_loss}}
