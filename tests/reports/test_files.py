import json
import os
from dataclasses import replace

import pytest

import lrcheck
from lrcheck.reports.atomic import atomic_path
from lrcheck.reports.files import result_json, write_report
from lrcheck.result import Kind


@pytest.fixture(scope="module")
def report():
    return lrcheck.compare(accum=2, bs=16, epochs=1)


def test_result_json_has_the_schema_version_1_keys(report):
    data = json.loads(result_json(report))
    assert data["schema_version"] == 1 and data["verdict"] == "pass"  # accum 2 x bs 16 is right
    for check in data["checks"]:
        assert set(check) >= {"name", "status", "max_abs_diff", "first_divergence", "detail"}
    for role in ("reference", "candidate"):
        run = data["runs"][role]
        assert set(run) >= {"spec", "updates", "metrics"}
        assert set(run["updates"][0]) >= {"step", "lr", "loss", "samples_seen", "scheduler_steps"}
        assert set(run["metrics"]) == {"accuracy", "f1_macro"}
    assert {"torch", "device", "world_size"} <= set(data["environment"])


def test_the_same_run_twice_gives_identical_traces(report):
    again = lrcheck.compare(accum=2, bs=16, epochs=1)
    first, second = json.loads(result_json(report)), json.loads(result_json(again))
    for role in ("reference", "candidate"):
        assert first["runs"][role]["updates"] == second["runs"][role]["updates"]
        assert first["runs"][role]["metrics"] == second["runs"][role]["metrics"]


def test_write_report_writes_every_file_and_leaves_no_temporaries(report, tmp_path):
    write_report(report, tmp_path)
    names = sorted(os.listdir(tmp_path))
    assert names == ["loss.png", "lr.png", "metrics.png", "report.html", "report.md",
                     "result.json"]
    assert "| lr | pass |" in (tmp_path / "report.md").read_text()


def test_save_report_writes_them_where_the_library_user_says(report, tmp_path):
    saved = lrcheck.save_report(report, str(tmp_path / "out"))
    assert saved == tmp_path / "out"
    assert json.loads((saved / "result.json").read_text()) == json.loads(result_json(report))


@pytest.mark.invalid_files  # a result.json of "old": what atomic_path keeps
def test_atomic_path_keeps_the_old_file_when_writing_fails(tmp_path):
    target = tmp_path / "result.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk full")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["result.json"]


def test_result_json_is_strict_json_even_for_a_run_that_diverged(report):
    from lrcheck.reports.files import to_json

    text = to_json({"loss": float("nan"), "lr": [float("inf"), 0.1]})
    assert json.loads(text) == {"loss": None, "lr": [None, 0.1]}
    first = replace(report.candidate.updates[0], loss=float("nan"), lr=(float("inf"),))
    diverged = replace(report, candidate=replace(
        report.candidate, updates=[first, *report.candidate.updates[1:]]))

    def refuse(constant):
        raise AssertionError(f"{constant} in result.json: not strict JSON")

    data = json.loads(result_json(diverged), parse_constant=refuse)
    assert data["runs"]["candidate"]["updates"][0]["loss"] is None
    assert data["runs"]["candidate"]["updates"][0]["lr"] == [None]


def test_an_out_folder_that_cannot_be_made_is_bad_input(tmp_path):
    from lrcheck.errors import SpecError
    from lrcheck.reports.files import prepare_out

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(SpecError, match="cannot create the folder"):
        prepare_out(blocker / "sub")


def test_prepare_file_makes_a_missing_folder_and_leaves_nothing_else(tmp_path):
    from lrcheck.errors import SpecError
    from lrcheck.reports.files import prepare_file

    path = tmp_path / "baselines" / "ci.json"
    assert prepare_file(path, "--save-baseline") == path
    assert os.listdir(tmp_path / "baselines") == []  # the probe file is gone, none written
    with pytest.raises(SpecError, match="is a folder; give a file name"):
        prepare_file(tmp_path / "baselines", "--save-baseline")


def test_report_md_escapes_pipes_in_table_cells(make_report):
    from lrcheck.reports.files import report_markdown

    text = report_markdown(make_report(lr_shift=0.01))
    row = next(line for line in text.splitlines() if line.startswith("| lr |"))
    assert "max \\|ΔLR\\|" in row and "/ΔLR/" not in row
    assert row.replace("\\|", "").count("|") == 6  # five cells


class Recorded:
    """A renderer that keeps the plots it is sent instead of drawing them."""

    def __init__(self):
        self.plots = []

    def draw(self, plots):
        self.plots += plots


