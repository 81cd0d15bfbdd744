"""``record.taps`` in-process: the weight each loss item carries, read from the gradient that
reaches the loss and the reduction, equals the one autograd gives for every loss function,
reduction, class weight and ignored item; a sample keeps its identity whatever batch or padding
it comes in; only training forwards start micro-batches; zero_grad, the GradScaler's scale and
the world size are accounted for."""

import pytest
import torch
import torch.nn.functional as F

from lrcheck.record import identity
from lrcheck.record import taps as T


@pytest.fixture
def tapped():
    found = T.Taps()
    undo = T.tap(found)
    yield found
    undo()


def _truth(loss, x, items):
    """Per row of ``x``: Σ over its items of ∂loss/∂l_i, from autograd alone: each item's own
    loss l_i (``items``: per item, unweighted) depends on its own inputs only, so
    ∂loss/∂x = D_i · ∂l_i/∂x on them."""
    x1 = x.clone().requires_grad_()
    g, = torch.autograd.grad(loss(x1), x1)
    x2 = x.clone().requires_grad_()
    per_item = items(x2)
    gi, = torch.autograd.grad(per_item.sum(), x2)
    if per_item.shape == x.shape:  # elementwise: each element an item
        return torch.nan_to_num(g * gi / (gi * gi), nan=0.0).reshape(len(x), -1).sum(dim=1)
    d = (g * gi).reshape(len(x), -1).sum(dim=1) / (gi * gi).reshape(len(x), -1).sum(dim=1)
    return torch.nan_to_num(d, nan=0.0)


class Head(torch.nn.Module):
    """The model: its output is the loss's input, row for row."""

    def __init__(self, shape):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(shape, dtype=torch.float64))

    def forward(self, x):
        return x + self.bias


B = 6
torch.manual_seed(0)
LOGITS = torch.randn(B, 4, dtype=torch.float64)
CLASSES = torch.tensor([0, 3, -100, 1, 2, 3])
CLASS_WEIGHT = torch.tensor([0.5, 1.0, 2.0, 0.25], dtype=torch.float64)
VALUES = torch.randn(B, 4, dtype=torch.float64)
ELEMENT_WEIGHT = torch.rand(B, 4, dtype=torch.float64)
PROBS = torch.rand(B, 4, dtype=torch.float64)


def _ce_items(x):
    return F.cross_entropy(x, CLASSES, reduction="none")


CASES = {
    "cross_entropy mean": (lambda x: F.cross_entropy(x, CLASSES), _ce_items, LOGITS),
    "cross_entropy sum": (lambda x: F.cross_entropy(x, CLASSES, reduction="sum"), _ce_items,
                          LOGITS),
    "cross_entropy weighted": (lambda x: F.cross_entropy(x, CLASSES, weight=CLASS_WEIGHT),
                               _ce_items, LOGITS),
    "cross_entropy none": (lambda x: (F.cross_entropy(x, CLASSES, weight=CLASS_WEIGHT,
                                                      reduction="none") * 0.3).sum(),
                           _ce_items, LOGITS),
    "cross_entropy probabilities": (lambda x: F.cross_entropy(x, PROBS, weight=CLASS_WEIGHT),
                                    lambda x: F.cross_entropy(x, PROBS, weight=CLASS_WEIGHT,
                                                              reduction="none"), LOGITS),
    "nll_loss mean": (lambda x: F.nll_loss(x.log_softmax(1), CLASSES, weight=CLASS_WEIGHT),
                      lambda x: F.nll_loss(x.log_softmax(1), CLASSES, reduction="none"),
                      LOGITS),
    "mse_loss mean": (lambda x: F.mse_loss(x, VALUES),
                      lambda x: F.mse_loss(x, VALUES, reduction="none"), VALUES * 0.5),
    "mse_loss weighted": (lambda x: F.mse_loss(x, VALUES, weight=ELEMENT_WEIGHT),
                          lambda x: F.mse_loss(x, VALUES, reduction="none"), VALUES * 0.5),
    "l1_loss sum": (lambda x: F.l1_loss(x, VALUES, reduction="sum"),
                    lambda x: F.l1_loss(x, VALUES, reduction="none"), VALUES * 0.5),
    "huber_loss mean": (lambda x: F.huber_loss(x, VALUES),
                        lambda x: F.huber_loss(x, VALUES, reduction="none"), VALUES * 0.5),
    "smooth_l1_loss mean": (lambda x: F.smooth_l1_loss(x, VALUES),
                            lambda x: F.smooth_l1_loss(x, VALUES, reduction="none"),
                            VALUES * 0.5),
    "binary_cross_entropy weighted": (
        lambda x: F.binary_cross_entropy(x.sigmoid(), PROBS, weight=ELEMENT_WEIGHT),
        lambda x: F.binary_cross_entropy(x.sigmoid(), PROBS, reduction="none"), LOGITS),
    "binary_cross_entropy_with_logits": (
        lambda x: F.binary_cross_entropy_with_logits(x, PROBS, pos_weight=CLASS_WEIGHT),
        lambda x: F.binary_cross_entropy_with_logits(x, PROBS, pos_weight=CLASS_WEIGHT,
                                                     reduction="none"), LOGITS),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_row_s_weight_is_the_one_autograd_gives(tapped, case):
    loss, items, x = CASES[case]
    model = Head(x.shape[1:])
    (loss(model(x)) / 3).backward()  # divided as by three accumulation steps
    fed = tapped.take(1.0, 1)
    assert fed.why is None and len(fed.ids) == 1
    want = _truth(loss, x, items) / 3
    assert torch.allclose(torch.tensor(fed.weights[0], dtype=torch.float64), want,
                          rtol=1e-12, atol=1e-15), (fed.weights[0], want.tolist())
    assert fed.dtype == "float64"


def test_an_lm_s_flattened_tokens_are_summed_into_their_rows(tapped):
    vocab, rows, length = 7, 3, 5
    tokens = torch.randint(0, vocab, (rows, length))
    labels = tokens.clone()
    labels[0, 3:] = -100  # padding
    emb = torch.nn.Embedding(vocab, vocab).double()
    logits = emb(tokens)
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1))
    loss.backward()
    fed = tapped.take(1.0, 1)
    counted = (labels[:, 1:] != -100).sum(dim=1).double()
    assert fed.weights[0] == pytest.approx((counted / counted.sum()).tolist(), rel=1e-12)


