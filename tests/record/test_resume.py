"""A resume inside one command (``bash -c 'python train.py --stop-after 12 --save c.pt && python
train.py --resume c.pt'``), through ``lrcheck run`` against the uninterrupted reference: the
two processes of rank 0 are joined into one timeline (``record.folder``), the correct resume
passes, and a resume that did not load its optimizer (AdamW) fails ``continuation`` at the first
resumed update, naming the cause (a scheduler not loaded, tried by hand the same way, is named
as tests/checks/test_continuation.py has it). Slow: each run is three processes importing
torch."""

import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_lockstep.py"
STOP = 12
RUN = [sys.executable, str(SCRIPT), "--updates", "24"]


@pytest.mark.parametrize("fresh", [None, "optimizer"])
def test_a_resume_in_one_command_passes_and_a_lost_part_fails_at_the_first_resumed_update(
        tmp_path, fresh):
    saved = tmp_path / "c.pt"
    cand = [*RUN, "--bs", "4", "--accum", "4"]
    resume = [*cand, "--resume", str(saved), *(["--fresh", fresh] if fresh else [])]
    line = (f"{shlex.join(cand)} --stop-after {STOP} --save {shlex.quote(str(saved))} && "
            f"{shlex.join(resume)}")
    report = api.run_commands(shlex.join([*RUN, "--bs", "16"]), shlex.join(["bash", "-c", line]),
                              tmp_path / "out")
    checks = checks_by_name(report)
    for c in report.checks:
        print(f"{c.name}: {c.status.value} at {c.first_divergence}: {c.detail}")
    joined = checks["continuation (candidate)"]
    assert "continuation (reference)" not in checks  # one process
    if fresh is None:
        assert report.ok, [c.name for c in report.checks if c.status == "fail"]
        assert checks["updates"].detail.startswith("24 in both files")
        assert joined.status == "pass" and (
            f"at update {STOP} the second process (pid ") in joined.detail
        assert ("resumed: the weights, the optimizer's state (step counter 12), the schedule "
                "(step 12) carried") in joined.detail
        assert f"from update {STOP} the candidate ran free" in joined.detail
        return
    assert not report.ok and joined.status == "fail" and joined.first_divergence == STOP
    assert ("the second process (pid " in joined.detail and "lost the optimizer's state at "
            "update 12: its step counter was 0 (a fresh optimizer, or its state_dict not "
            "loaded), the first process's ended at 12" in joined.detail)
    assert "the candidate did not resume where it stopped" in joined.detail
