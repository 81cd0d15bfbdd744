"""``matrix.png``: the suite as a grid, a row per pair and a column per check, then the pair's
outcome; each cell coloured by its status."""

from __future__ import annotations

from pathlib import Path

from lrcheck.checks import CHECK_NAMES
from lrcheck.reports.plots import Plot, new_figure, save_figure
from lrcheck.suite.outcome import ERROR, NOT_RUN, OK, SuiteResult

COLOURS = {"pass": "#4caf50", "fail": "#e53935", "warn": "#fbc02d", "skip": "#bdbdbd",
           "": "#eeeeee", "error": "#6a1b9a"}
DARK = ("fail", "error", "unexpected", "regression")  # cells with white text
OUTCOME_COLOURS = {OK: "#4caf50", "unexpected": "#e53935", "regression": "#e53935",
                   "error": "#6a1b9a", "incomplete": "#bdbdbd", NOT_RUN: "#eeeeee"}


def matrix_plot(result: SuiteResult, path: Path) -> Plot:
    """matrix.png as a ``Plot``: the label, colour and text colour of every cell."""
    columns = [*CHECK_NAMES, "outcome"]
    cells = []
    for outcome in result.outcomes:
        statuses = {c.name: c.status for c in outcome.report.checks} if outcome.report else {}
        row = []
        for column in columns:
            if column == "outcome":
                label = outcome.status.replace("_", " ")
                colour = OUTCOME_COLOURS[outcome.status]
            else:
                label = statuses.get(column, "error" if outcome.status == ERROR else "")
                colour = COLOURS[label]
            row.append((label, colour, "white" if label in DARK else "black"))
        cells.append(row)
    return Plot(path, draw_matrix, {
        "cells": cells, "columns": columns,
        "rows": [f"{o.entry.name} (expect {o.entry.expect})" for o in result.outcomes],
        "title": f"lrcheck suite {result.suite.path}: {result.verdict.upper()}"},
        weight=0.5 + 0.03 * len(columns) * len(cells))  # 12 pairs: about 0.19 s


def draw_matrix(path: Path, *, cells: list[list[tuple[str, str, str]]], columns: list[str],
                rows: list[str], title: str) -> None:
    from matplotlib.patches import Rectangle

    fig, axis = new_figure(figsize=(2.2 + 1.1 * len(columns) + 0.06 * max(
        (len(r) for r in rows), default=10), 1.2 + 0.38 * len(rows)))
    for y, row in enumerate(cells):
        for x, (label, colour, text_colour) in enumerate(row):
            # add_artist, not add_patch: the limits are set below, so a cell need not join the
            # data limits (add_patch updating them is about a tenth of the drawing time). Cells
            # lie inside the axes, so tight_layout need not measure them either.
            axis.add_artist(Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white",
                                      linewidth=2, in_layout=False))
            axis.text(x + 0.5, y + 0.5, label, ha="center", va="center", fontsize=8,
                      color=text_colour, in_layout=False)
    axis.set_xlim(0, len(columns))
    axis.set_ylim(len(rows), 0)
    axis.set_xticks([x + 0.5 for x in range(len(columns))], columns)
    axis.xaxis.tick_top()
    axis.set_yticks([y + 0.5 for y in range(len(rows))], rows, fontsize=8)
    axis.tick_params(length=0)
    for spine in axis.spines.values():
        spine.set_visible(False)
    axis.set_title(title, fontsize=9, pad=24)
    save_figure(fig, path)  # tight_layout: the row labels are as long as the pairs' names
