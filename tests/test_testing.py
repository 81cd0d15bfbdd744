"""``lrcheck.testing.assert_equivalent`` and ``assert_runs_equivalent`` as a user's pytest
would call them (the latter's runs replaced by a report built by hand: tests/test_pytest_plugin.py
runs real ones)."""

from pathlib import Path

import pytest

from lrcheck.errors import SpecError
from lrcheck.testing import assert_equivalent, assert_runs_equivalent, set_reports_root


def test_returns_the_report_when_the_pair_trains_alike():
    report = assert_equivalent(accum=2, bs=16, epochs=1)
    assert report.ok and report.pair.candidate.accum == 2


def test_fails_with_the_table_in_the_message():
    with pytest.raises(AssertionError) as info:
        assert_equivalent(accum=2, bs=16, epochs=1, policy="per-micro-batch")
    message = str(info.value)
    print(message)
    assert "does not train like its reference" in message
    assert "│ lr " in message and "FAIL" in message and "verdict: FAIL" in message


def _fake_run(monkeypatch, report):
    """``lrcheck.api.run_commands`` answering ``report`` without running anything; the calls it
    got."""
    from lrcheck import api

    calls = []

    def run_commands(reference, candidate, out, options, *, echo=None):
        calls.append((reference, candidate, Path(out), options))
        return report

    monkeypatch.setattr(api, "run_commands", run_commands)
    return calls


def test_runs_equivalent_fails_naming_each_failed_check_its_update_and_the_folder(
        tmp_path, monkeypatch, make_report):
    calls = _fake_run(monkeypatch, make_report(lr_shift=0.01))
    with pytest.raises(AssertionError) as info:
        assert_runs_equivalent(["python", "my train.py", "--bs", "32"],
                               "python train.py --accum 2", out=tmp_path / "r", samples=32)
    message = str(info.value)
    print(message)
    assert message.splitlines()[:3] == [
        "lrcheck run: the candidate does not train like the reference (verdict FAIL)",
        "  reference: python 'my train.py' --bs 32", "  candidate: python train.py --accum 2"]
    assert "\n  lr: FAIL at update 2: " in message
    assert message.endswith(f"report: {tmp_path / 'r'} (report.html, report.md, result.json)")
    assert calls[0][:3] == ("python 'my train.py' --bs 32", "python train.py --accum 2",
                            tmp_path / "r")
    assert calls[0][3].samples == 32 and calls[0][3].free is False
    assert '"verdict": "fail"' in (tmp_path / "r" / "result.json").read_text()


def test_runs_equivalent_returns_the_report_and_defaults_to_a_new_folder(
        tmp_path, monkeypatch, make_report):
    report = make_report()
    calls = _fake_run(monkeypatch, report)
    earlier = set_reports_root(tmp_path / "reports")
    try:
        assert assert_runs_equivalent("python a.py", "python b.py") is report
        assert assert_runs_equivalent("python a.py", "python b.py") is report
    finally:
        set_reports_root(earlier)
    first, second = (call[2] for call in calls)
    assert first != second and first.parent == second.parent == tmp_path / "reports"
    assert (first / "result.json").is_file()


def test_runs_equivalent_names_an_unknown_keyword_before_running_anything(monkeypatch,
                                                                          make_report):
    calls = _fake_run(monkeypatch, make_report())
    with pytest.raises(SpecError, match=r"lrcheck\.testing\.assert_runs_equivalent: unknown "
                                        r"keyword 'sample' \(did you mean 'samples'\?\); it "
                                        r"takes lrcheck run's options: samples, fingerprint_every"):
        assert_runs_equivalent("python a.py", "python b.py", sample=32)
    assert calls == []


def test_runs_equivalent_takes_an_interrupt_and_checks_it_before_running_anything(
        monkeypatch, tmp_path):
    from lrcheck.record import launch

    def never(*args, **kwargs):
        raise AssertionError("a command ran")

    monkeypatch.setattr(launch, "record_command", never)
    with pytest.raises(SpecError, match="--interrupt-at and --resume go together"):
        assert_runs_equivalent("python a.py", "python b.py", out=tmp_path, interrupt_at=3)
    with pytest.raises(SpecError, match="--grace must be a number of seconds >= 0"):
        assert_runs_equivalent("python a.py", "python b.py", out=tmp_path, interrupt_at=3,
                               resume=["python", "b.py"], grace=-1.0)
