"""``procs.determinism``: ``--deterministic`` applied around lrcheck's own runs and read back;
``compare(deterministic=True)`` on the CPU, in this process and in torchrun's ranks."""

import os

import pytest
import torch

from lrcheck import compare
from lrcheck.procs.determinism import applied, described_here, read
from lrcheck.reports.kinds import run_settings
from lrcheck.runner.local import run_local
from lrcheck.spec import PairSpec, RunSpec
from lrcheck.spec.determinism import AT_START, DETERMINISM, ENV_VARIABLES, FLAGS, NO_CUDA
from tests.schema_files import errors


@pytest.fixture
def clean_environment(monkeypatch):
    """This process without --deterministic's variables (monkeypatch puts back what was)."""
    for name in ENV_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_every_flag_can_be_read_on_this_torch():
    values = {s.name: read(s.name) for s in FLAGS}
    assert set(values) == {s.name for s in FLAGS}
    enabled = torch.are_deterministic_algorithms_enabled()
    assert values["torch.use_deterministic_algorithms"] is enabled


def test_applied_sets_every_flag_for_the_block_and_puts_them_back(clean_environment):
    before = {s.name: read(s.name) for s in FLAGS}
    assert before["torch.use_deterministic_algorithms"] is False  # torch's default
    with applied(True):
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert {s.name: read(s.name) for s in FLAGS} == {s.name: s.value for s in FLAGS}
        assert all(os.environ[name] == value for name, value in ENV_VARIABLES.items()
                   if name != "PYTHONHASHSEED")
        assert "PYTHONHASHSEED" not in os.environ  # only a process's start reads it
    assert {s.name: read(s.name) for s in FLAGS} == before
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    with applied(False):
        assert not torch.are_deterministic_algorithms_enabled()


def test_a_variable_already_set_is_kept(clean_environment, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "11")
    with applied(True):
        assert os.environ["PYTHONHASHSEED"] == "11"
    entry = described_here("cpu", 1)
    assert entry["PYTHONHASHSEED"] == ("'11', set by the command or its caller "
                                       "(--deterministic's: '0')")
    assert entry["torch.use_deterministic_algorithms"] is True  # as applied, read back
    assert not torch.are_deterministic_algorithms_enabled()  # and put back


@pytest.mark.slow
def test_a_run_trains_with_deterministic_algorithms_on_and_off_again_after(clean_environment):
    seen = []
    spec = RunSpec(epochs=1, deterministic=True)
    trace = run_local(spec, "candidate", device="cpu",
                      on_start=lambda: seen.append(torch.are_deterministic_algorithms_enabled()))
    assert seen == [True] and trace.updates
    assert not torch.are_deterministic_algorithms_enabled()
    run_local(spec.replace(deterministic=False), "candidate", device="cpu",
              on_start=lambda: seen.append(torch.are_deterministic_algorithms_enabled()))
    assert seen == [True, False]


@pytest.mark.slow
def test_compare_records_every_setting_in_the_environment(clean_environment):
    report = compare(PairSpec.build(RunSpec(epochs=1, deterministic=True)))
    assert report is not None and report.ok
    entry = report.to_dict()["environment"]["deterministic"]
    assert list(entry) == [s.name for s in DETERMINISM]
    for setting in DETERMINISM:
        if setting.needs in ("cuda", "nccl"):
            assert entry[setting.name] == NO_CUDA
    assert entry["torch.use_deterministic_algorithms"] is True
    assert entry["PYTHONHASHSEED"] == AT_START  # this process started without it
    assert report.to_dict()["runs"]["candidate"]["spec"]["deterministic"] is True
    assert "--deterministic" in run_settings(report, "digits")[3]  # report.md says it
    written = {**report.to_dict(), "files": ["result.json"]}  # as save_report adds them
    assert errors("result", written) == []
    wrong = {**report.to_dict(), "files": ["result.json"]}
    wrong["environment"]["deterministic"]["torch.use_deterministic_algorithms"] = 1
    assert errors("result", wrong) != []  # true, false or a string only


@pytest.mark.slow
def test_without_the_switch_the_environment_has_no_entry():
    report = compare(PairSpec.build(RunSpec(epochs=1)))
    assert report is not None and "deterministic" not in report.to_dict()["environment"]
    assert "--deterministic" not in run_settings(report, "digits")[3]
