"""Effect-only bugs in users' own scripts, one family of framework each (tests/fixtures/user_*.py),
through ``lrcheck run``'s default: the two commands side by side, the candidate in lockstep.
Each bug acts at one update K and leaves the LR right: ``--scale-grad-at K`` (update K's
gradient scaled by 1 + 1e-3, as each framework lets a user touch it) and ``--skip-zero-grad-at
K`` (the gradients not zeroed once, before update K, where each framework zeroes them); where a
framework zeroes the gradients its own way, one candidate carries both bugs, at 5 and at 9: in
lockstep each update starts from the reference's state, so each bug is a difference of its own,
named at its update. The correct accumulation pair passes (Lightning and DeepSpeed clipping as
each does, once per update: ``cadence`` counts it; clipping by hand after every backward
instead fails it in test_launchers.py and test_sharded.py); each bug fails at K. Where
lockstep cannot load (ZeRO 2, FSDP2: sharded parameters) the candidate runs free and the
fingerprints judge: there the bugs that fail at K today are tested here (FSDP2's correct pair
and ZeRO 3's pass in test_sharded.py). Slow: every run is two fresh processes (or process
groups) that import torch and a framework."""

import json
import re
import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from lrcheck.recorder import read_records
from tests.helpers import checks_by_name

pytestmark = pytest.mark.slow
FIXTURES = Path(__file__).parents[1] / "fixtures"
PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
deepspeed = pytest.mark.deepspeed
SCALE_AT, SKIP_AT = 5, 9  # in the middle of runs of 16 (frameworks) and 32 updates (loops)
BUGS = {"correct": [], "scale-grad": ["--scale-grad-at", str(SCALE_AT)],
        "skip-zero-grad": ["--skip-zero-grad-at", str(SKIP_AT)]}
BUGS["both"] = [*BUGS["scale-grad"], *BUGS["skip-zero-grad"]]
# The clipping each framework does itself, where the correct pairs use it: Lightning's
# gradient_clip_val (torch's clip_grad_norm_, inside optimizer.step's closure), DeepSpeed's
# gradient_clipping (its engine's own clip_grad_norm_), the Trainer's max_grad_norm and
# accelerator.clip_grad_norm_ (Accelerate's get_total_norm, then clip_grads_with_norm_), once
# per update. A release that moves a framework's clipping or its scheduler stepping where lrcheck
# does not count them fails ``_counted_once_per_update``.
CLIP = {family: ["--clip", "0.5"] for family in ("trainer", "lightning", "accelerate",
                                                  "deepspeed")}


def _line(argv) -> str:
    return shlex.join(str(a) for a in argv)


def _run(tmp_path, ref, cand, **options):
    report = api.run_commands(_line(ref), _line(cand), tmp_path / "out", **options)
    return report, checks_by_name(report)


def _family(name: str, tmp_path: Path) -> tuple[list, list]:
    """The big-batch reference and the accumulating candidate of one family."""
    if name in ("trainer", "lightning", "accelerate"):
        run = [PY, FIXTURES / "user_frameworks.py", name]
        return ([*run, "--out", tmp_path / "ref", "--bs", "32"],
                [*run, "--out", tmp_path / "cand", "--bs", "16", "--accum", "2"])
    if name == "deepspeed":  # no ZeRO, one process: whole parameters, so lockstep
        script = FIXTURES / "user_deepspeed.py"
        return [PY, script, "--bs", "32"], [PY, script, "--bs", "16", "--accum", "2"]
    script = FIXTURES / "user_train.py"
    if name == "torchrun":  # DDP on 2 ranks
        return [PY, script, "--bs", "32"], [*TORCHRUN, script, "--bs", "8", "--accum", "2"]
    return [PY, script, "--bs", "32"], [PY, script, "--bs", "16", "--accum", "2"]


FAMILIES = ["plain", "torchrun", "trainer", "lightning", "accelerate", "deepspeed"]
# Every family's correct pair and scaled gradient; the skipped zero_grad too, in the same
# candidate, where each framework zeroes the gradients its own way (the loop's own call, DDP's
# is the same; DeepSpeed's engine too): a run is two fresh processes importing a framework,
# seconds each.
ZEROES = ("plain", "trainer", "lightning", "accelerate")


def _case(family: str, bug: str):
    """A family's pair with ``bug``, marked ``deepspeed`` where it trains through DeepSpeed."""
    return pytest.param(family, bug, id=f"{family}-{bug}",
                        marks=[deepspeed] if family == "deepspeed" else [])


CASES = [*(_case(family, "correct") for family in FAMILIES),
         *(_case(family, "both" if family in ZEROES else "scale-grad") for family in FAMILIES)]


