"""runner/lockstep.py: the optimizer's state as one flat row, loaded back exactly, and a candidate
that runs in lockstep with its reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lrcheck.plan.judging import lockstep_reason
from lrcheck.runner.lockstep import Lockstep, StateSnapshots, state_tensors
from lrcheck.spec import PairSpec, RunSpec


def _net_and_optimizer(kind: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    net = net.double()
    opt: torch.optim.Optimizer = (torch.optim.AdamW(net.parameters(), lr=0.1) if kind == "adamw"
                                  else torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
    return net, opt


def _step(net: torch.nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 4, generator=g, dtype=torch.float64)
    net(x).square().mean().backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("kind", ["sgd", "adamw"])
def test_a_loaded_state_continues_exactly_like_the_run_it_was_taken_from(kind):
    net, opt = _net_and_optimizer(kind)
    assert state_tensors(opt) == []  # no state before the first step
    snapshots = StateSnapshots(3, torch.float64, "cpu")
    params = []
    for k in range(3):
        _step(net, opt, k)
        snapshots.take(opt, k)
        params.append(torch.cat([p.detach().view(-1) for p in net.parameters()]).numpy().copy())
    states = snapshots.array(3)
    # SGD: a momentum buffer per parameter; AdamW: two moments and a step count per tensor.
    size = sum(p.numel() for p in net.parameters())
    assert states.shape == (3, size if kind == "sgd" else 2 * size + 4)
    # Another run, trained differently, loads the state after update 1 and makes update 2.
    other, other_opt = _net_and_optimizer(kind)
    _step(other, other_opt, 99)
    lockstep = Lockstep(np.stack(params), states)
    lockstep.load(other, other_opt, 2)
    assert lockstep.loaded == 1
    _step(other, other_opt, 2)
    after = torch.cat([p.detach().view(-1) for p in other.parameters()]).numpy()
    np.testing.assert_array_equal(after, params[2])


def test_nothing_is_loaded_before_update_0_or_past_the_reference():
    net, opt = _net_and_optimizer("sgd")
    _step(net, opt, 0)
    before = [p.detach().clone() for p in net.parameters()]
    lockstep = Lockstep(np.zeros((1, 5)), np.zeros((1, 5)))
    lockstep.load(net, opt, 0)
    lockstep.load(net, opt, 5)
    assert lockstep.loaded == 0
    assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))


def test_which_pairs_can_run_in_lockstep():
    plain = PairSpec.build(RunSpec(bs=16, accum=2))
    assert lockstep_reason(plain.reference, plain.candidate) is None
    framework = PairSpec.build(RunSpec(bs=16, accum=2, framework="transformers"))
    reason = lockstep_reason(framework.reference, framework.candidate)
    assert "framework's own loop" in (reason or "")
    # A GradScaler stays each run's own: its skipped steps are checked by skipped-steps.
    amp = PairSpec.build(RunSpec(bs=16, accum=2, dtype="float32", amp="fp16"))
    assert lockstep_reason(amp.reference, amp.candidate) is None


def test_adamws_step_counts_on_the_cpu_beside_moments_elsewhere_are_joined():
    """On a GPU, AdamW (neither capturable nor fused) keeps its step counts on the CPU beside
    moments on the device: the snapshot moves each to the row's device (the meta device stands
    in for a GPU here)."""
    net = torch.nn.Linear(3, 2, device="meta", dtype=torch.float32)
    opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    for p in net.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    devices = {t.device.type for t in state_tensors(opt)}
    assert devices == {"cpu", "meta"}
    snapshots = StateSnapshots(2, torch.float32, "meta")
    row = snapshots.join(state_tensors(opt), 0)
    assert row.device.type == "meta" and row.shape == (2 * (3 * 2 + 2) + 2,)


def test_the_states_are_kept_on_disk_a_row_per_update_exactly_and_read_back_one_at_a_time():
    """What lockstep holds in memory is O(model): the rows go to an unlinked file as each
    update ends and come back mapped, bit for bit; an update that made no step reads NaN."""
    from lrcheck.runner.lockstep import _give_back

    net = torch.nn.Linear(3, 2, dtype=torch.float64)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    snapshots, expected = StateSnapshots(4, torch.float64, "cpu"), []
    snapshots.take(opt, 0)  # no step yet: no state, no row
    for row in (1, 3):  # update 2 made no step either
        for p in net.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
        snapshots.take(opt, row)
        expected.append(torch.cat(state_tensors(opt)).numpy().copy())
    rows = snapshots.array(4)
    assert isinstance(rows, np.memmap) and rows.shape == (4, 8) and rows.dtype == np.float64
    assert np.isnan(rows[0]).all() and np.isnan(rows[2]).all()
    assert rows[1].tobytes() == expected[0].tobytes() and rows[3].tobytes() == expected[1].tobytes()
    assert snapshots.flat is not None and snapshots.flat.numel() == 8  # one row in memory
    _give_back(rows, 3)  # the pages before row 3 leave this process; reading them is exact
    assert rows[1].tobytes() == expected[0].tobytes()
    lockstep = Lockstep(np.zeros((4, 8)), rows)
    lockstep.load(net, opt, 4)  # update 4 starts from the state after update 3
    assert torch.cat(state_tensors(opt)).numpy().tobytes() == expected[1].tobytes()
