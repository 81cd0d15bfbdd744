"""TRL's RL trainers recorded unmodified by ``lrcheck run`` (the ``trl`` extra): users' GRPO and
DPO scripts (tests/fixtures/user_grpo.py, user_dpo.py: tiny config-built Llamas, a word-level
tokenizer, nothing downloaded, generation by the model itself, a reward computed in code), the
big-batch reference (bs 8) against 4 micro-batches of 2 or 2 processes of 2 micro-batches of 2
(the correct pairs, the models in float64), or 2 micro-batches of 4 (the bugs), in lockstep.
Both runs update on the same rollouts: each rank of the candidate replays its slice of the
reference's generation batch (``record.rollouts``), so ``data`` (each row's prompt and
completion tokens) passes at every update.
``token-weights`` compares every completion token's ∂L/∂logp_t, measured through TRL's fused LM
head, and names the candidate's reduction where it differs, term by term where the loss reads
the log-probs in two places (a KL term beside the policy term: ``record.uses``). Slow: each
pair is two fresh processes importing torch, transformers and TRL (11 to 17 s of wall time a
pair on this 2-core machine when it is otherwise idle, 19 to 28 s of CPU); the other pairs of
docs/rl.md's figures are not here, to keep the suite's time."""

import importlib.util
import re
import shlex
import sys
from pathlib import Path

import pytest

from lrcheck import api
from tests.helpers import checks_by_name

NO_TRL = "the trl extra is not installed: pip install 'lrcheck[trl]'"
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason=NO_TRL)]
FIXTURES = Path(__file__).parents[1] / "fixtures"
STEPS = ["--steps", "2"]


def _pair(tmp_path_factory, script: str, *candidate: str, both: tuple[str, ...] = (),
          split: tuple[str, ...] = ("--bs", "4", "--accum", "2")):
    """``lrcheck run`` of ``script`` at bs 8 against ``split`` (bs 4 × accum 2) with
    ``candidate``'s flags (``both``: the two runs'): the report and its checks by name."""
    ref = [sys.executable, FIXTURES / script, "--bs", "8", *STEPS, *both]
    cand = [sys.executable, FIXTURES / script, *split, *STEPS, *both, *candidate]
    report = api.run_commands(shlex.join(map(str, ref)), shlex.join(map(str, cand)),
                              tmp_path_factory.mktemp(script.split(".")[0]) / "out")
    return report, checks_by_name(report)


# The models in float64. TRL 1.16's fused LM head still computes the log-probs, and so the
# loss and the tokens' weights, in float32 (``trl/kernels/chunked_logprob.py``).
FLOAT64 = ("--dtype", "float64")
# A KL term (β 0.04) against a frozen reference the policy starts 1 % away from: it weighs the
# tokens from update 0.
KL = ("--beta", "0.04")


@pytest.fixture(scope="module")
def grpo(tmp_path_factory):
    """Three terms, each right: TRL's policy and KL terms, and an auxiliary SFT term of the
    user's own over the window's tokens; bs 8 against 4 micro-batches of 2, the models in
    float64."""
    return _pair(tmp_path_factory, "user_grpo.py", both=(*KL, "--aux", "0.1", *FLOAT64),
                 split=("--bs", "2", "--accum", "4"))


@pytest.fixture(scope="module")
def grpo_micro_mean(tmp_path_factory):
    """Three bugs, one per term: the policy term each micro-batch's token mean / accum, the KL
    term each sequence's mean, averaged over the micro-batch's sequences, / accum, and the
    auxiliary term each micro-batch's token mean × its share of the window's samples."""
    return _pair(tmp_path_factory, "user_grpo.py", "--micro-mean", "--kl-seq-mean",
                 "--aux-sample-share", both=(*KL, "--aux", "0.1"))


@pytest.fixture(scope="module")
def grpo_generation_batch(tmp_path_factory):
    """One generation batch for 2 updates (``steps_per_generation`` 2 × accum), and two bugs:
    trl #5619's, the policy term divided by the generation batch's token count, not the
    window's, and ms-swift PR #10116's, the auxiliary term × the accumulation steps once more."""
    return _pair(tmp_path_factory, "user_grpo.py", "--gen-batch-norm", "--aux-times-gas",
                 both=("--gen-windows", "2", "--aux", "0.1"))


@pytest.fixture(scope="module")
def grpo_two_processes(tmp_path_factory):
    """bs 8 on one process against 2 micro-batches of 2 on each of 2 (torchrun, gloo), the
    models in float64: the candidate's ranks replay their slices of the reference's rollouts
    (``record.rollouts``)."""
    script = FIXTURES / "user_grpo.py"
    ref = [sys.executable, script, "--bs", "8", *STEPS, *FLOAT64]
    cand = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
            "2", script, "--bs", "2", "--accum", "2", *STEPS, *FLOAT64]
    report = api.run_commands(shlex.join(map(str, ref)), shlex.join(map(str, cand)),
                              tmp_path_factory.mktemp("grpo2") / "out")
    return report, checks_by_name(report)


@pytest.fixture(scope="module")
def dpo(tmp_path_factory):
    """DPO's sigmoid loss, bs 8 against 4 micro-batches of 2, the models in float64."""
    return _pair(tmp_path_factory, "user_dpo.py", both=FLOAT64,
                 split=("--bs", "2", "--accum", "4"))


@pytest.fixture(scope="module")
def dpo_claims_scaled(tmp_path_factory):
    return _pair(tmp_path_factory, "user_dpo.py", "--claims-scaled")


