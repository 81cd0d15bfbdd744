"""``lrcheck trace``."""

import json

import pytest

from tests.cli.helpers import invoke


@pytest.mark.slow
def test_ctrl_c_in_trace_saves_what_was_simulated_and_exits_130(tmp_path, schedules_file):
    result = invoke("trace", "--samples", "1000", "--scheduler",
                    f"{schedules_file}:interrupted_at_step_50", "--out", str(tmp_path))
    assert result.exit_code == 130
    assert str(tmp_path / "result.json") in result.stderr and "Traceback" not in result.output
    data = json.loads((tmp_path / "result.json").read_text())
    assert data["verdict"] == "incomplete" and data["checks"] == []
    assert "interrupted (Ctrl-C) while simulating the reference schedule" in data["incomplete"]
    reference, candidate = data["runs"]["reference"], data["runs"]["candidate"]
    assert [u["step"] for u in reference["updates"]] == list(range(50))
    assert reference["stopped"] == "interrupted after 50 of 125 updates"
    assert candidate["updates"] == []
    assert candidate["stopped"] == "interrupted before its first update"


def test_the_old_policy_accelerate_is_a_note_in_trace_as_in_compare(tmp_path):
    result = invoke("trace", "--samples", "100", "--policy", "accelerate", "--quiet",
                    "--out", str(tmp_path / "t"))
    assert result.exit_code == 0
    assert result.stderr.splitlines()[0] == (
        "lrcheck: note: --policy accelerate is now --framework accelerate --ref-framework plain")
    assert "FutureWarning" not in result.output
