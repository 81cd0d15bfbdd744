"""Running a suite: a pair whose report cannot be saved is an error, not a pass. Small real
trainings."""

from __future__ import annotations

import textwrap

import pytest

from lrcheck.suite.run import run_suite
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
def test_a_pair_whose_report_cannot_be_saved_is_an_error_not_a_pass(tmp_path, suite):
    (tmp_path / "R" / "b" / "result.json").mkdir(parents=True)  # result.json cannot be written
    result = run_suite(suite, tmp_path / "R")
    assert [o.status for o in result.outcomes] == ["ok", "error", "ok"]
    b = result.outcomes[1]
    assert b.reason == (f"no result: its report could not be saved: cannot write "
                        f"{str(tmp_path / 'R' / 'b' / 'result.json')!r}: Is a directory")
    assert b.to_dict()["folder"] is None and b.exit_code == 2
    assert result.exit_code == 2 and result.verdict == "fail"