def test_a_correct_grpo_accumulation_pair_weighs_every_token_the_same(grpo):
    report, checks = grpo
    assert report.ok
    for name in ("data", "weights", "token-weights", "grads", "params", "evidence"):
        assert checks[name].status == "pass", name
    # Equal to the last bit (issue 40's bound, 1e-12 relative): the same rows from the same
    # state, divided by powers of 2; the log-probs float32 in TRL 1.16's head all the same.
    assert checks["token-weights"].max_abs_diff == 0.0
    assert "every token at all 2 updates" in checks["token-weights"].detail


def test_grpo_micro_batch_token_means_fail_at_update_0_named(grpo_micro_mean):
    report, checks = grpo_micro_mean
    assert not report.ok
    assert checks["data"].status == "pass"  # the same rollouts: the weights alone differ
    tokens = checks["token-weights"]
    assert tokens.status == "fail" and tokens.first_divergence == 0, tokens.detail
    assert "one ratio per micro-batch (" in tokens.detail
    assert "a mean per micro-batch, where the reference's is a token-mean over the window" \
        in tokens.detail
    assert checks["grads"].status == "fail" and checks["grads"].first_divergence == 0


def test_each_terms_reduction_is_named_from_its_own_use_of_the_log_probs(grpo_micro_mean):
    """trl #2995's question answered from the gradients: the reference is TRL's own KL term,
    a token-mean over the window with the policy term; the log-probs' two uses (the ratio, the
    KL estimator), weighed apart, name which term follows which reduction."""
    tokens = grpo_micro_mean[1]["token-weights"]
    assert "first differ at update 0: by the uses of the log-probs in the loss: " in tokens.detail
    assert "; through logp − old (GRPO's ratio: the policy term), one ratio per micro-batch (" \
        in tokens.detail
    assert ("; through ref − logp (GRPO's KL estimator: the KL term), one ratio per sequence, "
            "as 1/its tokens: a sequence-mean (each sequence's tokens divided by its length), "
            "where the reference's is a token-mean") in tokens.detail


def test_the_auxiliary_terms_sample_ratio_times_local_mean_is_named(grpo_micro_mean):
    """Each micro-batch's token mean weighed by its share of the samples: with equal shares, a
    mean per micro-batch / accum, named as such on the auxiliary term's own use."""
    tokens = grpo_micro_mean[1]["token-weights"]
    assert re.search(r"through logp × x \(the log-probs weighed as they are: an SFT or "
                     r"auxiliary term\), one ratio per micro-batch \([\d.]+×, [\d.]+× the "
                     r"reference's\): a mean per micro-batch", tokens.detail), tokens.detail


def test_a_generation_batch_normaliser_and_an_auxiliary_term_times_gas_fail_at_update_0(
        grpo_generation_batch):
    """trl #5619: with one generation for 2 updates, the policy term divided by the
    generation batch's tokens weighs every token half (accum / steps_per_generation); the
    auxiliary term × accum weighs every token twice. Each named on its own use."""
    report, checks = grpo_generation_batch
    assert not report.ok
    assert checks["data"].status == "pass"  # one generation replayed, shuffled as the reference
    tokens = checks["token-weights"]
    assert tokens.status == "fail" and tokens.first_divergence == 0, tokens.detail
    assert ("through logp − old (GRPO's ratio: the policy term), every token weighs 0.5× the "
            "reference's: a constant, this term scaled as a whole") in tokens.detail
    assert ("through logp × x (the log-probs weighed as they are: an SFT or auxiliary term), "
            "every token weighs 2× the reference's: a constant, this term scaled as a whole") \
        in tokens.detail


def test_grpo_on_two_processes_trains_on_the_references_rollouts_token_for_token(
        grpo_two_processes):
    report, checks = grpo_two_processes
    assert report.ok
    assert checks["data"].status == "pass"  # each rank replayed its slice of the rollouts
    assert checks["token-weights"].status == "pass"
    # Issue 40's bound for a float64 training, 1e-12 relative: met to the last bit.
    assert checks["token-weights"].max_abs_diff == 0.0
    assert "after clipping; float64)" in checks["grads"].detail  # a float64 model's gradient
    assert checks["ranks (candidate)"].status == "pass"
    # The verdict says what was held equal: every generation batch of both ranks replayed.
    held = re.search(r"the rollouts held equal: (\d+) of the candidate's (\d+) generation "
                     r"batches \(over its ranks\) were the reference's, replayed",
                     checks["token-weights"].detail)
    assert held and held[1] == held[2] and int(held[1]) >= 2, checks["token-weights"].detail
    assert "generated itself" not in checks["token-weights"].detail


def test_a_correct_dpo_accumulation_pair_weighs_every_token_the_same(dpo):
    report, checks = dpo
    assert report.ok
    for name in ("data", "weights", "token-weights", "grads", "params"):
        assert checks[name].status == "pass", name
    assert checks["token-weights"].max_abs_diff == 0.0  # issue 40's bound, 1e-12: the last bit


def test_a_dpo_loss_claimed_scaled_for_accumulation_is_a_constant_2x(dpo_claims_scaled):
    report, checks = dpo_claims_scaled
    assert not report.ok
    tokens = checks["token-weights"]
    assert tokens.status == "fail" and tokens.first_divergence == 0, tokens.detail
    assert "every token weighs 2× the reference's: a constant" in tokens.detail
    # The same pairs, from the same state: a DPO token's weight, β·σ(−βΔ)/pairs, depends on
    # the model, and is measured equal wherever the loss is right (the data too).
    assert checks["data"].status == "pass" and checks["weights"].status == "fail"
