"""Running a suite: Ctrl-C stops it (the running pair kept as incomplete, the rest not run),
and a pair whose report cannot be saved is an error, not a pass. Small real trainings."""

from __future__ import annotations

import json
import signal
import textwrap

import pytest

from lrcheck.errors import Stopped
from lrcheck.reports.files import ReportFiles
from lrcheck.suite.run import run_pairs
from lrcheck.suite.spec import load_suite

# "b" and "c" share the reference (bs 16) that "a" trains.
SUITE = """
    [defaults]
    task = "wine"
    epochs = 1

    [[pair]]
    name = "a"
    accum = 2
    bs = 8

    [[pair]]
    name = "b"
    accum = 4
    bs = 4

    [[pair]]
    name = "c"
    accum = 8
    bs = 2
"""


@pytest.fixture
def suite(tmp_path):
    path = tmp_path / "ci.toml"
    path.write_text(textwrap.dedent(SUITE))
    return load_suite(path)


@pytest.mark.slow
def test_ctrl_c_stops_the_suite_keeps_the_running_pair_and_lists_the_rest(tmp_path, suite):
    seen = []

    def progress(index, role, done, total):
        seen.append(index)
        if index == 1 and done == 2:  # Ctrl-C during pair "b", after 2 candidate updates
            raise KeyboardInterrupt

    ended = []
    result = run_pairs(suite, tmp_path / "R", files=ReportFiles(), on_progress=progress,
                       on_done=lambda i, o: ended.append((i, o.status)))
    assert max(seen) == 1  # "c" never started
    assert result.interrupted == "interrupted (Ctrl-C) during pair 2 of 3 ('b')"
    assert (result.exit_code, result.verdict) == (130, "incomplete")
    assert ended == [(0, "ok"), (1, "incomplete"), (2, "not_run")]
    b = result.outcomes[1]
    assert b.reason.startswith("interrupted (Ctrl-C) during the candidate run; reference "
                               "finished, candidate interrupted after 2 of ")
    saved = json.loads((tmp_path / "R" / "b" / "result.json").read_text())
    assert saved["verdict"] == "incomplete"
    assert len(saved["runs"]["candidate"]["updates"]) == 2
    assert json.loads((tmp_path / "R" / "a" / "result.json").read_text())["verdict"] == "pass"
    assert not (tmp_path / "R" / "c").exists()


@pytest.mark.slow
def test_a_pair_whose_report_cannot_be_saved_is_an_error_not_a_pass(tmp_path, suite):
    (tmp_path / "R" / "b" / "result.json").mkdir(parents=True)  # result.json cannot be written
    result = run_pairs(suite, tmp_path / "R", files=ReportFiles())
    assert [o.status for o in result.outcomes] == ["ok", "error", "ok"]
    b = result.outcomes[1]
    assert b.reason == (f"no result: its report could not be saved: cannot write "
                        f"{str(tmp_path / 'R' / 'b' / 'result.json')!r}: Is a directory")
    assert b.to_dict()["folder"] is None and b.exit_code == 2
    assert result.exit_code == 2 and result.verdict == "fail"


@pytest.mark.slow
def test_a_finished_pair_keeps_no_candidate_snapshots_so_memory_does_not_grow_per_pair(
        tmp_path, suite):
    result = run_pairs(suite, tmp_path / "R", files=ReportFiles())
    for outcome in result.outcomes:
        params = outcome.report.candidate.params
        # Empty, and not a view of the snapshots (a view would keep all of them in memory).
        assert params.size == 0 and params.base is None
    assert result.outcomes[0].report.reference.params.shape[0] > 0  # the shared one stays


@pytest.mark.slow
def test_a_suite_stopped_by_sigterm_says_terminated_not_ctrl_c(tmp_path, suite):
    def progress(index, role, done, total):
        if index == 1 and done == 2:  # what lrcheck's SIGTERM handler raises, during pair "b"
            raise Stopped(signal.SIGTERM)

    result = run_pairs(suite, tmp_path / "R", files=ReportFiles(), on_progress=progress)
    assert result.interrupted == "terminated (SIGTERM) during pair 2 of 3 ('b')"
    assert result.outcomes[1].reason.startswith("terminated (SIGTERM) during the candidate run")
    assert [o.status for o in result.outcomes] == ["ok", "incomplete", "not_run"]


MISSING_FACTORY = """
    [defaults]
    task = "wine"
    epochs = 1

    [[pair]]
    name = "builtin"
    accum = 2
    bs = 8

    [[pair]]
    name = "mine"
    accum = 2
    bs = 8
    scheduler = "{factory}"
"""


@pytest.mark.parametrize("factory,why", [
    ("missing.py:make", "no file 'missing.py'"),
    ("no_such_package_for_lrcheck.schedules:make", "cannot import"),
    ("json:make", "'json' has no callable 'make'"),
])
def test_a_missing_scheduler_factory_names_the_suite_file_and_the_entry(tmp_path, factory, why):
    from lrcheck.errors import SpecError
    from lrcheck.suite.run import prepare

    path = tmp_path / "ci.toml"
    path.write_text(textwrap.dedent(MISSING_FACTORY.format(factory=factory)))
    with pytest.raises(SpecError) as info:
        prepare(load_suite(path), tmp_path / "R")
    message = str(info.value)
    assert message.startswith(f"{path}: [[pair]] #2 ('mine'), key 'scheduler': {factory!r}: ")
    assert why in message and "--scheduler" not in message


def test_ctrl_c_during_a_pair_of_commands_stops_the_suite_and_says_where(tmp_path, monkeypatch):
    from lrcheck import command_pair as pairs

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pairs, "run_commands", interrupted)
    path = tmp_path / "ci.toml"
    path.write_text('[[pair]]\nname = "mine"\nref_command = "python a.py"\n'
                    'command = "python b.py"\n[[pair]]\nname = "after"\naccum = 2\n')
    result = run_pairs(load_suite(path), tmp_path / "R", files=ReportFiles())
    mine, after = result.outcomes
    assert mine.interrupted == ("interrupted (Ctrl-C) while its commands ran; what they "
                                "recorded is in its folder")
    assert after.not_run and result.exit_code == 130
    assert result.interrupted == "interrupted (Ctrl-C) during pair 1 of 2 ('mine')"


def test_a_pair_of_commands_reads_its_logs_as_its_tags_and_log_steps_say(tmp_path, monkeypatch):
    from lrcheck import command_pair as pairs
    from lrcheck.logs.model import Quantity
    from lrcheck.logs.read import reading

    seen = {}

    def stop(reference, candidate, out, options):
        seen["options"] = options
        raise KeyboardInterrupt

    monkeypatch.setattr(pairs, "run_commands", stop)
    path = tmp_path / "ci.toml"
    path.write_text('[[pair]]\nref_command = "python a.py"\ncommand = "python b.py"\n'
                    'tags = {lr = "LearningRate"}\nlog_steps = "updates-from-1"\n')
    run_pairs(load_suite(path), tmp_path / "R", files=ReportFiles())
    stated = reading(seen["options"].tags, seen["options"].log_steps)
    assert stated.tags == {Quantity.LR: "LearningRate"} and stated.steps.first == 1
