"""``matrix.png``: the suite as a grid, a row per pair and a column per check, then the pair's
outcome; each cell coloured by its status."""

from __future__ import annotations

from pathlib import Path

from lrcheck.checks import CHECK_NAMES
from lrcheck.suite.outcome import OK, SuiteResult

COLOURS = {"pass": "#4caf50", "fail": "#e53935", "warn": "#fbc02d", "skip": "#bdbdbd",
           "": "#eeeeee", "error": "#6a1b9a"}
OUTCOME_COLOURS = {OK: "#4caf50", "unexpected": "#e53935", "regression": "#e53935",
                   "error": "#6a1b9a"}


def plot_matrix(result: SuiteResult, path: Path) -> None:
    from matplotlib.patches import Rectangle

    from lrcheck.reports.plots import figures, save_figure

    plt = figures()
    columns = [*CHECK_NAMES, "outcome"]
    rows = result.outcomes
    fig, axis = plt.subplots(figsize=(2.2 + 1.1 * len(columns) + 0.06 * max(
        (len(o.entry.name) for o in rows), default=10), 1.2 + 0.38 * len(rows)))
    for y, outcome in enumerate(rows):
        statuses = {c.name: c.status for c in outcome.report.checks} if outcome.report else {}
        for x, column in enumerate(columns):
            if column == "outcome":
                label, colour = outcome.status, OUTCOME_COLOURS[outcome.status]
            else:
                label = statuses.get(column, "error" if outcome.report is None else "")
                colour = COLOURS[label]
            axis.add_patch(Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white",
                                     linewidth=2))
            axis.text(x + 0.5, y + 0.5, label, ha="center", va="center", fontsize=8,
                      color="white" if label in ("fail", "error", "unexpected", "regression")
                      else "black")
    axis.set_xlim(0, len(columns))
    axis.set_ylim(len(rows), 0)
    axis.set_xticks([x + 0.5 for x in range(len(columns))], columns)
    axis.xaxis.tick_top()
    axis.set_yticks([y + 0.5 for y in range(len(rows))],
                    [f"{o.entry.name} (expect {o.entry.expect})" for o in rows], fontsize=8)
    axis.tick_params(length=0)
    for spine in axis.spines.values():
        spine.set_visible(False)
    axis.set_title(f"lrcheck suite {result.suite.path}: {result.verdict.upper()}", fontsize=9,
                   pad=24)
    save_figure(fig, path)
