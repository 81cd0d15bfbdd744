"""``clip-norm`` (``checks.norms``) on synthetic merged records: the run's clipping norm against
the true global norm undone from the stepped (clipped) gradient, and the replicated count
named."""

import math

from lrcheck.checks.norms import EPS, check_clip_norm, true_norm

MAX_NORM = 0.5


def _record(true_sq, replicated_sq, norm, copies=2):
    """A merged record whose true pre-clip norm squared is ``true_sq`` (its replicated part
    ``replicated_sq``), clipped by the run with ``norm``: the gradient stepped on is scaled by
    the clip's coefficient from ``norm``, as torch's clip does."""
    coef = min(1.0, MAX_NORM / (norm + EPS))
    return {"clip_grad_norm": 1, "max_norm": MAX_NORM, "clip_norm": norm,
            "grad_sq": true_sq * coef ** 2, "grad_sq_replicated": replicated_sq * coef ** 2,
            "replicated_ranks": copies}


def test_the_true_norm_is_the_stepped_gradient_undone_by_the_clip():
    found = true_norm(_record(4.0, 1.0, 2.0))
    assert found is not None
    norm, whole, replicated = found
    assert norm == 2.0 and math.isclose(whole, 4.0, rel_tol=1e-15)
    assert math.isclose(replicated, 1.0, rel_tol=1e-15)


def test_a_run_clipping_with_the_true_norm_passes():
    records = [_record(4.0, 1.0, 2.0), {"clip_grad_norm": 0}, _record(0.01, 0.0, 0.1)]
    result = check_clip_norm("candidate", records, 1e-9)
    assert result is not None and result.status == "pass", result
    assert "2 clipped updates" in result.detail


def test_replicated_parameters_counted_twice_fail_at_their_update_and_are_named():
    # tp 2: the replicated part (1.0) summed on both ranks: 4 + 1 = 5 instead of 4.
    records = [_record(4.0, 1.0, math.sqrt(5.0), copies=2)]
    result = check_clip_norm("candidate", records, 1e-9)
    assert result is not None and result.status == "fail" and result.first_divergence == 0
    assert "replicated parameters counted 2 times" in result.detail, result.detail


def test_a_wrong_norm_of_another_kind_fails_without_naming_a_count():
    result = check_clip_norm("candidate", [_record(4.0, 1.0, 2.5, copies=4)], 1e-9)
    assert result is not None and result.status == "fail"
    assert "counted" not in result.detail and "2.5" in result.detail


def test_nothing_clipped_with_a_known_norm_is_no_check():
    assert check_clip_norm("candidate", [{"grad_sq": 1.0}], 1e-9) is None


def test_rank_0_clipping_with_its_own_shards_norm_is_named():
    # FSDP2 over 2 ranks, each clipping by its own shards' norm: the record's norm is rank
    # 0's (its own squares 1.0 of the true 4.0), its gradient clipped by its own coefficient.
    own, other = 1.0, 3.0
    norm = math.sqrt(own)
    coef0, coef1 = (min(1.0, MAX_NORM / (math.sqrt(q) + EPS)) for q in (own, other))
    record = {"clip_grad_norm": 1, "max_norm": MAX_NORM, "clip_norm": norm,
              "grad_sq": own * coef0 ** 2 + other * coef1 ** 2,
              "grad_sq_ranks": [own * coef0 ** 2, other * coef1 ** 2]}
    result = check_clip_norm("candidate", [record], 1e-9)
    assert result is not None and result.status == "fail" and result.first_divergence == 0
    assert result.detail.endswith(": rank 0 clipped with the norm of its own shards, not reduced "
                                  "over the 2 ranks (each rank clips its shards by a coefficient "
                                  "of its own)"), result.detail
