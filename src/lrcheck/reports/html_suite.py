"""index.html of a suite: the verdict, then the matrix of pairs × checks (each pair linked to its
own report.html, each failed check to its first divergence there), the expectations met and
unmet, the regressions against the baseline, and the environment. Tables only, no script: it
reads the same with JavaScript off."""

from __future__ import annotations

from urllib.parse import quote

from lrcheck.reports.html import Cell, Html, esc, grid, join, page, status, tag
from lrcheck.reports.suite_table import matrix_checks
from lrcheck.suite.outcome import NOT_RUN, OK, PairOutcome, SuiteResult
from lrcheck.words import plural


def _number(value: float | None, fmt: str) -> tuple[str, str]:
    return ("—", "num") if value is None else (fmt.format(value), "num")


def _page_link(outcome: PairOutcome, anchor: str = "") -> str | None:
    """The pair's report.html, relative to index.html (result.json of an interrupted pair)."""
    if outcome.folder is None:
        return None
    file = "report.html" if outcome.report is not None else "result.json"
    return f"{quote(outcome.folder, safe='')}/{file}{anchor}"


def _matrix(result: SuiteResult) -> Html:
    columns = matrix_checks(result)
    rows, marks = [], []
    for o in result.outcomes:
        link = _page_link(o)
        name = tag("a", o.entry.name, href=link) if link else esc(o.entry.name)
        checks = {c.name: c for c in o.report.checks} if o.report else {}
        cells: list[Cell] = [tag("code", name), o.entry.expect, status(o.verdict),
                            status(o.status)]
        for check_name in columns:
            check = checks.get(check_name)
            if check is None:
                cells.append("—")
                continue
            word, css = status(check.status)
            content: str | Html = word
            if check.first_divergence is not None and check.status == "fail":
                plot = "loss" if check.name == "loss" else "lr"
                content = join([word, " ", tag("a", f"@{check.first_divergence}", href=_page_link(
                    o, f"#update-{check.first_divergence}-{plot}"), title=check.detail)])
            cells.append((content, css))
        d = o.deltas()
        cells += [_number(d["max_abs_dlr"], "{:.3g}"), _number(d["accuracy"], "{:+.4f}"),
                  _number(d["f1_macro"], "{:+.4f}"), o.baseline]
        rows.append(cells)
        marks.append(None if o.status == OK else "problem")
    return grid(["pair", "expect", "verdict", "outcome", *columns, "max |ΔLR|",
                 "Δ accuracy", "Δ macro-F1", "baseline"], rows, row_classes=marks,
                caption="Each pair links to its own report; a failed check's @k to its first "
                        "divergence there.")


def _expectations(result: SuiteResult) -> Html:
    rows = [[tag("code", o.entry.name), o.entry.expect, status(o.verdict),
             ("met", "status s-pass") if o.met else ("unmet", "status s-fail"),
             o.reason] for o in result.outcomes]
    met = sum(o.met for o in result.outcomes)
    return join([tag("h2", "Expectations", id="expectations"),
                 tag("p", f"{met} of {plural(len(result.outcomes), 'pair')} met their "
                          "expectation."),
                 grid(["pair", "expect", "verdict", "met", "why"], rows)])


def _regressions(result: SuiteResult) -> Html:
    parts = [tag("h2", "Regressions against the baseline", id="regressions")]
    if result.baseline_path is None:
        return join([*parts, tag("p", "No baseline given (--baseline).")])
    parts.append(tag("p", join(["Baseline ", tag("code", result.baseline_path), "."])))
    rows = [[tag("code", o.entry.name), r.what, r.detail] for o in result.outcomes
            for r in o.regressions]
    parts.append(grid(["pair", "what", "detail"], rows) if rows
                 else tag("p", "None: every pair compared with the baseline is as it was."))
    new = [o.entry.name for o in result.outcomes if o.baseline == "new"]
    if new:
        parts.append(tag("p", "Not in the baseline (new): " + ", ".join(new) + "."))
    if result.baseline_missing:
        parts.append(tag("p", "In the baseline but not in this suite: "
                              + ", ".join(result.baseline_missing) + "."))
    return join(parts)


def _failed_checks(result: SuiteResult) -> Html:
    rows = [[tag("code", o.entry.name), tag("code", c.name),
             "yes" if o.entry.expect == "fail" else "no", (c.detail, "detail")]
            for o in result.outcomes if o.report for c in o.report.checks if c.status == "fail"]
    if not rows:
        return Html("")
    return join([tag("h2", "Failed checks", id="failed"),
                 grid(["pair", "check", "expected", "detail"], rows)])


def suite_page(result: SuiteResult) -> str:
    """index.html of ``result``."""
    counts = result.counts()
    head = [tag("h1", f"{result.verdict.upper()} · lrcheck suite {result.suite.path}"),
            tag("p", f"{counts[OK]} of {plural(counts['pairs'], 'pair')} as expected "
                     f"({counts['unexpected']} unexpected, "
                     f"{plural(counts['regression'], 'regression')}, "
                     f"{plural(counts['error'], 'error')}) in {result.seconds:.1f} s.")]
    if result.interrupted:
        head.append(tag("p", f"{result.interrupted}; {counts[NOT_RUN]} not run."))
    environment = [[tag("code", k), str(v)] for k, v in result.environment_dict().items()]
    body = join([tag("header", join(head), class_=f"verdict {result.verdict}"),
                 tag("h2", "Pairs × checks", id="matrix"), _matrix(result),
                 _expectations(result), _regressions(result), _failed_checks(result),
                 tag("h2", "Environment", id="environment"), grid(["", "value"], environment)])
    return page(f"lrcheck suite {result.verdict.upper()}: {result.suite.path}", body,
                footer=("lrcheck · suite.json, summary.md and junit.xml beside this page "
                            "hold the same results"), wide=True)
