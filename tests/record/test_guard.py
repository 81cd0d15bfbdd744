"""``record.guard``: an error in a hook body switches the recording off with the reason, the
user's training goes on, and the user's own errors reach the user unchanged."""

import json

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from lrcheck.record import guard
from lrcheck.record.calls import counting
from lrcheck.record.process import ProcessRecorder
from lrcheck.recorder import read_records


def test_the_first_error_switches_off_once_with_its_reason_and_later_bodies_are_skipped(capsys):
    said, calls = [], []
    on = guard.Guard("recording")
    on.arm(said.append)

    def body(x):
        calls.append(x)
        if x == 2:
            raise ValueError("bad value\nsecond line")
        return x

    run = on("the pre-hook", body)
    assert run(1) == 1 and run(2) is None and run(3) is None
    assert calls == [1, 2]  # off: the third call never ran
    assert said == ["the pre-hook raised ValueError: bad value"] and on.off == said[0]
    assert "recording is off" in capsys.readouterr().err
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C is the user's, never swallowed
        guard.Guard("x")("h", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))()


def test_a_counted_call_raises_the_users_own_error_but_not_the_counters():
    class Owner:
        def call(self, fail):
            if fail:
                raise RuntimeError("the user's own")
            return "done"

    def count(args, kwargs, result):
        raise TypeError("the counter's")

    guard.RECORDING.arm()
    undo = counting(Owner, "call", count)
    try:
        with pytest.raises(RuntimeError, match="the user's own"):
            Owner().call(True)
        assert Owner().call(False) == "done"  # the counter failed: the result still returned
        assert guard.RECORDING.off == "the count of call raised TypeError: the counter's"
    finally:
        undo()
        guard.RECORDING.arm()


def test_what_precedes_an_outermost_call_runs_before_it_once():
    seen = []

    class Owner:
        def call(self, inner):
            seen.append("call")
            return self.call(False) if inner else None

    guard.RECORDING.arm()
    undo = counting(Owner, "call", lambda args, kwargs, result: seen.append("after"),
                    before=lambda args, kwargs: seen.append(("before", args[1])))
    try:
        Owner().call(True)
        assert seen == [("before", True), "call", "call", "after"]  # the inner call is part
    finally:
        undo()


def test_an_optimizer_hook_that_fails_leaves_the_step_and_says_so_in_the_description(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=1)
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    before = model.weight.detach().clone()

    def pre(opt, args, kwargs):
        recorder.pre(opt, args, kwargs)
        raise RuntimeError("linalg_vector_norm on SparseCPU")

    guard.RECORDING.arm(recorder.switch_off)
    handle = register_optimizer_step_pre_hook(guard.RECORDING("optimizer.step's pre-hook", pre))
    try:
        model(torch.ones(1, 3)).sum().backward()
        optimizer.step()  # the user's step runs whatever the hook did
    finally:
        handle.remove()
        guard.RECORDING.arm()
    recorder.close()
    assert not torch.equal(model.weight, before)
    off = json.loads((tmp_path / "rank0.json").read_text())["recording_off"]
    assert off == {"reason": "optimizer.step's pre-hook raised RuntimeError: linalg_vector_norm "
                             "on SparseCPU", "after": 0}


def test_a_sparse_gradient_is_normed_on_its_values(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=1)
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 3, sparse=True)
    optimizer = torch.optim.SparseAdam(list(emb.parameters()), lr=0.1)
    emb(torch.tensor([1, 1, 4])).sum().backward()
    expected = float(torch.sum(emb.weight.grad.to_dense().double() ** 2))
    recorder.pre(optimizer, (), {})
    optimizer.step()
    recorder.post(optimizer, (), {})
    recorder.close()
    line = json.loads((tmp_path / "rank0.jsonl").read_text().splitlines()[0])
    assert line["grad_sq"] == pytest.approx(expected, rel=1e-12)
    assert len(read_records(tmp_path / "rank0.jsonl")) == 1


