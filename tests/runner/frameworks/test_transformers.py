"""``--framework transformers``: both runs through the real Transformers Trainer, and
``LrcheckCallback`` on a user's own Trainer run."""

import json

import numpy as np
import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    reason="the transformers extra is not installed: pip install 'lrcheck[transformers]'")

import lrcheck  # noqa: E402
from lrcheck.integrations.transformers import LrcheckCallback  # noqa: E402
from lrcheck.spec import Tolerances  # noqa: E402

FLOAT64 = Tolerances.for_dtype("float64")  # the user's runs train in float64
EPOCHS = 2


def summary(report) -> str:
    return "\n".join(f"{c.name}: {c.status} {c.detail}" for c in report.checks)


def through_trainer(**candidate):
    return lrcheck.compare(framework="transformers", epochs=EPOCHS, **candidate)


@pytest.mark.slow
def test_accum_trains_exactly_like_bs_32_on_whole_windows():
    # synthetic 1600: 1280 training samples, 40 whole windows of 32 an epoch.
    report = through_trainer(task="synthetic", samples=1600, bs=16, accum=2)
    assert report.ok, summary(report)
    assert report.check("params").max_rel_diff <= 1e-9, summary(report)
    cand = report.candidate
    assert len(cand.updates) == 40 * EPOCHS
    # The Trainer steps its scheduler once per update; the context is the schedule it made.
    assert [u.scheduler_steps for u in cand.updates[:3]] == [0, 1, 2]
    assert cand.context.total_steps == 40 * EPOCHS
    assert cand.context.warmup_steps == 8  # ceil(0.1 · 80)
    # Each micro-batch's mean was divided by the 2 micro-batches of its window.
    assert {m.weight for w in cand.windows for m in w} == {0.5}
    assert [len(m.ids) for m in cand.windows[0]] == [16, 16]
    assert sorted(np.concatenate([m.ids for m in cand.windows[0]]).tolist()) == sorted(
        report.reference.windows[0][0].ids.tolist())
    assert report.environment.frameworks["transformers"] == transformers.__version__


@pytest.mark.slow
def test_the_last_window_of_an_epoch_weighs_micro_batch_means_equally():
    """digits: 1437 = 44·32 + 29. The Trainer steps on the last, partial window (16 + 13)
    and divides each micro-batch's mean by 2: (mean16 + mean13)/2, not the mean of 29."""
    report = through_trainer(bs=16, accum=2)
    params, loss = report.check("params"), report.check("loss")
    assert params.status == "fail" and params.first_divergence == 44, summary(report)
    # The update's own loss is over the same 29 samples; the next one shows the difference.
    assert loss.status == "fail" and loss.first_divergence == 45, summary(report)
    assert report.check("lr").status == "pass"
    assert report.check("updates").status == "pass"
    last = report.candidate.windows[44]
    assert [(len(m.ids), m.weight) for m in last] == [(16, 0.5), (13, 0.5)]


@pytest.mark.slow
def test_num_items_in_batch_weighs_the_last_window_by_its_samples():
    report = through_trainer(bs=16, accum=2, trainer_loss="num-items")
    assert report.ok, summary(report)
    assert report.check("params").max_rel_diff <= 1e-9
    last = report.candidate.windows[44]
    assert [len(m.ids) for m in last] == [16, 13]
    assert [m.weight for m in last] == pytest.approx([16 / 29, 13 / 29], rel=1e-12)


@pytest.mark.slow
def test_two_processes_train_like_one_on_whole_windows():
    report = lrcheck.compare(framework="transformers", world=2, bs=8, accum=2,
                             task="synthetic", samples=1600, epochs=EPOCHS)
    assert report.ok, summary(report)
    assert report.check("params").max_rel_diff <= 1e-9
    window = report.candidate.windows[0]
    assert sorted((m.rank, len(m.ids), m.weight) for m in window) == [
        (0, 8, 0.25), (0, 8, 0.25), (1, 8, 0.25), (1, 8, 0.25)]


# A user's own Trainer run, recorded with the callback.

