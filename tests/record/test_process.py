"""``record.process``: what one process records per update, driven through its hooks by hand
(installing them in the test process would record every other test's optimizers)."""

import json

import pytest
import torch

from lrcheck.hparams import OptimizerSettings
from lrcheck.record.calls import count_calls, count_scheduler_steps
from lrcheck.record.process import ProcessRecorder
from lrcheck.recorder import read_records


def _model():
    torch.manual_seed(0)
    return torch.nn.Linear(3, 2)


def _step(recorder, optimizer):
    """The optimizer's step between the recorder's hooks."""
    recorder.pre(optimizer, (), {})
    optimizer.step()
    recorder.post(optimizer, (), {})


def _update(recorder, optimizer, model):
    model(torch.ones(1, 3)).sum().backward()
    _step(recorder, optimizer)
    optimizer.zero_grad()


def test_each_update_is_one_line_with_lr_hparams_and_a_fingerprint_every_k(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=32, every=2)
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    for _ in range(3):
        _update(recorder, optimizer, model)
    recorder.close()
    records = read_records(tmp_path / "rank0.jsonl")
    lines = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert [r["samples_seen"] for r in records] == [32, 64, 96]
    assert lines[0]["hparams"]["betas"] == [[0.9, 0.999]]
    assert lines[0]["hparams"]["weight_decay"] == [0.5] and "lr" not in lines[0]["hparams"]
    assert lines[0]["optimizer"] == "torch.optim.adamw.AdamW"
    assert lines[0]["state_keys"] == [["exp_avg", "exp_avg_sq", "step"]]
    assert not any(key in line for line in lines[1:]  # written where they change only
                   for key in ("optimizer", "hparams", "state_keys"))
    assert ["fingerprint" in r for r in records] == [True, False, True]
    assert ["grad_sq" in r for r in records] == [True, False, True]
    about = json.loads((tmp_path / "rank0.json").read_text())
    assert about["optimizers"][0]["updates"] == 3 and about["optimizers"][0]["tensors"] == 2


def test_a_setting_a_schedule_drives_is_written_where_it_changes(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=4)
    for _ in range(3):
        _update(recorder, optimizer, model)
        scheduler.step()
    recorder.close()
    settings = OptimizerSettings.from_records(read_records(tmp_path / "rank0.jsonl"))
    assert settings is not None and settings.cls == "torch.optim.sgd.SGD"
    momenta = [s["momentum"][0] for s in settings.settings]
    assert len(set(momenta)) == 3 and momenta[0] == 0.95  # OneCycleLR's max_momentum first
    assert "max_momentum" not in settings.settings[0]  # the scheduler's own, not compared
    assert settings.state == ((("momentum_buffer",),),) * 3


