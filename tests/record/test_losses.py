"""``record.losses``: the loss each update differentiated, written into the Recorder line by
the hooks (driven by hand, as in test_process.py), with the clip's pre-clip norm every update;
and the ranks' losses merged as their mean (``record.folder``)."""

import torch

from lrcheck.record.calls import count_calls
from lrcheck.record.folder import merge
from lrcheck.record.process import ProcessRecorder
from lrcheck.recorder import read_records


def _train(recorder, accum, updates=2, zero_first=False):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for k in range(updates):
        micro = []
        for m in range(accum):
            if zero_first and m == accum - 1:
                optimizer.zero_grad()
                micro = []
            loss = model(torch.full((2, 3), float(k + m + 1))).pow(2).mean()
            micro.append(float(loss.detach()) / accum)
            (loss / accum).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.5)
        recorder.pre(optimizer, (), {})
        optimizer.step()
        recorder.post(optimizer, (), {})
        optimizer.zero_grad()
        seen.append((micro, float(norm)))
    return seen


def test_each_update_has_the_sum_of_its_backward_values_and_the_pre_clip_norm(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)  # no fingerprints
    undo = count_calls(recorder)
    try:
        seen = _train(recorder, accum=3)
    finally:
        undo()
    recorder.close()
    records = read_records(tmp_path / "rank0.jsonl")
    assert len(records) == 2
    for r, (micro, norm) in zip(records, seen, strict=True):
        assert [round(v, 5) for v in r["loss_micro"]] == [round(v, 5) for v in micro]
        assert abs(r["loss_backward"] - sum(micro)) < 1e-5 * sum(micro)
        # every update, not every K-th: the norm clip_grad_norm_ returned
        assert r["clip_norm"] == norm and r["max_norm"] == 0.5


def test_a_zero_grad_drops_the_values_before_it_and_a_non_scalar_is_null(tmp_path):
    recorder = ProcessRecorder(tmp_path, samples=None, every=0)
    undo = count_calls(recorder)
    try:
        seen = _train(recorder, accum=3, updates=1, zero_first=True)
        model = torch.nn.Linear(3, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        out = model(torch.ones(1, 3))
        out.backward(torch.ones_like(out))  # a gradient given: not a loss's value
        recorder.pre(optimizer, (), {})
        optimizer.step()
        recorder.post(optimizer, (), {})
    finally:
        undo()
    recorder.close()
    (r,) = read_records(tmp_path / "rank0.jsonl")
    assert len(r["loss_micro"]) == 1 and abs(r["loss_micro"][0] - seen[0][0][0]) < 1e-6
    (other,) = read_records(tmp_path / "rank0-opt1.jsonl")
    assert "loss_micro" not in other  # only the first optimizer's updates carry them
    assert r["backward"] == 3


def test_the_ranks_losses_merge_as_their_mean():
    lines = [{"step": 0, "samples_seen": 1, "lr": [0.1], "loss_backward": 1.0,
              "loss_micro": [0.25, 0.75]},
             {"step": 0, "samples_seen": 1, "lr": [0.1], "loss_backward": 3.0,
              "loss_micro": [1.0, None]}]
    (record,), _ = merge([[lines[0]], [lines[1]]], sharded=False)
    assert record["loss_backward"] == 2.0
    assert record["loss_micro"] == [0.625, None]


def test_the_log_folders_of_a_trainer_alive_are_noted(monkeypatch, tmp_path):
    import sys
    import types

    from lrcheck.record import modules

    for name in ("transformers.trainer", "lightning.pytorch.trainer.trainer",
                 "pytorch_lightning.trainer.trainer"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert modules.log_folders() == []  # no trainer's module imported: nothing looked at

    class Args:
        logging_dir = str(tmp_path / "runs" / "x")
        output_dir = "out"

    class Trainer:
        args = Args()

    class LightningTrainer:
        default_root_dir = str(tmp_path)

        @property
        def log_dir(self):
            raise RuntimeError("no logger yet")

    fake = types.ModuleType("transformers.trainer")
    fake.Trainer = Trainer
    light = types.ModuleType("lightning.pytorch.trainer.trainer")
    light.Trainer = LightningTrainer
    monkeypatch.setitem(sys.modules, "transformers.trainer", fake)
    monkeypatch.setitem(sys.modules, "lightning.pytorch.trainer.trainer", light)
    monkeypatch.chdir(tmp_path)

    class Mine(Trainer):  # a subclass, as users' and TRL's trainers are
        pass

    alive = [Mine(), LightningTrainer()]
    found = modules.log_folders()
    assert sorted((f["framework"], f["folder"]) for f in found) == [
        ("lightning", str(tmp_path)), ("transformers", str(tmp_path / "out")),
        ("transformers", str(tmp_path / "runs" / "x"))]
    # the logging_dir before the output_dir: the more precise first
    mine = [f["folder"] for f in found if f["framework"] == "transformers"]
    assert mine == [str(tmp_path / "runs" / "x"), str(tmp_path / "out")]
    del alive
