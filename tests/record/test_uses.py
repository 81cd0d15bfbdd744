"""The uses of the log-probs in the loss weighed apart (``record.uses``): a loss of two terms
reading them twice (a ratio ``logp − old``, a KL's ``ref − logp``), each use's gradient kept in
the log-probs' layout, and the uses adding up to the gradient that reached the log-probs."""

import torch

from lrcheck.record import tokens
from lrcheck.record.uses import Split


def _two_terms(split: Split, beta: float):
    leaf = torch.tensor([-1.0, -2.0, -3.0, -0.5, -0.25, -0.75], dtype=torch.float64,
                        requires_grad=True)
    out = leaf * 1.0  # the head's flat log-probs: 2 rows of 3 positions
    grads: list[torch.Tensor] = []
    assert tokens.watch(grads, out, rows=2)
    split.watch(out)
    logp = out.view(2, 3)[:, -2:]  # the completion's 2 last positions, as TRL slices them
    old, ref = logp.detach(), torch.full((2, 2), -1.0, dtype=torch.float64)
    advantages = torch.tensor([[1.0], [-2.0]], dtype=torch.float64)
    loss = -(torch.exp(logp - old) * advantages).sum() / 4 + beta * ((ref - logp) ** 2).sum() / 2
    split.backward(loss.grad_fn, grads[0])
    loss.backward()
    return logp.detach(), advantages, ref, grads[0]


def test_each_use_keeps_the_gradient_it_sent_back_in_the_log_probs_layout():
    split = Split()
    logp, advantages, ref, total = _two_terms(split, beta=0.5)
    uses = split.taken(total)
    assert set(uses) == {"logp − x", "x − logp"}
    policy = torch.zeros(2, 3, dtype=torch.float64)
    policy[:, 1:] = -advantages.expand(2, 2) / 4
    kl = torch.zeros(2, 3, dtype=torch.float64)
    kl[:, 1:] = -0.5 * 2 * (ref - logp) / 2
    torch.testing.assert_close(uses["logp − x"], policy, rtol=0, atol=1e-15)
    torch.testing.assert_close(uses["x − logp"], kl, rtol=0, atol=1e-15)
    torch.testing.assert_close(uses["logp − x"] + uses["x − logp"], total, rtol=0, atol=1e-15)


def _uses_of(loss_of) -> dict[str, torch.Tensor]:
    """The uses ``Split`` tells apart in ``loss_of(log-probs)``, 2 rows of 2."""
    out = torch.ones(4, requires_grad=True) * 1.0
    split, grads = Split(), []
    tokens.watch(grads, out, rows=2)
    split.watch(out)
    loss = loss_of(out.view(2, 2))
    split.backward(loss.grad_fn, grads[0])
    loss.backward()
    return split.taken(grads[0])


def test_log_probs_read_in_one_place_have_no_uses_to_tell_apart():
    assert _uses_of(lambda logp: (logp * 3.0).sum()) == {}


def test_a_log_prob_read_once_is_one_use_whatever_reads_its_result_twice():
    # GRPO without a KL term: the ratio exp(logp − old) is read twice (clipped and not), but
    # the log-probs once: one term.
    def grpo(logp):
        ratio = torch.exp(logp - logp.detach())
        return -torch.min(ratio * 2.0, ratio.clamp(0.8, 1.2) * 2.0).sum()

    assert _uses_of(grpo) == {}
    # and with a KL term beside it, two
    assert set(_uses_of(lambda logp: grpo(logp) + ((torch.zeros(2, 2) - logp) ** 2).sum())) == \
        {"logp − x", "x − logp"}
