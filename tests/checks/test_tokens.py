"""``token-weights`` (``checks.tokens``): every token's ∂L/∂logp_t equal in both runs, and
where not, the candidate's reduction named from its ratios to the reference's. The windows are
built by hand: a GRPO update of 4 sequences (advantages ±1, 3, 2, 4 and 1 completion tokens,
after 2 prompt tokens that weigh 0), the reference in one micro-batch, the candidate in two."""

import numpy as np
import pytest

from lrcheck.checks.tokens import check_token_weights
from lrcheck.plan.windows import MicroBatch

ADV = [1.0, -1.0, 1.0, -1.0]
LENGTHS = [3, 2, 4, 1]
N = sum(LENGTHS)
TOL = 1e-12
PAIRS = (np.array([0]), np.array([0]))


def _row(i: int, per_token: float) -> np.ndarray:
    """Sequence i's tokens: 2 of its prompt (weight 0), then its completion's."""
    return np.array([0.0, 0.0, *[-ADV[i] * per_token] * LENGTHS[i]])


def _window(split: list[list[int]], scale) -> tuple[MicroBatch, ...]:
    """The micro-batches ``split`` (sequence indices), token i of sequence s weighing
    ``scale(s, micro)`` times its advantage."""
    return tuple(MicroBatch(0, np.array(rows), None, None,
                            tuple(_row(s, scale(s, m)) for s in rows))
                 for m, rows in enumerate(split))


REFERENCE = [_window([[0, 1, 2, 3]], lambda s, m: 1 / N)]  # a token-mean over the window
HALVES = [[0, 1], [2, 3]]


def _check(candidate):
    return check_token_weights(REFERENCE, [candidate], PAIRS, TOL)


def test_the_same_weight_on_every_token_passes():
    result = _check(_window(HALVES, lambda s, m: 1 / N))
    assert result.status == "pass" and result.max_abs_diff == 0.0
    assert "every token at all 1 update" in result.detail


def test_a_mean_per_micro_batch_is_named_with_each_micro_batchs_ratio():
    # 9 and 1 completion tokens, each micro-batch's own token mean / 2: ×10/18 and ×10/2.
    result = _check(_window([[0, 1, 2], [3]], lambda s, m: 1 / ([9, 1][m] * 2)))
    assert result.status == "fail" and result.first_divergence == 0
    assert "one ratio per micro-batch (0.5556×, 5× the reference's): a mean per micro-batch" \
        in result.detail, result.detail


def test_a_loss_scaled_as_a_whole_is_a_constant():
    result = _check(_window(HALVES, lambda s, m: 2 / N))
    assert "every token weighs 2× the reference's: a constant" in result.detail


def test_a_sequence_mean_where_the_reference_took_a_token_mean_is_named():
    result = _check(_window(HALVES, lambda s, m: 1 / (LENGTHS[s] * 4)))
    assert "one ratio per sequence, as 1/its tokens: a sequence-mean" in result.detail


def test_tokens_of_one_sequence_weighed_differently_are_another_normalisation():
    candidate = list(_window(HALVES, lambda s, m: 1 / N))
    first = candidate[0]
    rows = list(first.token_weights)
    rows[0] = rows[0] * np.array([1, 1, 1, 1, 1.5])  # one token's KL term, say
    candidate[0] = MicroBatch(0, first.ids, None, None, tuple(rows))
    result = _check(tuple(candidate))
    assert "token by token" in result.detail


def test_other_rows_are_left_to_data():
    result = _check(_window([[0, 1], [2]], lambda s, m: 1 / N))
    assert result.status == "fail" and "see data" in result.detail


@pytest.mark.parametrize("unmeasured", ["reference", "candidate"])
def test_no_line_where_a_run_did_not_measure_its_tokens(unmeasured):
    bare = (MicroBatch(0, np.array([0, 1, 2, 3]), None),)
    ref, cand = REFERENCE[0], _window(HALVES, lambda s, m: 1 / N)
    pair = (bare, cand) if unmeasured == "reference" else (ref, bare)
    assert check_token_weights([pair[0]], [pair[1]], PAIRS, TOL) is None