class Tiny(torch.nn.Module):
    """A model of one's own: forward(x, labels) returns the mean cross-entropy."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3, dtype=torch.float64)

    def forward(self, x, labels):
        logits = self.lin(x)
        return {"loss": torch.nn.functional.cross_entropy(logits, labels), "logits": logits}


def samples(n: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, dtype=torch.float64, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return [{"x": x[i], "labels": y[i]} for i in range(n)]


def own_run(tmp_path, name: str, n: int, bs: int, accum: int, every: int = 1):
    from transformers import Trainer, TrainingArguments

    path = tmp_path / f"{name}.jsonl"
    args = TrainingArguments(
        output_dir=str(tmp_path / name), per_device_train_batch_size=bs,
        gradient_accumulation_steps=accum, num_train_epochs=2, learning_rate=0.5,
        lr_scheduler_type="linear", warmup_steps=0.25, max_grad_norm=0.0, use_cpu=True,
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True,
        seed=3)
    trainer = Trainer(model=Tiny(), args=args, train_dataset=samples(n),
                      callbacks=[LrcheckCallback(path, every=every)])
    trainer.train()
    return path


@pytest.mark.slow
def test_the_callback_records_a_users_run_and_diff_passes_when_equivalent(tmp_path):
    # 256 samples: 8 whole windows of 32 an epoch; the Trainer's seeded sampler gives both the
    # same order.
    ref = own_run(tmp_path, "ref", 256, 32, 1)
    cand = own_run(tmp_path, "cand", 256, 16, 2)
    lines = [json.loads(line) for line in cand.read_text().splitlines()]
    assert len(lines) == 16
    assert [line["samples_seen"] for line in lines[:2]] == [32, 64]
    assert all(len(line["fingerprint"]) == 4 for line in lines)  # weight and bias: sum, peak
    report = lrcheck.diff(ref, cand, tolerances=FLOAT64)
    assert report.ok, summary(report)


@pytest.mark.slow
def test_diff_fails_at_the_first_differing_update(tmp_path):
    # 250 samples: the last window of each epoch holds 26, in micro-batches of 16 and 10
    # weighted 1/2 each; update 7 moves the parameters differently, and update 8's loss shows.
    ref = own_run(tmp_path, "ref", 250, 32, 1)
    cand = own_run(tmp_path, "cand", 250, 16, 2)
    report = lrcheck.diff(ref, cand, tolerances=FLOAT64)
    assert not report.ok
    assert report.check("lr").status == "pass", summary(report)
    failed = [c for c in report.checks if c.status == "fail"]
    # params (when diff checks fingerprints) fails at 7 itself, the loss one update later.
    assert min(c.first_divergence for c in failed) == (
        7 if report.check("params").status == "fail" else 8), summary(report)


@pytest.mark.slow  # the first Trainer of a process imports its machinery: seconds
def test_every_n_updates_carries_a_fingerprint(tmp_path):
    path = own_run(tmp_path, "every", 128, 16, 2, every=3)  # 8 updates
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [i for i, line in enumerate(lines) if "fingerprint" in line] == [0, 3, 6]
    # The loss is the update's mean over its 32 samples, as the reference records it.
    assert all(line["loss"] is not None for line in lines)


def test_the_callback_needs_somewhere_to_write():
    with pytest.raises(ValueError, match="path"):
        LrcheckCallback()
    with pytest.raises(ValueError, match="every"):
        LrcheckCallback("x.jsonl", every=0)


@pytest.mark.slow
def test_two_processes_fill_the_last_round_with_samples_from_the_epochs_start():
    """digits on 2 processes, bs 8: the last window has 29 samples, Accelerate's even_batches
    gives rank 1 a full micro-batch of 8 by repeating 3 samples from the start of the epoch."""
    report = lrcheck.compare(framework="transformers", world=2, bs=8, accum=2, epochs=1,
                             trainer_loss="num-items")
    loss = report.check("loss")
    assert loss.status == "fail" and loss.first_divergence == 44, summary(report)
    last = report.candidate.windows[44]
    ids = np.concatenate([m.ids for m in last])
    assert len(ids) == 32 and not set(ids) <= set(report.reference.windows[44][0].ids)
    assert report.candidate.updates[44].samples_seen == 1440


@pytest.mark.slow
def test_two_processes_without_even_batches_and_num_items_train_like_one():
    report = lrcheck.compare(framework="transformers", world=2, bs=8, accum=2, epochs=1,
                             trainer_loss="num-items", even_batches=False)
    assert report.ok, summary(report)
    last = report.candidate.windows[44]
    assert sorted((m.rank, len(m.ids)) for m in last) == [(0, 8), (0, 8), (1, 5), (1, 8)]
    assert sum(m.weight for m in last) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.slow
def test_drop_last_keeps_a_lone_micro_batch_with_the_whole_gradient():
    """dataloader_drop_last drops the last 13 samples of bs 16 but keeps the window of the 89th
    micro-batch, alone and divided by 1; the bs-32 reference drops 29 and makes 44 updates an
    epoch, so its schedule is shorter too."""
    report = through_trainer(bs=16, accum=2, drop_last=True)
    assert report.check("updates").status == "fail", summary(report)
    assert (len(report.reference.updates), len(report.candidate.updates)) == (88, 90)
    assert report.check("lr").first_divergence == 10
    assert [(len(m.ids), m.weight) for m in report.candidate.windows[44]] == [(16, 1.0)]
    assert report.candidate.context.micro_batches_per_epoch == 89
    assert report.reference.context.total_steps == 88
