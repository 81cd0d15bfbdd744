"""The suite's table: live while it runs (a row per pair: progress, then verdict and outcome), and
the same table at the end. Rendering only: the CLI decides where it is printed."""

from __future__ import annotations

from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from lrcheck.checks import CHECK_NAMES
from lrcheck.reports.table import STATUS_STYLE, status_text
from lrcheck.suite.outcome import (
    ERROR,
    INCOMPLETE,
    NOT_RUN,
    OK,
    REGRESSION,
    UNEXPECTED,
    PairOutcome,
    SuiteResult,
)
from lrcheck.suite.spec import Suite
from lrcheck.words import plural

OUTCOME_STYLE = {OK: "bold green", UNEXPECTED: "bold red", REGRESSION: "bold red",
                 ERROR: "bold red", INCOMPLETE: "bold yellow", NOT_RUN: "dim"}
OUTCOME_LABEL = {OK: "ok", UNEXPECTED: "UNEXPECTED", REGRESSION: "REGRESSION", ERROR: "ERROR",
                 INCOMPLETE: "INCOMPLETE", NOT_RUN: "NOT RUN"}


# Checks only some reports have (a GradScaler's skipped steps; a recorded command's gradient
# norm and optimizer; how often each call ran per update; in lockstep, its gradients; whether a
# pass proves anything): the suite's matrix has a column for each that some pair's report has.
OPTIONAL_CHECKS = ("optimizer", "skipped-steps", "scaler-skips", "cadence", "ema-params",
                   "grad-norm", "grads", "evidence")


def matrix_checks(result: SuiteResult) -> tuple[str, ...]:
    """The checks the suite's matrix (index.html, summary.md) has a column for: the contract's,
    then those of ``OPTIONAL_CHECKS`` that some pair has."""
    present = {c.name for o in result.outcomes if o.report for c in o.report.checks}
    return (*CHECK_NAMES, *(name for name in OPTIONAL_CHECKS if name in present))


def outcome_text(outcome: PairOutcome) -> Text:
    return Text(OUTCOME_LABEL[outcome.status], style=OUTCOME_STYLE[outcome.status])


def _delta(value: float | None, fmt: str) -> str:
    return "—" if value is None else fmt.format(value)


class SuiteBoard:
    """The state of a running suite, rendered as a Rich table (``__rich__``): give it to
    ``rich.live.Live`` and call ``progress`` and ``done`` as the suite runs."""

    def __init__(self, suite: Suite) -> None:
        self.suite = suite
        self.state: dict[int, str] = {}
        self.outcomes: dict[int, PairOutcome] = {}

    @classmethod
    def finished(cls, result: SuiteResult) -> SuiteBoard:
        board = cls(result.suite)
        for index, outcome in enumerate(result.outcomes):
            board.done(index, outcome)
        return board

    def progress(self, index: int, role: str, done: int, total: int) -> None:
        self.state[index] = f"{role} {done}/{total}"

    def done(self, index: int, outcome: PairOutcome) -> None:
        self.outcomes[index] = outcome

    def __rich__(self) -> Table:
        table = Table(title=f"lrcheck suite: {self.suite.path} "
                            f"({len(self.outcomes)}/{len(self.suite.entries)} pairs done)",
                      title_justify="left")
        columns: tuple[tuple[str, JustifyMethod], ...] = (
            ("#", "right"), ("pair", "left"), ("expect", "left"), ("verdict", "left"),
            ("outcome", "left"), ("max |ΔLR|", "right"), ("Δ acc", "right"), ("Δ F1", "right"),
            ("s", "right"), ("detail", "left"))
        for name, justify in columns:
            table.add_column(name, justify=justify, overflow="fold")
        for index, entry in enumerate(self.suite.entries):
            outcome = self.outcomes.get(index)
            if outcome is None:
                running = self.state.get(index)
                table.add_row(str(index + 1), entry.name, entry.expect,
                              Text(running or "queued", style="cyan" if running else "dim"),
                              "", "", "", "", "", "")
                continue
            d = outcome.deltas()
            verdict = (status_text(outcome.verdict) if outcome.report is not None
                       else outcome_text(outcome))
            detail = "" if outcome.status == OK and not outcome.shared_reference else (
                "reference shared" if outcome.status == OK else outcome.reason)
            table.add_row(str(index + 1), entry.name, entry.expect, verdict,
                          outcome_text(outcome), _delta(d["max_abs_dlr"], "{:.3g}"),
                          _delta(d["accuracy"], "{:+.4f}"), _delta(d["f1_macro"], "{:+.4f}"),
                          f"{outcome.seconds:.1f}", Text(detail))
        return table


def verdict_lines(result: SuiteResult) -> list[Text]:
    """The closing lines: the suite's verdict, then one per pair that did not meet its
    expectation, regressed or has no result, saying why."""
    counts = result.counts()
    head = Text("suite: ")
    head.append(result.verdict.upper(), style=STATUS_STYLE[result.verdict])
    head.append(f" — {result.interrupted}:" if result.interrupted else " —")
    head.append(f" {counts[OK]} of {plural(counts['pairs'], 'pair')} as expected"
                + (f", {counts[NOT_RUN]} not run," if result.interrupted else "")
                + f" in {result.seconds:.1f} s")
    lines = [head]
    for outcome in result.outcomes:
        if outcome.status != OK:
            line = Text("  ")
            line.append_text(outcome_text(outcome))
            line.append(f" {outcome.entry.name}: {outcome.reason}")
            lines.append(line)
    if result.baseline_missing:
        lines.append(Text(f"  note: in the baseline but not in this suite: "
                          f"{', '.join(result.baseline_missing)}", style="yellow"))
    return lines
