"""``record.ema`` and the calls ``record.calls`` counts once their modules are imported, in
process: the EMA model fingerprinted after each update it folded in (torch's AveragedModel, and
timm's and diffusers' EMAs, here stand-ins under their modules' names: neither package is a
dependency), DeepSpeed's clipping in its engine counted as clip_grad_norm (ZeRO 3's once per
update), ZeRO 3's clear inside its step no zero_grad, and a clip that clips nothing (an infinite
max_norm) not counted."""

import json
import sys
import types

import numpy as np
import pytest
import torch

from lrcheck.errors import SpecError
from lrcheck.record.calls import count_calls
from lrcheck.record.folder import read_ema
from lrcheck.record.process import ProcessRecorder
from lrcheck.record.taps import tap
from lrcheck.recorder import fingerprint, read_records


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def _step(recorder, optimizer):
    """An optimizer step, its hooks called by hand."""
    recorder.pre(optimizer, (), {})
    optimizer.step()
    recorder.post(optimizer, (), {})


def _train(recorder, model, updates, *, ema=None, update=None, micro=2, per_micro=False):
    """``updates`` updates of ``micro`` micro-batches, the EMA updated (``update(ema, model)``)
    after each step or after every backward; the EMA's fingerprint after each of its updates."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for _ in range(updates):
        for m in range(micro):
            model(torch.full((1, 3), float(m + 1))).sum().backward()
            if per_micro:
                update(ema, model)
        _step(recorder, optimizer)
        if not per_micro:
            update(ema, model)
        seen.append(fingerprint(ema_tensors(ema)))
        optimizer.zero_grad()
    return seen


def ema_tensors(ema):
    return list(ema.module.parameters()) if hasattr(ema, "module") else ema.shadow_params


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _recorded(tmp_path, every, train):
    recorder = ProcessRecorder(tmp_path, samples=None, every=every)
    undo = count_calls(recorder)
    try:
        seen = train(recorder)
    finally:
        undo()
    recorder.close()
    return seen, _lines(tmp_path / "ema-rank0.jsonl")


def test_the_ema_after_each_update_is_its_state_once_it_folded_that_update_in(tmp_path):
    model = _model()
    ema = torch.optim.swa_utils.AveragedModel(
        model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    seen, lines = _recorded(tmp_path, 1, lambda r: _train(
        r, model, 3, ema=ema, update=lambda e, m: e.update_parameters(m)))
    assert lines[0] == {"ema": "AveragedModel", "call": "AveragedModel.update_parameters",
                        "names": ["weight", "bias"], "sharded": False}
    assert [line["after"] for line in lines[1:]] == [0, 1, 2]
    assert [line["fingerprint"] for line in lines[1:]] == seen  # the last one at the end
    assert [r["ema_update"] for r in read_records(tmp_path / "rank0.jsonl")] == [0, 1, 1]
    found = read_ema(tmp_path)
    assert found.name == "AveragedModel" and found.names == ("weight", "bias")
    assert np.array_equal(found.prints[2], np.reshape(seen[2], (-1, 2)))


def test_per_micro_batch_the_ema_after_an_update_holds_the_next_micro_batches(tmp_path):
    """Updated after every backward, the EMA folds update k's weights in during update k+1's
    micro-batches: that state is the EMA after update k. Every 2 updates, and the last."""
    model = _model()
    ema = torch.optim.swa_utils.AveragedModel(model)
    seen = []

    def update(e, m):
        e.update_parameters(m)
        seen.append(fingerprint(ema_tensors(e)))

    _, lines = _recorded(tmp_path, 2, lambda r: _train(r, model, 4, ema=ema, update=update,
                                                      per_micro=True))
    assert [line["after"] for line in lines[1:]] == [0, 2, 3]
    # after update 0: once update 1's two micro-batches folded its weights in (4 calls so far)
    assert lines[1]["fingerprint"] == seen[3] and lines[2]["fingerprint"] == seen[7]
    assert lines[3]["fingerprint"] == seen[7]  # nothing folded in after the last step


def _module(monkeypatch, name, **classes):
    module = types.ModuleType(name)
    for cls_name, cls in classes.items():
        cls.__module__, cls.__qualname__ = name, cls_name
        setattr(module, cls_name, cls)
    monkeypatch.setitem(sys.modules, name, module)
    return module


class _TimmLike(torch.nn.Module):  # timm's ModelEmaV2/V3: a copy in .module, update(model)
    def __init__(self, model):
        super().__init__()
        self.module = torch.nn.Linear(3, 2)
        self.module.load_state_dict(model.state_dict())

    def update(self, model):
        with torch.no_grad():
            for e, m in zip(self.module.parameters(), model.parameters(), strict=True):
                e.lerp_(m, 0.1)


class _DiffusersLike:  # diffusers' EMAModel: shadow_params, step(parameters)
    def __init__(self, parameters):
        self.shadow_params = [p.detach().clone() for p in parameters]

    def step(self, parameters):
        with torch.no_grad():
            for s, p in zip(self.shadow_params, parameters, strict=True):
                s.lerp_(p, 0.1)


@pytest.mark.parametrize("kind", ["timm", "diffusers"])
def test_timm_s_and_diffusers_emas_are_counted_once_imported(tmp_path, monkeypatch, kind):
    model = _model()
    recorder = ProcessRecorder(tmp_path, samples=None, every=1)
    undo = count_calls(recorder)
    try:  # imported after the recording started, as a user's script does after torch
        if kind == "timm":
            cls = type("ModelEmaV3", (_TimmLike,), {"update": _TimmLike.update})
            _module(monkeypatch, "timm.utils.model_ema", ModelEmaV3=cls)
            seen = _train(recorder, model, 2, ema=cls(model), update=lambda e, m: e.update(m))
        else:
            cls = type("EMAModel", (_DiffusersLike,), {"step": _DiffusersLike.step})
            _module(monkeypatch, "diffusers.training_utils", EMAModel=cls)
            seen = _train(recorder, model, 2, ema=cls(model.parameters()),
                          update=lambda e, m: e.step(m.parameters()))
    finally:
        undo()
    recorder.close()
    assert not any(getattr(f, "_lrcheck", False) for f in vars(cls).values())  # undone
    header, *lines = _lines(tmp_path / "ema-rank0.jsonl")
    assert [r["ema_update"] for r in read_records(tmp_path / "rank0.jsonl")] == [0, 1]
    if kind == "timm":
        assert header["call"] == "timm's ModelEmaV3.update"
        assert header["names"] == ["weight", "bias"]
    else:
        assert header["call"] == "diffusers' EMAModel.step"
        assert header["names"] == ["shadow_params.0", "shadow_params.1"]
    assert [line["fingerprint"] for line in lines] == seen


def test_deepspeed_s_clipping_in_its_engine_zero_and_bf16_counts_as_clip_grad_norm(
        tmp_path, monkeypatch):
    engine = _module(monkeypatch, "deepspeed.runtime.engine")
    engine.clip_grad_norm_ = lambda parameters, max_norm, mpu=None: torch.tensor(2.0)

    class DeepSpeedZeroOptimizer:
        clip_grad, loss_scale = 0.0, 4.0

        def unscale_and_clip_grads(self, grad_groups_flat, total_norm):
            pass

    _module(monkeypatch, "deepspeed.runtime.zero.stage_1_and_2",
            DeepSpeedZeroOptimizer=DeepSpeedZeroOptimizer)
    bf16 = _module(monkeypatch, "deepspeed.runtime.bf16_optimizer")
    bf16.clip_tensors_by_global_norm = lambda input_tensors, max_norm=1.0, global_norm=None, \
        mpu=None: global_norm
    recorder = ProcessRecorder(tmp_path, samples=None, every=1)
    undo = count_calls(recorder)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    zero = DeepSpeedZeroOptimizer()
    try:
        for k in range(3):
            model(torch.ones(1, 3)).sum().backward()
            if k == 0:  # the engine without ZeRO: gradient_clipping 0.5
                engine.clip_grad_norm_(parameters=model.parameters(), max_norm=0.5, mpu=None)
            if k == 1:  # the bf16 optimizer's
                bf16.clip_tensors_by_global_norm(input_tensors=[], max_norm=0.25,
                                                 global_norm=torch.tensor(3.0), mpu=None)
            zero.clip_grad = 1.5 if k == 2 else 0.0  # ZeRO clips where clip_grad > 0
            zero.unscale_and_clip_grads([], torch.tensor(8.0))
            _step(recorder, optimizer)
    finally:
        undo()
    recorder.close()
    assert not getattr(engine.clip_grad_norm_, "_lrcheck", False)
    records = read_records(tmp_path / "rank0.jsonl")
    assert [r["clip_grad_norm"] for r in records] == [1, 1, 1]
    assert (records[0]["max_norm"], records[0]["clip_norm"]) == (0.5, 2.0)
    assert (records[1]["max_norm"], records[1]["clip_norm"]) == (0.25, 3.0)
    assert (records[2]["max_norm"], records[2]["clip_norm"]) == (1.5, 2.0)  # 8 / loss scale 4


def test_a_sharded_ema_is_merged_over_the_ranks_and_a_broken_file_is_named(tmp_path):
    for rank, (s, m) in enumerate([(1.0, 3.0), (2.0, 5.0)]):
        (tmp_path / f"ema-rank{rank}.jsonl").write_text(
            json.dumps({"ema": "AveragedModel", "call": "AveragedModel.update_parameters",
                        "names": ["w"], "sharded": True}) + "\n"
            + json.dumps({"after": 0, "fingerprint": [s, m]}) + "\n")
    found = read_ema(tmp_path)
    assert np.array_equal(found.prints[0], [[3.0, 5.0]])
    for rank in range(3):  # finding 11: rank 2's shards lost, rank 0's part is not the EMA
        (tmp_path / f"rank{rank}.jsonl").write_text("")
    assert read_ema(tmp_path).prints == {}
    (tmp_path / "rank2.jsonl").unlink()
    (tmp_path / "ema-rank0.jsonl").write_text('{"after": 0}\n')
    with pytest.raises(SpecError, match="ema-rank0.jsonl: not the EMA file lrcheck record"):
        read_ema(tmp_path)


def test_a_clip_with_an_infinite_max_norm_clips_nothing_and_is_not_counted(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    undo = count_calls(recorder)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        model(torch.ones(1, 3)).sum().backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))  # a norm for a log
        _step(recorder, optimizer)
    finally:
        undo()
    recorder.close()
    (r,) = read_records(tmp_path / "rank0.jsonl")
    assert r["clip_grad_norm"] == 0 and "max_norm" not in r


def test_deepspeeds_own_clearing_of_the_gradients_bounds_the_passes_that_reach_an_update(
        monkeypatch, tmp_path):
    # DeepSpeed clears the gradients after each update in its engine's zero_grad (no ZeRO) or
    # its ZeRO optimizer's, never through torch's: counted, so that `reached` is the passes of
    # the update's own window (2), not all the process made (2, 4, 6), which a resumed process
    # could not match.
    class DeepSpeedEngine(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def zero_grad(self):
            for param in self.module.parameters():
                param.grad = None

    class DeepSpeedZeroOptimizer:
        def zero_grad(self, set_to_none=True):
            for param in model.parameters():
                param.grad = None

    _module(monkeypatch, "deepspeed.runtime.engine", DeepSpeedEngine=DeepSpeedEngine)
    _module(monkeypatch, "deepspeed.runtime.zero.stage_1_and_2",
            DeepSpeedZeroOptimizer=DeepSpeedZeroOptimizer)
    recorder = ProcessRecorder(tmp_path, samples=None, every=1)
    undo = count_calls(recorder)
    model = _model()
    engine, zero = DeepSpeedEngine(model), DeepSpeedZeroOptimizer()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for k in range(4):
            for _ in range(2):
                model(torch.ones(1, 3)).sum().backward()
            _step(recorder, optimizer)
            (engine.zero_grad if k < 2 else zero.zero_grad)()
    finally:
        undo()
    recorder.close()
    records = read_records(tmp_path / "rank0.jsonl")
    assert [(r["backward"], r["reached"]) for r in records] == [(2, 2)] * 4


def test_zero3s_clear_inside_its_step_keeps_the_update_and_its_sub_groups_clip_once(
        monkeypatch, tmp_path):
    # ZeRO 3's step clears the model's gradients (already moved into its partitions) before it
    # steps the optimizer, and clips each sub-group with the one global norm; the engine clears
    # after the step. That in-step clear was read as erasing the update's gradients (every
    # micro-batch weighed 0, `reached` 0) and the clip was not counted.
    class DeepSpeedZeroOptimizer_Stage3:
        clip_grad, loss_scale, overflow = 1.5, 1.0, False

        def zero_grad(self, set_to_none=True):
            for param in model.parameters():
                param.grad = None

        def unscale_and_clip_grads(self, sub_group_id, total_norm):
            pass

        def step(self):
            norm = torch.tensor(3.0)
            if self.overflow:  # a skipped step: the gradients are erased
                self.zero_grad()
                return
            # its partitions take the gradients
            for flat, param in zip(partition, model.parameters(), strict=True):
                flat.grad = param.grad.clone()
            self.zero_grad()
            for sub_group in range(2):
                self.unscale_and_clip_grads(sub_group, norm)
            _step(recorder, optimizer)

    _module(monkeypatch, "deepspeed.runtime.zero.stage3",
            DeepSpeedZeroOptimizer_Stage3=DeepSpeedZeroOptimizer_Stage3)
    recorder = ProcessRecorder(tmp_path, samples=None, every=1)
    undo = count_calls(recorder)
    untap = tap(recorder.taps)
    model = _model()
    partition = [torch.nn.Parameter(p.detach().clone()) for p in model.parameters()]
    optimizer, zero = torch.optim.SGD(partition, lr=0.1), DeepSpeedZeroOptimizer_Stage3()
    x, y = torch.ones(4, 3), torch.zeros(4, dtype=torch.long)
    try:
        for k in range(3):
            zero.overflow = k == 1
            for m in range(2):
                (torch.nn.functional.cross_entropy(model(x[2 * m:2 * m + 2]), y[:2]) / 2).backward()
            zero.step()
            zero.zero_grad()  # the engine's, after the step
    finally:
        untap()
        undo()
    recorder.close()
    records = _lines(tmp_path / "rank0.jsonl")
    assert [(r["reached"], r["clip_grad_norm"]) for r in records] == [(2, 1), (2, 1)]
    assert records[0]["fed_weights"] == [0.25, 0.25]
    assert records[1]["clip_norm"] == 3.0