def test_a_sample_keeps_its_identity_in_any_batch_and_padding():
    rows = torch.randint(1, 50, (4, 7))
    mask = torch.ones_like(rows)
    mask[0, 5:] = 0
    zeros = torch.zeros(4, 3, dtype=rows.dtype)
    right = identity.row_ids(torch.cat([rows, zeros], 1), torch.cat([mask, zeros], 1))
    left = identity.row_ids(torch.cat([zeros, rows], 1), torch.cat([zeros, mask], 1))
    ids = identity.row_ids(rows, mask)
    assert ids.tolist() == right.tolist()
    assert ids[1:].tolist() == left[1:].tolist()  # row 0 is padded on both sides there
    assert ids[2:].tolist() == identity.row_ids(rows[2:], mask[2:]).tolist()
    assert len(set(ids.tolist())) == 4
    # Without a mask, a row padded with zeros (pad id 0) keeps its identity too.
    assert identity.row_ids(rows).tolist() == identity.row_ids(torch.cat([rows, zeros], 1)).tolist()
    x = torch.randn(5, 3, 2)
    assert identity.row_ids(x).tolist() == identity.row_ids(x.clone()).tolist()
    # Other bits, another identity.
    assert identity.row_ids(x)[0] != identity.row_ids(x.to(torch.float64))[0]
    assert identity.row_ids(x.to(torch.bfloat16)).dtype == torch.int64
    assert identity.row_ids(torch.empty(0, 3)).tolist() == []


def test_the_first_input_is_found_where_users_pass_it():
    a, b, mask = torch.ones(2, 3), torch.zeros(2, 3), torch.ones(2, 3)
    assert identity.first_input((a, b), {})[0] is a
    assert identity.first_input((), {"attention_mask": mask, "input_ids": b})[0] is b
    assert identity.first_input((), {"attention_mask": mask, "input_ids": b})[1] is mask
    assert identity.first_input(({"pixel_values": a, "labels": b},), {})[0] is a
    assert identity.first_input(([a, b],), {})[0] is a
    assert identity.first_input((3, a), {})[0] is a
    assert identity.first_input((torch.tensor(1.0),), {}) is None


def test_only_a_training_forward_of_a_model_starts_a_micro_batch(tapped):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    x = torch.randn(5, 3)
    with torch.no_grad():
        model(x)  # evaluation
    torch.nn.CrossEntropyLoss()(torch.randn(5, 2), torch.zeros(5, dtype=torch.long))
    frozen = torch.nn.Linear(3, 3).requires_grad_(False)
    frozen(x)
    assert tapped.micro == []
    class Checkpointed(torch.nn.Module):  # a layer recomputed in the backward pass
        def __init__(self):
            super().__init__()
            self.inner = model

        def forward(self, x):
            return torch.utils.checkpoint.checkpoint(self.inner, x, use_reentrant=True)

    out = Checkpointed()(x.requires_grad_())
    torch.nn.CrossEntropyLoss()(out, torch.zeros(5, dtype=torch.long)).backward()
    fed = tapped.take(1.0, 1)
    assert len(fed.ids) == 1 and len(fed.ids[0]) == 5  # the recomputation is no micro-batch
    assert fed.weights[0] == pytest.approx([0.2] * 5)


