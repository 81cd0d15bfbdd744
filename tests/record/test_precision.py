"""``record.precision``: the precision a forward computed in, observed (autocast, a census of
its operations' types by module class), and never in the way of the user's forward; and
``record.gaps.gaps``' columns along the reference's own gradient and its coordinates of
rounding noise."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from lrcheck.record import precision
from lrcheck.record.gaps import gaps
from lrcheck.stepwise import COLUMNS, GRAD_ALONG, GRAD_DOT, GRAD_L1, NOISE, PARAM_DIFF


class Passing(TorchDispatchMode):
    """A user's own dispatch mode (a FLOP counter, say)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class Upcast(torch.nn.Module):
    """As transformers' LlamaRMSNorm: computes in float32 whatever its input's type."""

    def forward(self, x):
        return (x.to(torch.float32) * 2).to(x.dtype)


@pytest.fixture
def watched():
    found = precision.Precision()
    undo = precision.watch(precision=found)
    yield found
    undo()


def test_a_float32_module_inside_a_float64_model_is_named(watched):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Upcast(), torch.nn.Linear(4, 2)).double()
    model(torch.randn(3, 4, dtype=torch.float64)).sum().backward()
    got = watched.summary(list(model.parameters()))
    print(got)
    assert got["precision"] == "float32"
    assert got["why"] == "float32 inside a float64 model (Upcast computes in float32)"


def test_bf16_autocast_is_named_with_its_device(watched):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(3, 4)).sum().backward()
    got = watched.summary(list(model.parameters()))
    assert got["precision"] == "bfloat16" and got["why"] == "bf16 autocast on cpu"
    assert got["autocast"] == {"cpu": "bfloat16"}


def test_no_census_under_another_dispatch_mode_and_the_parameters_type_then(watched):
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Upcast()).double()
    with Passing():
        out = model(torch.randn(3, 4, dtype=torch.float64))
    assert out.dtype == torch.float64
    got = watched.summary(list(model.parameters()))
    assert not got["census"] and got["why"] == "float64 parameters"


def test_a_census_that_fails_leaves_the_forward_as_it_was(watched, monkeypatch):
    monkeypatch.setattr(precision, "tree_leaves", lambda _: 1 / 0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), Upcast()).double()
    x = torch.randn(3, 4, dtype=torch.float64)
    assert torch.equal(model(x), model[1](model[0](x)))
    watched.done = True
    assert torch.equal(model(x), model[1](model[0](x)))


def test_the_gaps_hold_the_scale_and_leave_out_coordinates_of_rounding_noise():
    torch.manual_seed(0)
    g_r = torch.randn(48)
    g_r[16:32] = 1e-9 * torch.randn(16)  # a key-bias slice: rounding noise of an exact 0
    start = torch.zeros(48)
    p_r = start - 1e-2 * torch.sign(g_r)  # AdamW: every coordinate a full step
    p = torch.nn.Parameter(p_r.clone())
    p.grad = g_r * 1.001
    p.grad[16:32] = -g_r[16:32]  # another draw of the noise, unshared
    with torch.no_grad():
        p[16:32] += 1e-2 * torch.sign(p.grad[16:32] - g_r[16:32])  # its steps differ
    ref = {"grads": [g_r], "params": [p_r]}
    [row] = gaps([p], ref["grads"], ref["params"], [start], share=1e-2)
    assert len(row) == len(COLUMNS)
    print(dict(zip(COLUMNS, row, strict=True)))
    assert row[NOISE] == 16 and row[PARAM_DIFF] == 0  # the noisy steps left out
    real = torch.cat([g_r[:16], g_r[32:]])
    assert row[GRAD_L1] == pytest.approx(float(real.abs().sum()), rel=1e-3)  # the noise left out
    assert row[GRAD_DOT] == pytest.approx(1e-3 * float(real.square().sum()), rel=1e-2)
    assert row[GRAD_ALONG] / row[GRAD_L1] == pytest.approx(1e-3, rel=1e-2)  # the scale


def test_a_coordinate_near_0_weighs_by_its_size_in_the_scale():
    from lrcheck.record.gaps import along

    found, l1 = along(torch.tensor([1.0, 1e-3, 5.0]), torch.tensor([-1e-6, 1.0, 0.0]))
    assert l1 == pytest.approx(1.0 + 1e-6) and found == pytest.approx(-1.0 + 1e-3)


def test_finish_ends_the_watch_and_falls_back_to_the_parameters_type(monkeypatch):
    before = torch.nn.Module.__call__
    found = precision.Precision()
    precision.watch(precision=found)
    assert torch.nn.Module.__call__ is not before
    monkeypatch.setattr(found, "summary", lambda params: 1 / 0)
    got = precision.finish([torch.nn.Parameter(torch.ones(2, dtype=torch.float64))], found)
    assert torch.nn.Module.__call__ is before
    assert got["precision"] == "float64"
    assert got["why"].startswith("float64 parameters (the precision was not observed: ")


def test_the_first_optimizer_step_ends_the_watch():
    before = torch.nn.Module.__call__
    found = precision.Precision()
    precision.watch(precision=found)
    model = torch.nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert torch.nn.Module.__call__ is before and found.done