def test_a_report_leaves_no_stale_file_of_an_earlier_report_in_its_folder(make_report, tmp_path):
    from lrcheck.reports.files import write_incomplete
    from lrcheck.result import IncompleteResult

    earlier = make_report()  # a comparison: result.json, report.md, report.html, three plots
    write_report(earlier, tmp_path, Recorded())
    for name in ("lr.png", "loss.png", "metrics.png", "report.html"):  # as if drawn
        (tmp_path / name).write_text("from the earlier report")
    for name in ("notes.txt", "mine.png"):
        (tmp_path / name).write_text("the user's")
    trace = make_report()
    trace.kind = Kind.TRACE  # draws lr.png only
    renderer = Recorded()
    write_report(trace, tmp_path, renderer)
    assert [p.path.name for p in renderer.plots] == ["lr.png", "report.html"]  # in this order
    assert sorted(os.listdir(tmp_path)) == ["lr.png", "mine.png", "notes.txt", "report.html",
                                            "report.md", "result.json"]
    assert json.loads((tmp_path / "result.json").read_text())["files"] == [
        "lr.png", "report.html", "report.md", "result.json"]
    incomplete = IncompleteResult(trace.pair, trace.reference, trace.candidate, None, "Ctrl-C")
    write_incomplete(incomplete, tmp_path)  # no report nor plots: none may stay from before
    assert sorted(os.listdir(tmp_path)) == ["mine.png", "notes.txt", "result.json"]
    assert json.loads((tmp_path / "result.json").read_text())["files"] == ["result.json"]


# Someone else's result.json; and a diff's report of a PairSpec (the kind changed by hand).
@pytest.mark.invalid_files
@pytest.mark.parametrize("before", [None, "trace", "not lrcheck's", "a list of other names"])
def test_a_file_of_the_users_named_like_a_report_file_is_never_removed(before, make_report,
                                                                       tmp_path):
    """``lrcheck diff A B --out .`` writes no metrics.png: the user's own stays, whether the
    folder held no report, one that wrote no metrics.png, or a result.json of someone else's."""
    if before == "trace":
        trace = make_report()
        trace.kind = Kind.TRACE
        write_report(trace, tmp_path, Recorded())
    elif before == "not lrcheck's":
        (tmp_path / "result.json").write_text('{"files": "metrics.png"}')
    elif before == "a list of other names":
        (tmp_path / "result.json").write_text('{"files": ["../metrics.png", "notes.txt"]}')
        (tmp_path.parent / "metrics.png").write_text("the user's, above the folder")
    for name in ("metrics.png", "notes.txt"):
        (tmp_path / name).write_text("the user's")
    diff = make_report()
    diff.kind = Kind.DIFF  # lr.png and loss.png, no metrics.png
    write_report(diff, tmp_path, Recorded())
    for name in ("metrics.png", "notes.txt"):
        assert (tmp_path / name).read_text() == "the user's"
    if before == "a list of other names":
        assert (tmp_path.parent / "metrics.png").exists()


def test_report_md_says_1_epoch_not_1_epochs(make_report):
    from dataclasses import replace

    from lrcheck.reports.files import report_markdown

    report = make_report()
    report.pair = replace(report.pair, candidate=report.pair.candidate.replace(epochs=1),
                          reference=report.pair.reference.replace(epochs=1))
    assert ", 1 epoch, " in report_markdown(report)


@pytest.mark.parametrize("choice, passing, failing", [
    ("all", {"lr.png", "loss.png", "metrics.png"}, {"lr.png", "loss.png", "metrics.png"}),
    ("failed", set(), {"lr.png", "loss.png", "metrics.png"}),
    ("none", set(), set()),
])
def test_a_suites_plots_choice_draws_the_pngs_of_the_pairs_it_names(make_report, tmp_path,
                                                                     choice, passing, failing):
    from lrcheck.reports.files import ReportFiles

    kept = Recorded()
    for name, report, expected in (("ok", make_report(), passing),
                                   ("bad", make_report(lr_shift=0.01), failing)):
        drawn = ReportFiles(kept, choice).report(report, tmp_path / name)
        assert set(drawn) == expected
        assert {p.path.name for p in kept.plots if p.path.parent.name == name} == (
            expected | {"report.html"} if expected else set())
        listed = json.loads((tmp_path / name / "result.json").read_text())["files"]
        assert set(listed) == {"result.json", "report.md", "report.html", *expected}
        if not expected:  # the page is written at once, every plot there without a PNG
            page = (tmp_path / name / "report.html").read_text()
            assert "<img" not in page and 'id="plot-lr"' in page and 'id="plot-loss"' in page
            assert "The test split after every epoch." in page
            assert "![" not in (tmp_path / name / "report.md").read_text()