@pytest.mark.parametrize(("family", "bug"), CASES)
def test_in_lockstep_a_correct_pair_passes_and_each_bug_fails_at_its_update(
        tmp_path, family, bug):
    if family == "deepspeed":
        pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed: "
                                                "pip install 'lrcheck[deepspeed]'")
    ref, cand = _family(family, tmp_path)
    clip = CLIP.get(family, []) if bug == "correct" else []
    report, checks = _run(tmp_path, [*ref, *clip], [*cand, *clip, *BUGS[bug]])
    grads, params = checks["grads"], checks["params"]
    assert "lockstep (" in grads.detail and "started from the reference's state" in grads.detail
    assert checks["lr"].status == "pass"  # each bug leaves the LR right
    if bug == "correct":
        assert report.ok and grads.status == "pass" and params.status == "pass"
        assert checks["evidence"].status == "pass" and checks["cadence"].status == "pass"
        # The causes, seen in the forwards and torch's loss functions, whatever runs the loop.
        assert checks["data"].status == "pass", checks["data"].detail
        assert checks["weights"].status == "pass", checks["weights"].detail
        if clip:
            assert "clip_grad_norm_ as often (1 per update)" in checks["cadence"].detail
            _counted_once_per_update(tmp_path / "out", max_norm=0.5)
        if family == "torchrun":  # the ranks agree (test_launchers.py: a rank-0-only schedule)
            _ranks_agree(checks["ranks (candidate)"])
        return
    assert not report.ok
    assert grads.status == "fail" and grads.first_divergence == SCALE_AT
    assert params.status == "fail" and params.first_divergence == SCALE_AT
    # Exactly the error put in, on a gradient read after clipping.
    at = re.search(rf"\) (\S+) > \S+ at update {SCALE_AT}, from the same state", grads.detail)
    assert at and 9.9e-4 < float(at.group(1)) < 1.01e-3
    if bug == "scale-grad":
        assert 9.9e-4 < grads.max_rel_diff < 1.01e-3
        assert "beyond it at" not in grads.detail
    else:  # the zero_grad skipped before update 9 too, each update judged from the same state
        for check in (grads, params):
            assert f"beyond it at 2 updates: {SCALE_AT}, {SKIP_AT}" in check.detail


def _ranks_agree(ranks) -> None:
    """The 2 DDP ranks of the correct torchrun candidate used one LR and made the same calls."""
    assert ranks.status == "pass", ranks.detail
    assert ranks.detail.startswith("the 2 ranks used the same LR at all 32 updates and made the "
                                   "same scheduler.step() calls; every rank made rank 0's calls "
                                   "per update (backward, clip_grad_norm_")


def _counted_once_per_update(out: Path, max_norm: float) -> None:
    """Each side's recording saw, at every update, the framework's one clip at ``max_norm``
    with its pre-clip norm, and its one ``scheduler.step()`` (after the previous update)."""
    for side in ("reference", "candidate"):
        records = read_records(out / side / "rank0.jsonl")
        assert len(records) >= 8
        assert [(r["clip_grad_norm"], r["max_norm"]) for r in records] == \
            [(1, max_norm)] * len(records), side
        assert all(r["clip_norm"] > 0 for r in records), side
        assert [r["scheduler_steps"] for r in records[1:]] == [1] * (len(records) - 1), side


@deepspeed
def test_deepspeed_zero2_free_running_a_scaled_gradient_fails_grad_norm_at_its_update(tmp_path):
    """ZeRO 2's shards cannot be loaded: the candidate runs free, float32. The gradient norm
    says where the scale entered; the parameters' fingerprints only warn (drift, from update
    11), and a skipped zero_grad cannot act at all (ZeRO 2 has moved every gradient into its
    partitions and released it before the engine's zero_grad): not tested here."""
    pytest.importorskip("deepspeed", reason="the deepspeed extra is not installed: "
                                            "pip install 'lrcheck[deepspeed]'")
    script = FIXTURES / "user_deepspeed.py"
    report, checks = _run(tmp_path, [PY, script, "--bs", "32"],
                          [*TORCHRUN, script, "--bs", "8", "--accum", "2", "--zero", "2",
                           *BUGS["scale-grad"]], fingerprint_every=1)
    assert not report.ok and "grads" not in checks
    assert "free-running" in checks["params"].detail
    norm = checks["grad-norm"]
    assert norm.status == "fail" and norm.first_divergence == SCALE_AT
    assert "the twin reference's own drift" in norm.detail  # the reference run again, nudged
    # What the bug leaves alone passes, ZeRO 2's clipping of each flat partition counted once
    # per update (test_sharded.py holds ZeRO 3's correct pair, interrupted and resumed).
    assert all(checks[n].status == "pass" for n in ("updates", "lr", "data", "cadence"))
    assert "clip_grad_norm_ as often (1 per update)" in checks["cadence"].detail
    about = json.loads((tmp_path / "out" / "candidate" / "rank1.json").read_text())["optimizers"]
    assert about[0]["partitioned"] and about[0]["wrapper"].endswith(".DeepSpeedZeroOptimizer")


@pytest.mark.parametrize("bug", ["scale-grad", "skip-zero-grad"])
def test_fsdp2_free_running_each_bug_fails_params_and_grad_norm_at_its_update(tmp_path, bug):
    """FSDP2's shards cannot be loaded: the candidate (2 ranks, float64) runs free, and the
    fingerprints and the gradient norm jump at the update where the bug acts."""
    script = FIXTURES / "user_fsdp.py"
    report, checks = _run(tmp_path, [PY, script, "--bs", "32"],
                          [*TORCHRUN, script, "--bs", "8", "--accum", "2", *BUGS[bug]],
                          fingerprint_every=1)
    at = SCALE_AT if bug == "scale-grad" else SKIP_AT
    assert not report.ok and "grads" not in checks
    assert checks["lr"].status == "pass"
    for name in ("params", "grad-norm"):
        assert checks[name].status == "fail" and checks[name].first_divergence == at
        assert "the twin reference's own drift" in checks[name].detail
    assert "free-running" in checks["params"].detail
    assert "judged against the twin's drift" in checks["params"].detail
