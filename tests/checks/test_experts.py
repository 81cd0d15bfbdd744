"""``experts (candidate)`` (``checks.experts``) on synthetic records: an expert-parallel run's
gradient norm group by group against the reference's same tensors, and the experts' counted
on each of the ranks named."""

import math

from lrcheck.checks.experts import check_experts, group_ratios

REFERENCE = {"grad_sqs": [1.0, 3.0, 4.0, 12.0, 0.5]}
TENSORS = {"experts": [2, 3], "router": [1], "rest": [0, 4]}  # 16.0, 3.0, 1.5


def _candidate(experts=1.0, router=1.0, rest=1.0, ranks=2):
    """A merged record, each group's norm times its factor."""
    return {"grad_sq_groups": {"experts": 16.0 * experts ** 2, "router": 3.0 * router ** 2,
                               "rest": 1.5 * rest ** 2},
            "group_tensors": TENSORS, "expert_ranks": ranks}


def test_each_group_is_held_against_the_reference_tensors_it_holds():
    ratios = group_ratios(_candidate(2.0, 0.5), REFERENCE)
    assert ratios is not None and [round(r, 12) for r in ratios] == [2.0, 0.5, 1.0]
    short = {**_candidate(), "group_tensors": {**TENSORS, "rest": [0]}}
    assert group_ratios(short, REFERENCE) is None  # not the reference's tensors
    assert group_ratios(_candidate(), {"grad_sq": 20.5}) is None  # not per tensor


def test_the_same_gradients_pass_at_every_update():
    check = check_experts([_candidate()] * 3, [REFERENCE] * 3, 1e-4)
    assert check is not None and check.status == "pass" and check.max_abs_diff <= 1e-15
    assert "at 3 updates" in check.detail


def test_the_experts_doubled_over_2_ranks_are_named_at_their_first_update():
    check = check_experts([_candidate(), _candidate(2.0)], [REFERENCE] * 2, 1e-4)
    assert check is not None and check.status == "fail" and check.first_divergence == 1
    assert math.isclose(check.max_abs_diff, 1.0)
    assert check.detail == ("at update 1: the experts' gradients 2× the reference's (expert "
                            "parallel: counted on each of the 2 ranks)"), check.detail


def test_the_experts_halved_over_2_ranks_are_named_divided_twice():
    check = check_experts([_candidate(0.5)], [REFERENCE], 1e-4)
    assert check is not None and check.status == "fail" and check.first_divergence == 0
    assert check.detail == ("at update 0: the experts' gradients scaled by 1/2 (expert "
                            "parallel: divided by the 2 ranks twice)"), check.detail


def test_other_scalings_are_named_without_the_ranks():
    check = check_experts([_candidate(3.0, 0.5, 0.9)], [REFERENCE], 1e-4)
    assert check is not None and check.status == "fail"
    assert check.detail == ("at update 0: the experts' gradients 3× the reference's; the "
                            "router's gradients scaled by 1/2; the other parameters' gradient "
                            "norm is 0.9 times the reference's"), check.detail


def test_nothing_measured_is_not_judged():
    assert check_experts([{"grad_sq": 1.0}], [REFERENCE], 1e-4) is None


def test_the_routers_auxiliary_term_halved_is_named_apart_from_its_routing_term():
    terms = {"routing": 2.0, "auxiliary": 0.5}
    reference = {**REFERENCE, "router_terms": terms}
    halved = {**_candidate(router=0.9), "router_terms": {"routing": 2.0, "auxiliary": 0.125}}
    ratios = group_ratios(halved, reference)
    assert ratios is not None and [round(r, 12) for r in ratios] == [1.0, 0.9, 1.0, 1.0, 0.5]
    check = check_experts([halved], [reference], 1e-4)
    assert check is not None and check.status == "fail" and check.first_divergence == 0
    assert check.detail.endswith(
        "; the router's gradient from the auxiliary term (the router's scores read besides the "
        "top-k: the load-balancing loss) scaled by 1/2 (divided by the 2 data-parallel ranks "
        "once more: Megatron-LM PR #3769)"), check.detail
    assert "routing term" not in check.detail
    same = {**_candidate(), "router_terms": terms}
    assert check_experts([same], [reference], 1e-4).status == "pass"
    assert group_ratios({**_candidate(), "router_terms": {"routing": "x"}}, reference) == \
        [1.0, 1.0, 1.0]  # not numbers: not compared