def test_a_term_added_per_micro_batch_beside_terms_that_agree_is_named():
    # The reference's weights, plus an SFT-like term on sequences 0 and 2: each micro-batch's
    # own token mean (3 and 4 tokens) where the reference took it over both (7 tokens).
    def extra(s: int, ref: bool) -> float:
        if s not in (0, 2):
            return 0.0
        return -1 / 7 / 1 if ref else -1 / LENGTHS[s] / 2

    def window(split, ref):
        return tuple(MicroBatch(0, np.array(rows), None, None,
                                tuple(_row(s, 1 / N) + np.r_[0.0, 0.0, [extra(s, ref)]
                                                             * LENGTHS[s]] for s in rows))
                     for rows in split)

    result = check_token_weights([window([[0, 1, 2, 3]], True)], [window(HALVES, False)],
                                 PAIRS, TOL)
    assert result.status == "fail"
    assert ("the reference's weights plus one value per micro-batch on some tokens (-0.02381, "
            "0.01786): a term of the loss taken as a mean per micro-batch") in result.detail


def _two_terms(split: list[list[int]], name: str, term) -> tuple[MicroBatch, ...]:
    """The reference's policy term (a token-mean over the window) and a second term read
    through the use ``name`` of the log-probs: sequence s's tokens weighing ``term(s, m)``."""
    out = []
    for m, rows in enumerate(split):
        policy = tuple(_row(s, 1 / N) for s in rows)
        other = tuple(np.array([0.0, 0.0, *term(s, m)]) for s in rows)
        out.append(MicroBatch(0, np.array(rows), None, None,
                              tuple(p + k for p, k in zip(policy, other, strict=True)),
                              {"logp − x": policy, name: other}))
    return tuple(out)


def _with_kl(split: list[list[int]], kl_scale) -> tuple[MicroBatch, ...]:
    """A KL term beside the policy term, sequence s's token t weighing kl_scale × (t + 1)."""
    return _two_terms(split, "x − logp", lambda s, m: [(t + 1) * kl_scale(s, m)
                                                       for t in range(LENGTHS[s])])


def test_each_term_is_named_from_its_own_use_of_the_log_probs():
    reference = [_with_kl([[0, 1, 2, 3]], lambda s, m: 0.01 / N)]
    # The KL term as a mean per sequence (each sequence's tokens / its length, over 4).
    candidate = _with_kl(HALVES, lambda s, m: 0.01 / (LENGTHS[s] * 4))
    result = check_token_weights(reference, [candidate], PAIRS, TOL)
    assert result.status == "fail" and result.first_divergence == 0
    assert ("through logp − old (GRPO's ratio: the policy term), every token weighs as in the "
            "reference; through ref − logp (GRPO's KL estimator: the KL term), one ratio per "
            "sequence, as 1/its tokens: a sequence-mean") in result.detail
    # Without the uses apart, the same weights say only that the tokens differ one by one.
    bare = [tuple(MicroBatch(m.rank, m.ids, None, None, m.token_weights) for m in w)
            for w in (reference[0], candidate)]
    assert "token by token" in check_token_weights([bare[0]], [bare[1]], PAIRS, TOL).detail


def test_a_term_scaled_as_a_whole_is_named_on_its_own_use():
    def window(split, aux_scale):  # an SFT term, each token -0.1 × aux_scale / N
        return _two_terms(split, "logp × x", lambda s, m: [-0.1 * aux_scale / N] * LENGTHS[s])

    result = check_token_weights([window([[0, 1, 2, 3]], 1)], [window(HALVES, 2)], PAIRS, TOL)
    assert ("through logp × x (the log-probs weighed as they are: an SFT or auxiliary term), "
            "every token weighs 2× the reference's: a constant, this term scaled as a whole"
            ) in result.detail
    assert "through logp − old (GRPO's ratio: the policy term), every token weighs as in the " \
        "reference" in result.detail