def test_zero_grad_the_scale_and_the_world(tapped):
    model = torch.nn.Linear(3, 2)
    x, y = torch.randn(4, 3), torch.zeros(4, dtype=torch.long)
    F.cross_entropy(model(x), y).backward()
    tapped.zeroed()  # the first micro-batch's gradient is erased
    model(x)
    tapped.zeroed()  # between a forward and its backward: that one still counts
    (F.cross_entropy(model(x[:2]), y[:2]) * 8.0).backward()
    fed = tapped.take(8.0, 2)  # a GradScaler's scale of 8, two ranks
    assert fed.weights == [[0.0] * 4, None, [0.25, 0.25]]
    assert "no loss of torch.nn.functional" in fed.why and "may be computed by" not in fed.why
    assert tapped.take(1.0, 1).ids == []


def test_a_loss_the_tap_cannot_map_says_why(tapped):
    model = torch.nn.Linear(3, 2)
    out = model(torch.randn(4, 3))
    F.mse_loss(out[:3], torch.zeros(3, 2)).backward()  # 3 rows of 4
    fed = tapped.take(1.0, 1)
    assert fed.weights == [None] and "do not divide into the 4 rows" in fed.why


def test_the_undo_restores_torch():
    before = torch.nn.Module.__call__, F.cross_entropy
    undo = T.tap(T.Taps())
    assert torch.nn.Module.__call__ is not before[0]
    undo()
    assert (torch.nn.Module.__call__, F.cross_entropy) == before


def test_a_kernel_package_that_computes_the_loss_is_named(tapped, monkeypatch):
    import sys
    import types

    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    torch.nn.Linear(3, 2)(torch.randn(4, 3)).sum().backward()  # a loss by hand
    why = tapped.take(1.0, 1).why
    assert why.endswith("the loss may be computed by Liger's kernels (liger_kernel imported)")


def test_a_model_called_in_parts_is_one_micro_batch(tapped):
    body = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh())
    head = torch.nn.Linear(4, 2)
    x, y = torch.randn(5, 3), torch.zeros(5, dtype=torch.long)
    F.cross_entropy(head(body(x)), y, reduction="sum").backward()
    fed = tapped.take(1.0, 1)
    # head's input came out of body: the rows are x's, each weighted by the sum's 1
    assert fed.ids == [identity.row_ids(x).tolist()]
    assert fed.weights == [pytest.approx([1.0] * 5)]


def test_two_embedding_tables_fed_the_same_rows_are_one_sample_per_row(tapped):
    users, items = torch.nn.Embedding(10, 3), torch.nn.Embedding(20, 3)
    mlp = torch.nn.Linear(6, 1)
    u, i = torch.tensor([1, 2, 3, 1]), torch.tensor([5, 6, 7, 8])
    pred = mlp(torch.cat([users(u), items(i)], dim=1)).squeeze(1)
    F.mse_loss(pred, torch.zeros(4)).backward()
    fed = tapped.take(1.0, 1)
    assert fed.weights == [pytest.approx([0.25] * 4)]
    joined = identity.join(identity.row_ids(u), identity.row_ids(i)).tolist()
    assert fed.ids == [joined]
    # user 1 rated two items: two samples, not one
    assert len(set(fed.ids[0])) == 4


def test_a_second_forward_of_the_same_model_or_after_a_backward_is_a_new_micro_batch(tapped):
    model = torch.nn.Linear(3, 2)
    x1, x2, y = torch.randn(4, 3), torch.randn(4, 3), torch.zeros(4, dtype=torch.long)
    (model(x1).sum() * 0.0).backward()  # a hand-written loss: no tap sees it
    F.cross_entropy(model(x2), y).backward()
    fed = tapped.take(1.0, 1)
    assert fed.ids == [identity.row_ids(x1).tolist(), identity.row_ids(x2).tolist()]
    assert fed.weights == [None, pytest.approx([0.25] * 4)]
    # A GAN's step: D on real rows, its backward, then D(G(z)): the fake rows are z's
    G, D = torch.nn.Linear(2, 3), torch.nn.Linear(3, 1)
    real, z = torch.randn(4, 3), torch.randn(4, 2)
    F.binary_cross_entropy_with_logits(D(real), torch.ones(4, 1)).backward()
    F.binary_cross_entropy_with_logits(D(G(z)), torch.zeros(4, 1)).backward()
    fed = tapped.take(1.0, 1)
    assert fed.ids == [identity.row_ids(real).tolist(), identity.row_ids(z).tolist()]
    assert fed.weights == [pytest.approx([0.25] * 4), pytest.approx([0.25] * 4)]


def test_a_pipeline_stage_counts_only_the_micro_batches_a_backward_pass_reached(tapped):
    model = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    model(x)  # the schedule's shape inference: a forward of micro-batch 0, never differentiated
    for rows in (x[:2], x[2:]):  # the micro-batches, their outputs' gradients from stage 1
        model(rows).backward(torch.ones(2, 2))
    fed = tapped.take(1.0, 1, reached=True)
    assert [len(ids) for ids in fed.ids] == [2, 2] and fed.weights == [None, None]
