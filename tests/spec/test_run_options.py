"""``RunOptions``: ``lrcheck run``'s options, one record that all five entry points build. Every
field, given a value other than its default, reaches ``command_pair.run_commands`` through the
command line, ``lrcheck.run_commands``, ``lrcheck.testing.assert_runs_equivalent``, the pytest
fixture ``lrcheck_runs`` and a suite's ``[[pair]]`` of commands (nothing runs: the recording is
replaced by one that keeps the options it got)."""

from pathlib import Path

import pytest

from lrcheck.errors import SpecError
from lrcheck.spec import DIFF_DTYPE, CommandPair, Tolerances
from lrcheck.spec.run_options import OPTION_NAMES, RunOptions, options_from_dict, options_to_dict
from tests.cli.helpers import invoke

# Each field: as a Python caller gives it, as a suite file's line, as the command line's flags,
# and the value RunOptions holds. A field added to RunOptions fails the first test until it is
# here, and then each entry point's until it reaches it.
TOL = Tolerances.for_dtype(DIFF_DTYPE, lr=1e-3)
GIVEN = {
    "samples": (32, "samples_per_update = 32", ["--samples", "32"], 32),
    "fingerprint_every": (3, "fingerprint_every = 3", ["--fingerprint-every", "3"], 3),
    "tolerances": (TOL, "tol_lr = 1e-3", ["--tol-lr", "1e-3"], TOL),
    "free": (True, "free = true", ["--free"], True),
    "strict": (True, "strict = true", ["--strict"], True),
    "timeout": (12.5, "timeout = 12.5", ["--timeout", "12.5"], 12.5),
    "deterministic": (True, "deterministic = true", ["--deterministic"], True),
    "ref_logs": ("ref/tb", 'ref_logs = "ref/tb"', ["--ref-logs", "ref/tb"], Path("ref/tb")),
    "logs": (Path("cand/tb"), 'logs = "cand/tb"', ["--logs", "cand/tb"], Path("cand/tb")),
    "tags": ({"lr": "LearningRate"}, 'tags = {lr = "LearningRate"}',
             ["--tag", "lr=LearningRate"], ("lr=LearningRate",)),
    "log_steps": ("updates-from-1", 'log_steps = "updates-from-1"',
                  ["--log-steps", "updates-from-1"], "updates-from-1"),
    "interrupt_at": (4, "interrupt_at = 4", ["--interrupt-at", "4"], 4),
    "interrupt_after_micro": (2, "interrupt_after_micro = 2",
                              ["--interrupt-after-micro", "2"], 2),
    "resume": (["python", "b.py", "--resume", "c.pt"], 'resume = "python b.py --resume c.pt"',
               ["--resume", "python b.py --resume c.pt"], "python b.py --resume c.pt"),
    "interrupt_signal": ("KILL", 'interrupt_signal = "KILL"', ["--interrupt-signal", "KILL"],
                         "KILL"),
    "grace": (2.5, "grace = 2.5", ["--grace", "2.5"], 2.5),
}
PYTHON = {name: given[0] for name, given in GIVEN.items()}
EXPECTED = RunOptions(**{name: given[3] for name, given in GIVEN.items()})


def test_every_field_has_a_value_here_other_than_its_default():
    assert tuple(GIVEN) == OPTION_NAMES
    default = RunOptions()
    assert [n for n in OPTION_NAMES if getattr(EXPECTED, n) == getattr(default, n)] == []


@pytest.fixture
def received(monkeypatch, make_report):
    """The options ``command_pair.run_commands`` gets, one per call; it records nothing and
    answers a passing report, which is not written (no plots drawn)."""
    from lrcheck import api
    from lrcheck import command_pair as pairs

    got: list[RunOptions] = []

    def run_commands(reference, candidate, out, options=pairs.NO_OPTIONS, *, echo=None):
        got.append(options)
        return make_report()

    monkeypatch.setattr(pairs, "run_commands", run_commands)
    monkeypatch.setattr(api, "save_report", lambda report, out: Path(out))
    return got


def test_the_command_line_gives_every_option(received, tmp_path):
    flags = [word for given in GIVEN.values() for word in given[2]]
    result = invoke("run", "--quiet", "--out", str(tmp_path / "r"), *flags,
                    "python a.py", "python b.py")
    assert result.exit_code == 0
    assert received == [EXPECTED]


