"""A sparse embedding trained by ``SparseAdam`` under ``lrcheck run``: both commands train to
their end (the recorder's hooks used to raise ``linalg_vector_norm`` on SparseCPU inside the
user's ``optimizer.step()``), and the correct pair passes in lockstep, its sparse gradients
judged. Slow: two recorded commands."""

import json
import sys
from pathlib import Path

import pytest

from lrcheck import api
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_sparse.py"


def test_a_sparse_adam_pair_trains_to_its_end_and_passes(tmp_path):
    py = sys.executable
    report = api.run_commands(f"{py} {SCRIPT}", f"{py} {SCRIPT} --micro 8 --accum 4", tmp_path)
    checks = checks_by_name(report)
    print(report.verdict, {name: (c.status, c.detail) for name, c in checks.items()})
    assert report.verdict.value == "pass"
    assert checks["grads"].status == "pass" and checks["params"].status == "pass"
    assert not any(name.startswith("recording") for name in checks)
    for side in ("reference", "candidate"):
        assert "done 12" in (tmp_path / side / "output.log").read_text()
        about = json.loads((tmp_path / side / "run.json").read_text())
        assert about["exit_code"] == 0 and about["updates"]["rank0.jsonl"] == 12
        assert all(p["recording_off"] is None for p in about["processes"])

