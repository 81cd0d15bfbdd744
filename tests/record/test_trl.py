"""TRL's ``SFTTrainer`` recorded unmodified by ``lrcheck run`` (the ``trl`` extra): a user's SFT
script (tests/fixtures/user_trl.py: a tiny config-built Llama, a word-level tokenizer, generated
sentences of varying length, nothing downloaded), the big-batch reference against 2
micro-batches of half its size, in lockstep. Both runs feed the same sentences to each update (the
Trainer's seeded sampler draws one permutation whatever the batch size). The correct pair passes;
with ``model_accepts_loss_kwargs=False`` each micro-batch's loss is its own token mean divided by
the accumulation steps, which weights the tokens of update 0's two micro-batches (36 and 65 loss
tokens) unequally: ``weights`` fails at update 0 (TRL's fused LM head is tapped, since its loss
goes through none of torch's loss functions), and the gradient parts from the reference's
there. Slow: each pair is two
fresh processes importing torch, transformers and TRL (about 6 s each here)."""

import importlib.util
import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from tests.helpers import checks_by_name

NO_TRL = "the trl extra is not installed: pip install 'lrcheck[trl]'"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason=NO_TRL)]
SCRIPT = Path(__file__).parents[1] / "fixtures" / "user_trl.py"
# 4 updates: update 0 at the warmup's LR 0 (its gradient is still compared), then 3 that move.
STEPS = ["--steps", "4"]


def _pair(tmp_path_factory, name: str, *candidate: str):
    """``lrcheck run`` of the reference (bs 8) against bs 4 × accum 2 with ``candidate``'s flags:
    the report and its checks by name."""
    ref = [sys.executable, SCRIPT, "--bs", "8", *STEPS]
    cand = [sys.executable, SCRIPT, "--bs", "4", "--accum", "2", *STEPS, *candidate]
    report = api.run_commands(shlex.join(map(str, ref)), shlex.join(map(str, cand)),
                              tmp_path_factory.mktemp(name) / "out")
    return report, checks_by_name(report)


@pytest.fixture(scope="module")
def correct(tmp_path_factory):
    return _pair(tmp_path_factory, "correct")


@pytest.fixture(scope="module")
def no_loss_kwargs(tmp_path_factory):
    return _pair(tmp_path_factory, "no-loss-kwargs", "--no-loss-kwargs")


def test_a_correct_sft_accumulation_pair_passes_in_lockstep(correct):
    report, checks = correct
    assert report.ok
    for name in ("updates", "lr", "data", "weights", "token-weights", "grads", "params",
                 "cadence", "evidence"):
        assert checks[name].status == "pass", name
    assert "lockstep (" in checks["grads"].detail
    # TRL's fused LM head, tapped: each token's weight is measured, not assumed.
    assert "measured in the backward pass" in checks["weights"].detail


def test_without_loss_kwargs_the_tokens_weights_fail_at_update_0(no_loss_kwargs):
    report, checks = no_loss_kwargs
    assert not report.ok
    assert checks["lr"].status == "pass" and checks["cadence"].status == "pass"
    assert checks["data"].status == "pass"
    weights = checks["weights"]
    assert weights.status == "fail" and weights.first_divergence == 0, weights.detail
    # Update 0's halves hold 36 and 65 of its 101 loss tokens: their means should weigh
    # 36/101 and 65/101, and weigh 1/2 each.
    assert ("each micro-batch's mean weighted 0.5 instead of its samples' weight in the "
            "reference (0.356 and 0.644)") in weights.detail
    assert "sum to the same in both runs, shared out differently" in weights.detail
    # Token by token (record.tokens): the halves' tokens weigh 101/(2·36) and 101/(2·65) of
    # the reference's.
    tokens = checks["token-weights"]
    assert tokens.status == "fail" and tokens.first_divergence == 0
    assert ("one ratio per micro-batch (1.403×, 0.7769× the reference's): a mean per "
            "micro-batch") in tokens.detail
    grads = checks["grads"]
    assert grads.status == "fail" and grads.first_divergence == 0
    assert "at update 0, from the same state" in grads.detail
    assert grads.max_rel_diff > 1e-2  # far beyond float32's 1e-4: the tokens' weights, not rounding
