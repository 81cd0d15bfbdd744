"""``record.router``: a router's gradient weighed term by term on a hand-built MoE loss — the
squared norm each use of the router's scores sends back (the top-k's: routing; the others':
auxiliary) against ``torch.autograd.grad`` of each term alone; summed over backward passes,
dropped by ``zero_grad``, nothing where no top-k reads the scores."""

import math

import torch

from lrcheck.record.router import RouterTerms


def _loss(x, router, aux_scale=0.1):
    """A router's scores read by a top-k (the routing: gates weighting a stand-in of the
    experts' output) and by Switch's load-balancing term; each term returned too."""
    probs = (x @ router.t()).softmax(-1)
    top, chosen = probs.topk(2, dim=-1)
    gates = top / top.sum(-1, keepdim=True)
    routed = (gates * torch.arange(1.0, 3.0, dtype=x.dtype)).pow(2).sum()
    load = torch.bincount(chosen.reshape(-1), minlength=3).to(x.dtype)
    aux = aux_scale * 3 * (load / load.sum() * probs.mean(0)).sum()
    return routed + aux, probs, routed, aux


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 4, generator=g, dtype=torch.float64)
    router = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    return x, router


def test_each_use_of_the_scores_is_the_gradient_of_its_term_alone():
    x, router = _inputs()
    loss, probs, routed, aux = _loss(x, router)
    want = [float(torch.autograd.grad(term, probs, retain_graph=True)[0].pow(2).sum())
            for term in (routed, aux)]
    terms = RouterTerms()
    terms.backward(loss.grad_fn)
    loss.backward()
    found = terms.take(1.0)["router_terms"]
    assert set(found) == {"routing", "auxiliary"}
    assert math.isclose(found["routing"], want[0], rel_tol=1e-14), (found, want)
    assert math.isclose(found["auxiliary"], want[1], rel_tol=1e-14), (found, want)
    assert want[1] > 0 and want[0] > 0


def test_terms_add_over_backward_passes_and_zero_grad_drops_them():
    terms = RouterTerms()
    found = []
    for seed in (0, 1):
        x, router = _inputs(seed)
        loss, *_ = _loss(x, router)
        terms.backward(loss.grad_fn)
        loss.backward()
        found.append(terms.take(1.0)["router_terms"]["auxiliary"])
    x, router = _inputs(0)
    loss, *_ = _loss(x, router)
    terms.backward(loss.grad_fn)
    loss.backward()
    x, router = _inputs(1)
    loss, *_ = _loss(x, router)
    terms.backward(loss.grad_fn)
    loss.backward()
    assert math.isclose(terms.take(4.0)["router_terms"]["auxiliary"], sum(found) / 16,
                        rel_tol=1e-14)
    loss, *_ = _loss(x, router)
    terms.backward(loss.grad_fn)
    loss.backward()
    terms.zeroed()
    assert terms.take(1.0) == {}


def test_a_loss_without_a_top_k_is_not_walked_after_the_first_update():
    x, router = _inputs()
    loss = (x @ router.t()).softmax(-1).pow(2).sum()
    terms = RouterTerms()
    terms.backward(loss.grad_fn)
    loss.backward()
    assert terms.take(1.0) == {} and not terms.found and terms.taken