class Heard:
    """A listener of ``guard.MODULE_CALLS`` that writes what it hears into ``log``, and raises
    on the call of ``fail`` (a module class name)."""

    def __init__(self, name, log, fail=None):
        self.where, self.log, self.fail = f"{name}'s listener", log, fail
        self.name, self.guard = name, guard.Guard(name)
        self.said = []
        self.guard.arm(self.said.append)

    def before(self, module, args, kwargs, depth):
        if type(module).__name__ == self.fail:
            raise ValueError(f"{self.name} cannot hear {self.fail}")
        self.log.append((self.name, "before", type(module).__name__, depth))
        return depth

    def after(self, depth, out, raised):
        self.log.append((self.name, "after", depth, raised))


def test_one_wrapper_of_module_calls_hears_for_every_listener_the_last_added_outermost():
    torch_call, log = torch.nn.Module.__call__, []
    calls = guard.ModuleCalls()
    first, second = Heard("taps", log), Heard("census", log)
    remove_first = calls.listen(first)
    wrapper = torch.nn.Module.__call__
    remove_second = calls.listen(second)
    try:
        assert torch.nn.Module.__call__ is wrapper is not torch_call  # one wrapper for both
        torch.nn.Sequential(torch.nn.Linear(2, 2))(torch.ones(1, 2))
    finally:
        remove_second()
        assert torch.nn.Module.__call__ is wrapper  # the taps still listen
        remove_first()
    assert torch.nn.Module.__call__ is torch_call
    assert log == [("census", "before", "Sequential", 0), ("taps", "before", "Sequential", 0),
                   ("census", "before", "Linear", 1), ("taps", "before", "Linear", 1),
                   ("taps", "after", 1, False), ("census", "after", 1, False),
                   ("taps", "after", 0, False), ("census", "after", 0, False)]


def test_a_listener_that_raises_is_switched_off_alone_and_the_forward_runs(capsys):
    log = []
    calls = guard.ModuleCalls()
    failing, other = Heard("census", log, fail="Linear"), Heard("taps", log)
    removals = [calls.listen(other), calls.listen(failing)]
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    try:
        out = model(torch.ones(1, 2))
        with pytest.raises(RuntimeError):  # the user's own error reaches the user
            model(torch.ones(1, 3))
    finally:
        for remove in removals:
            remove()
    assert out.shape == (1, 2)
    assert failing.said == ["census's listener raised ValueError: census cannot hear Linear"]
    assert failing.guard.off == failing.said[0] and other.guard.off is None
    assert [entry for entry in log if entry[0] == "census"] == [
        ("census", "before", "Sequential", 0)]  # off from the Linear on: not even its after
    assert ("taps", "after", 0, True) in log  # the raising call's after, for the one still on
    assert "census is off" in capsys.readouterr().err


def test_the_taps_and_the_precision_census_listen_through_the_one_wrapper():
    from lrcheck.record import precision, taps

    before = torch.nn.Module.__call__
    tapped, found = taps.Taps(), precision.Precision()
    undo_taps = taps.tap(tapped)
    wrapper = torch.nn.Module.__call__
    undo_census = precision.watch(precision=found)
    try:
        assert torch.nn.Module.__call__ is wrapper is not before
        assert guard.MODULE_CALLS.listeners[-2:] == [tapped, found]  # the census outermost
        model = torch.nn.Linear(2, 1).double()
        model(torch.ones(3, 2, dtype=torch.float64)).sum().backward()
        assert len(tapped.take(1.0, 1).ids) == 1 and found.census is not None
    finally:
        undo_census()
        undo_taps()
    assert torch.nn.Module.__call__ is before


def test_a_loss_tap_that_fails_switches_the_recording_off_and_returns_the_users_loss(monkeypatch):
    from lrcheck.record import taps as taps_module

    def broken(self, name, bound, out):
        raise RuntimeError("the tap's own")

    monkeypatch.setattr(taps_module.Taps, "loss", broken)
    guard.RECORDING.arm()
    undo = taps_module.tap(taps_module.Taps())
    try:
        logits, target = torch.randn(4, 3, requires_grad=True), torch.tensor([0, 1, 2, 0])
        loss = torch.nn.functional.cross_entropy(logits, target)
        expected = torch.nn.functional.cross_entropy(logits.detach(), target)
        assert torch.equal(loss.detach(), expected)  # the user's loss, unchanged
        loss.backward()  # and its backward
        assert guard.RECORDING.off == ("the tap of F.cross_entropy raised RuntimeError: "
                                       "the tap's own")
    finally:
        undo()
        guard.RECORDING.arm()