def test_a_nested_step_counts_once_and_a_step_without_gradients_is_a_phantom(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    recorder.pre(optimizer, (), {})  # DeepSpeed bf16's step at construction: no gradient
    recorder.post(optimizer, (), {})
    model(torch.ones(1, 3)).sum().backward()
    recorder.pre(optimizer, (), {})
    recorder.pre(optimizer, (), {})  # super().step() of a subclass fires the hooks again
    recorder.post(optimizer, (), {})
    recorder.post(optimizer, (), {})
    recorder.close()
    assert len(read_records(tmp_path / "rank0.jsonl")) == 1
    assert json.loads((tmp_path / "rank0.json").read_text())["optimizers"][0]["phantom_steps"] == 1


def test_a_wrapper_stepping_the_optimizer_is_named_and_zeros_partitions_are_marked(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    class ZeROOptimizer:  # as deepspeed.runtime.base_optimizer names ZeRO's optimizers' base
        pass

    ZeROOptimizer.__module__ = "deepspeed.runtime.base_optimizer"

    class Stage2(ZeROOptimizer):
        def __init__(self, optimizer):
            self.optimizer = optimizer

        def step(self):
            _update(recorder, self.optimizer, model)

    Stage2(optimizer).step()
    recorder.close()
    about = json.loads((tmp_path / "rank0.json").read_text())["optimizers"][0]
    assert about["wrapper"].endswith("Stage2") and about["partitioned"] and about["sharded"]


def test_an_optimizer_stepped_directly_has_no_wrapper(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    model = _model()
    _update(recorder, torch.optim.SGD(model.parameters(), lr=0.1), model)
    recorder.close()
    about = json.loads((tmp_path / "rank0.json").read_text())["optimizers"][0]
    assert about["wrapper"] is None and not about["partitioned"] and not about["sharded"]


def test_scheduler_steps_and_scaler_skips_are_counted_per_update(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    class Outer(torch.optim.lr_scheduler.LambdaLR):
        def step(self, *args, **kwargs):  # an inner step counts as part of the outer one
            super().step(*args, **kwargs)

    base = torch.optim.lr_scheduler.LRScheduler
    originals = {cls: cls.__dict__["step"] for cls in (Outer, base)}
    for cls in originals:
        count_scheduler_steps(cls, recorder)
    try:
        scheduler = Outer(optimizer, lambda s: 1.0)  # its first step, at construction, counts
        # Stepping the schedule before the first optimizer step is what torch warns about (and
        # what the recording must count before update 0).
        with pytest.warns(UserWarning, match=r"lr_scheduler.step\(\)` before `optimizer.step"):
            scheduler.step()
            scheduler.step()
        recorder.scaler_stepped(recorder.scaler_stepping(object(), optimizer))  # no hook: skipped
        _update(recorder, optimizer, model)
        _update(recorder, optimizer, model)
    finally:
        for cls, step in originals.items():
            cls.step = step
    recorder.close()
    lines = [json.loads(line) for line in (tmp_path / "rank0.jsonl").read_text().splitlines()]
    assert [(r["scheduler_steps"], r["skipped"]) for r in lines] == [(3, 1), (0, 0)]
    # Where the training stood before update 0 and at the end (record.stages): the schedule's
    # position (its 3 steps), SGD's state (none), the weights (moved by the 2 updates).
    about = json.loads((tmp_path / "rank0.json").read_text())
    assert about["start"]["sched_epoch"] == about["end"]["sched_epoch"] == 2
    assert about["start"]["opt_step"] == about["end"]["opt_step"] == 0
    assert about["start"]["fingerprint"] != about["end"]["fingerprint"]


@pytest.mark.parametrize("name", ["rank0", "rank0-p"])
def test_a_second_process_of_the_same_rank_gets_its_own_files(tmp_path, name):
    if name == "rank0-p":
        (tmp_path / "rank0.json").write_text("{}")
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    model = _model()
    _update(recorder, torch.optim.SGD(model.parameters(), lr=0.1), model)
    recorder.close()
    assert any(p.name.startswith(name) and p.suffix == ".jsonl" for p in tmp_path.iterdir())


def _accumulate(recorder, optimizer, model, micro, *, zero_each=False, clip_each=False,
                ema=None, ema_each=False):
    """One update of ``micro`` micro-batches, clipping once (or after every backward), an EMA
    updated once (or per micro-batch)."""
    for m in range(micro):
        if zero_each:
            optimizer.zero_grad()
        (model(torch.full((2, 3), float(m + 1))).sum() / micro).backward()
        if clip_each:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        if ema is not None and ema_each:
            ema.update_parameters(model)
    if not clip_each:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
    recorder.pre(optimizer, (), {})
    optimizer.step()
    recorder.post(optimizer, (), {})
    if ema is not None and not ema_each:
        ema.update_parameters(model)
    optimizer.zero_grad()


@pytest.mark.parametrize("bug", [None, "zero_each", "clip_each", "ema_each"])
def test_the_cadence_counts_each_call_since_the_previous_update(tmp_path, bug):
    recorder = ProcessRecorder(tmp_path, samples=None, every=1)
    undo = count_calls(recorder)
    try:
        model = _model()
        ema = torch.optim.swa_utils.AveragedModel(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", enabled=False)  # its update is still a call
        for _ in range(2):
            _accumulate(recorder, optimizer, model, 3, ema=ema,
                        **({bug: True} if bug else {}))
            scaler.update()
    finally:
        undo()
    recorder.close()
    assert not getattr(torch.autograd.backward, "_lrcheck", False)
    assert not getattr(torch.nn.utils.clip_grad_norm_, "_lrcheck", False)
    records = read_records(tmp_path / "rank0.jsonl")
    for k, r in enumerate(records):
        assert r["backward"] == 3
        assert r["clip_grad_norm"] == (3 if bug == "clip_each" else 1)
        assert r["max_norm"] == 0.5 and r["clip_norm"] > 0 and r["clip_grad_value"] == 0
        assert r["reached"] == (1 if bug == "zero_each" else 3)
        # zero_grad after each step counts for the next update
        assert r["zero_grad"] == (3 if bug == "zero_each" else 0) + k
        assert r["ema_update"] == (3 if bug == "ema_each" else k)
        assert r["scaler_update"] == k
        assert r["opt_step"] == k + 1  # AdamW's state after this update's step
    about = json.loads((tmp_path / "rank0.json").read_text())
    assert (about["start"]["opt_step"], about["end"]["opt_step"]) == (0, 2)
    assert about["start"]["sched_epoch"] is None and about["started"] > 0  # no scheduler


def _clip_by_norm(model, max_norm, meshes=1):
    """Accelerate's and the Trainer's clipping (torch >= 2.6): the norm first, then the clip
    with it, once per device mesh's parameters."""
    params = list(model.parameters())
    total = torch.nn.utils.get_total_norm([p.grad for p in params])
    if max_norm != float("inf"):
        for part in range(meshes):
            torch.nn.utils.clip_grads_with_norm_(params[part::meshes], max_norm, total)
    return total


CLIPS = {  # each way of clipping once per update (or not at all), and the clips it counts
    "clip_grad_norm_": (lambda m: torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5), 1),
    "get_total_norm + clip_grads_with_norm_": (lambda m: _clip_by_norm(m, 0.5), 1),
    "the same total_norm on two meshes": (lambda m: _clip_by_norm(m, 0.5, meshes=2), 1),
    "clip_grads_with_norm_ by keyword": (lambda m: torch.nn.utils.clip_grads_with_norm_(
        m.parameters(), max_norm=0.5, total_norm=torch.nn.utils.get_total_norm(
            [p.grad for p in m.parameters()])), 1),
    "get_total_norm alone (a log)": (lambda m: _clip_by_norm(m, float("inf")), 0),
    "twice, each its own norm": (lambda m: (_clip_by_norm(m, 0.5), _clip_by_norm(m, 0.5)), 2)}


@pytest.mark.parametrize("how", list(CLIPS))
def test_each_public_clipping_path_counts_one_clip_with_its_max_norm_and_pre_clip_norm(
        tmp_path, how):
    clip, expected = CLIPS[how]
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    undo = count_calls(recorder)
    try:
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.full((2, 3), 3.0)).sum().backward()
        norm = float(torch.linalg.vector_norm(torch.cat([p.grad.ravel()
                                                         for p in model.parameters()])))
        clip(model)
        _step(recorder, optimizer)
    finally:
        undo()
    recorder.close()
    assert not getattr(torch.nn.utils.clip_grads_with_norm_, "_lrcheck", False)
    (r,) = read_records(tmp_path / "rank0.jsonl")
    assert r["clip_grad_norm"] == expected
    if expected == 1:  # the pre-clip norm, which binds (0.5 < 7.5)
        assert r["max_norm"] == 0.5 and r["clip_norm"] == pytest.approx(norm, rel=1e-6)
    elif expected == 0:
        assert "max_norm" not in r and "clip_norm" not in r


def test_a_model_zero_grad_and_a_nested_backward_count_once(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    undo = count_calls(recorder)
    try:
        model = _model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 3)).sum().backward()
        model.zero_grad()  # the Transformers Trainer's way
        model(torch.ones(1, 3)).sum().backward()
        torch.autograd.backward(model(torch.ones(1, 3)).sum())
        # a reentrant checkpoint runs a backward inside the backward: one pass
        checkpoint = torch.utils.checkpoint.checkpoint
        checkpoint(model, torch.ones(1, 3, requires_grad=True), use_reentrant=True).sum().backward()
        torch.nn.utils.clip_grad.clip_grad_value_(model.parameters(), clip_value=0.1)
        recorder.pre(optimizer, (), {})
        optimizer.step()
        recorder.post(optimizer, (), {})
    finally:
        undo()
    recorder.close()
    (r,) = read_records(tmp_path / "rank0.jsonl")
    assert (r["backward"], r["reached"], r["zero_grad"]) == (4, 3, 1)
    assert (r["clip_grad_value"], r["clip_value"], r["clip_grad_norm"]) == (1, 0.1, 0)
    assert "opt_step" not in r and "clip_norm" not in r  # SGD keeps no step counter


def test_a_lockstep_pair_s_side_fingerprints_every_update_once_lockstep_is_off(tmp_path):
    from types import SimpleNamespace

    from lrcheck.record import roles

    recorder = ProcessRecorder(tmp_path, samples=None, every=50)
    st = recorder.state(torch.optim.SGD(_model().parameters(), lr=0.1))
    assert not recorder.dense(st)  # lrcheck record: every 50th update
    recorder.role, recorder.follower = roles.CANDIDATE, SimpleNamespace(off=None)
    assert not recorder.dense(st)  # in lockstep: lockstep judges every update
    recorder.follower.off = "the optimizers' states differ"
    assert recorder.dense(st)
    recorder.role, recorder.streamer = roles.REFERENCE, SimpleNamespace(off=False)
    assert recorder.dense(st)  # its first updates, before it can know the candidate follows
    st.recorder.step = 9
    assert not recorder.dense(st)
    recorder.streamer.off = True  # every candidate rank stopped following
    assert recorder.dense(st)
    recorder.streamer, st.sharded = None, True  # a rank of a sharded reference
    assert recorder.dense(st)
    recorder.follower = None
    recorder.close()


def test_the_global_rngs_are_fingerprinted_at_each_updates_step_where_they_stood_after_the_forwards(
        tmp_path):
    """torch's, NumPy's and Python's ``random``'s: each print moves with its own draws only."""
    import random

    import numpy as np

    from lrcheck.record.stages import rng_prints

    def seed():
        torch.manual_seed(3)
        np.random.seed(3)
        random.seed(3)

    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seed()
    seeded = rng_prints()
    _update(recorder, optimizer, model)  # draws nothing
    torch.rand(4)  # a dropout's masks
    np.random.rand(4)  # an augmentation's draws; none from Python's random
    _update(recorder, optimizer, model)
    recorder.close()
    keys = ("rng", "rng_numpy", "rng_python")
    prints = [{k: r[k] for k in keys} for r in read_records(tmp_path / "rank0.jsonl")]
    seed()
    torch.rand(4)
    np.random.rand(4)
    assert prints == [seeded, rng_prints()]
    assert [prints[0][k] != prints[1][k] for k in keys] == [True, True, False]
