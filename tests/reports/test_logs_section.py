"""The report's logs section (``reports.logs``): findings in result.json's ``logs``, the table,
report.md and report.html; never the verdict, and a training failure said apart from them."""

import io
import json

from rich.console import Console

from lrcheck.logs.model import Quantity
from lrcheck.logs.truth import DIFFERS, MATCHES, LogFinding
from lrcheck.reports.files import report_markdown, result_json
from lrcheck.reports.kinds import render

SCALED = LogFinding("candidate", Quantity.LOSS, DIFFERS,
                    "the logged loss is 2.000× the loss that was differentiated, at every "
                    "update: a logging scale, the training matches", 0, "out/tb")
LR = LogFinding("reference", Quantity.LR, MATCHES,
                "the logged LR is the LR each update used, at the 5 updates logged", None, "tb")


def _printed(report):
    console = Console(file=io.StringIO(), width=200)
    console.print(render(report))
    return console.file.getvalue()


def test_findings_are_a_section_of_their_own_that_leaves_the_verdict(make_report):
    plain, report = make_report(), make_report()
    report.logs = [LR, SCALED]
    assert (report.verdict, report.exit_code) == (plain.verdict, plain.exit_code) == ("pass", 0)
    data = json.loads(result_json(report))
    assert data["schema_version"] == 1 and data["verdict"] == "pass"
    assert data["logs"] == [f.to_dict() for f in (LR, SCALED)]
    assert data["logs"][1] == {"side": "candidate", "quantity": "loss", "status": "differs",
                               "says": SCALED.says, "first_update": 0, "path": "out/tb"}
    assert "logs" not in json.loads(result_json(plain))  # no log read: no key
    text = report_markdown(report)
    assert "## Logs against the recording" in text and "2.000×" in text
    assert "what differs here is what was logged, not what was trained" in text
    printed = _printed(report)
    assert "logs against the recording" in printed and "2.000×" in printed
    assert "logs against the recording" not in _printed(plain)


def test_a_training_failure_is_said_apart_from_the_logs(make_report):
    report = make_report(lr_shift=0.01)
    report.logs = [SCALED]
    assert report.verdict == "fail" and report.exit_code == 1
    text = report_markdown(report)
    assert "The training checks failed on their own (lr" in text
    assert "the logs differ from the recording besides, which is not the cause" in text


def test_report_html_has_the_section(make_report, tmp_path):
    from lrcheck.reports.html_report import report_page

    report = make_report()
    report.logs = [SCALED]
    page = report_page(report, tmp_path / "report.html", [])
    page.draw()
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert 'id="logs"' in html and "2.000×" in html and "differs" in html
