"""``summary.md``: the suite as GitHub-flavoured Markdown (also appended to
``$GITHUB_STEP_SUMMARY``). Links to plots are relative to the report folder."""

from __future__ import annotations

from lrcheck.reports.kinds import plots_of
from lrcheck.reports.suite_table import matrix_checks
from lrcheck.suite.outcome import NOT_RUN, OK, PairOutcome, SuiteResult
from lrcheck.words import plural

STATUS_MARK = {"pass": "✅ pass", "fail": "❌ fail", "warn": "⚠️ warn", "skip": "➖ skip",
               "incomplete": "⏹️ incomplete", NOT_RUN: "➖ not run"}
OUTCOME_MARK = {OK: "✅ ok", "unexpected": "❌ unexpected", "regression": "❌ regression",
                "error": "💥 error", "incomplete": "⏹️ incomplete", NOT_RUN: "➖ not run"}
VERDICT_MARK = {"pass": "✅", "fail": "❌", "incomplete": "⏹️"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _number(value: float | None, fmt: str) -> str:
    return "—" if value is None else fmt.format(value)


def _row(outcome: PairOutcome, columns: tuple[str, ...]) -> str:
    name = outcome.entry.name
    statuses = {c.name: c.status for c in outcome.report.checks} if outcome.report else {}
    d = outcome.deltas()
    plots = "—"
    if outcome.report is not None:
        pngs = plots_of(outcome.report) if outcome.pngs is None else outcome.pngs
        plots = " · ".join([f"[report]({name}/report.html)",
                            *(f"[{p.removesuffix('.png')}]({name}/{p})" for p in pngs)])
    cells = [f"`{name}`", outcome.entry.expect, STATUS_MARK.get(outcome.verdict, "💥 error"),
             OUTCOME_MARK[outcome.status],
             *(STATUS_MARK.get(statuses.get(c, ""), "—") for c in columns),
             _number(d["max_abs_dlr"], "{:.3g}"), _number(d["accuracy"], "{:+.4f}"),
             _number(d["f1_macro"], "{:+.4f}"), plots]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def suite_markdown(result: SuiteResult) -> str:
    counts = result.counts()
    columns = matrix_checks(result)
    lines = [
        f"## {VERDICT_MARK[result.verdict]} lrcheck suite `{result.suite.path}`: "
        f"{result.verdict.upper()}",
        "",
        *([f"**{_cell(result.interrupted)}**; {counts[NOT_RUN]} not run.", ""]
          if result.interrupted else []),
        f"{counts[OK]} of {plural(counts['pairs'], 'pair')} as expected "
        f"({counts['unexpected']} unexpected, {plural(counts['regression'], 'regression')}, "
        f"{plural(counts['error'], 'error')}) in {result.seconds:.1f} s"
        + (f"; baseline `{result.baseline_path}`" if result.baseline_path else "") + ".",
        "",
        "| pair | expect | verdict | outcome | " + " | ".join(columns)
        + " | max \\|ΔLR\\| | Δ accuracy | Δ macro-F1 | plots |",
        "| --- | --- | --- | --- | " + " | ".join("---" for _ in columns)
        + " | ---: | ---: | ---: | --- |",
        *(_row(o, columns) for o in result.outcomes),
    ]
    problems = [o for o in result.outcomes if o.status != OK]
    if problems:
        lines += ["", "### Not as expected", ""]
        lines += [f"- **`{o.entry.name}`** ({OUTCOME_MARK[o.status]}): {_cell(o.reason)}"
                  for o in problems]
    if result.baseline_missing:
        lines += ["", "Note: in the baseline but not in this suite: "
                  + ", ".join(f"`{n}`" for n in result.baseline_missing)]
    failed = [(o, c) for o in result.outcomes if o.report for c in o.report.checks
              if c.status == "fail"]
    if failed:
        lines += ["", "<details><summary>Failed checks</summary>", ""]
        lines += [f"- `{o.entry.name}` **{c.name}**"
                  f"{' (expected)' if o.entry.expect == 'fail' else ''}: {_cell(c.detail)}"
                  for o, c in failed]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