def test_the_api_takes_every_option_as_a_keyword_or_as_options(received, tmp_path):
    from lrcheck import api

    api.run_commands("python a.py", "python b.py", tmp_path, **PYTHON)
    api.run_commands("python a.py", "python b.py", tmp_path, EXPECTED)
    api.run_commands("python a.py", "python b.py", tmp_path, RunOptions(), **PYTHON)
    assert received == [EXPECTED] * 3


def test_assert_runs_equivalent_takes_every_option(received, tmp_path):
    from lrcheck.testing import assert_runs_equivalent

    assert_runs_equivalent("python a.py", ["python", "b.py"], out=tmp_path / "a", **PYTHON)
    assert received == [EXPECTED]


def test_the_pytest_fixture_takes_every_option(received, lrcheck_runs):
    lrcheck_runs("python a.py", "python b.py", **PYTHON)
    assert received == [EXPECTED] and lrcheck_runs.used == [lrcheck_runs.folder]


def test_a_suite_pair_of_commands_takes_every_option_and_runs_with_it(received, tmp_path,
                                                                      monkeypatch):
    from lrcheck import command_pair as pairs
    from lrcheck.reports.files import ReportFiles
    from lrcheck.suite.run import run_pairs
    from lrcheck.suite.spec import load_suite

    path = tmp_path / "ci.toml"
    lines = "\n".join(given[1] for given in GIVEN.values())
    path.write_text(f'[[pair]]\nref_command = "python a.py"\ncommand = "python b.py"\n{lines}\n')
    (entry,) = load_suite(path).entries
    assert entry.pair == CommandPair("python a.py", "python b.py", EXPECTED)
    assert CommandPair.from_dict(entry.pair.to_dict()) == entry.pair
    keep = pairs.run_commands

    def stop(*args, **kwargs):  # the options kept; the suite stops there, writing no report
        keep(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(pairs, "run_commands", stop)
    run_pairs(load_suite(path), tmp_path / "R", files=ReportFiles())
    assert received == [EXPECTED]


def test_the_dict_form_keeps_the_defaults_out_and_every_other_value():
    assert options_to_dict(RunOptions()) == {
        "samples": None, "tolerances": options_to_dict(RunOptions())["tolerances"],
        "deterministic": False}
    given = options_to_dict(EXPECTED)
    assert given["interrupt"] == {"at": 4, "resume": "python b.py --resume c.pt",
                                  "signal": "KILL", "grace": 2.5, "micro": 2}
    assert (given["logs"], given["tags"], given["timeout"]) == ("cand/tb", ["lr=LearningRate"],
                                                               12.5)
    assert options_from_dict(given) == EXPECTED


@pytest.mark.parametrize(("keywords", "message"), [
    ({"samples": 0}, "--samples must be a whole number >= 1, got 0"),
    ({"fingerprint_every": -1}, "--fingerprint-every must be a whole number >= 0, got -1"),
    ({"free": "yes"}, "free must be true or false, got 'yes'"),
    ({"timeout": -1}, r"--timeout must be a number of seconds >= 0 \(0: wait for ever\)"),
    ({"logs": 3}, "logs must be a path, got 3"),
    ({"tags": "lr=LearningRate"}, "tags must be a list of 'quantity=tag' or a mapping"),
    ({"interrupt_at": 3}, "--interrupt-at and --resume go together"),
    ({"interrupt_at": 3, "resume": "python b.py", "grace": -1}, "--grace must be a number"),
    ({"tolerance": TOL}, r"lrcheck.caller: unknown keyword 'tolerance' \(did you mean "
                         r"'tolerances'\?\); it takes lrcheck run's options: samples, "),
])
def test_a_bad_value_is_a_spec_error_naming_it(keywords, message):
    with pytest.raises(SpecError, match=message):
        RunOptions.of(caller="caller", **keywords)


def test_options_that_are_not_a_run_options_are_a_spec_error():
    with pytest.raises(SpecError, match=r"lrcheck.caller: options must be a RunOptions, got "
                                        r"dict; give the options as keywords"):
        RunOptions.of({"samples": 32}, caller="caller")  # type: ignore[arg-type]


def test_a_timeout_of_0_is_none_and_tolerances_none_the_default():
    assert RunOptions.of(caller="c", timeout=0, tolerances=None) == RunOptions(timeout=None)
