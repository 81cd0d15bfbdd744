"""``LrcheckCallback`` on a user's own Trainer run of a causal LM: an update's loss is the mean
over the labels the loss predicts, ``labels[..., 1:]`` other than -100 (a sequence of L labels
is L-1 loss items), as the Trainer's own loss is. A tiny GPT-2 built from its config: no
weights are downloaded."""

import copy
import json

import pytest
import torch

transformers = pytest.importorskip(
    "transformers",
    reason="the transformers extra is not installed: pip install 'lrcheck[transformers]'")

from transformers import (  # noqa: E402
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from lrcheck.integrations.transformers import LrcheckCallback, shifts_labels  # noqa: E402

LENGTH = 8  # tokens a sequence
BS, ACCUM = 4, 2


def gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=50, n_positions=LENGTH, n_embd=16, n_layer=1, n_head=2,
                        bos_token_id=0, eos_token_id=0,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


def sequences(n: int) -> list[dict[str, torch.Tensor]]:
    """``n`` sequences of LENGTH tokens; the last ``i % 3`` of sequence i are padding (-100), so
    micro-batches hold different numbers of loss items."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for i in range(n):
        ids = torch.randint(0, 50, (LENGTH,), generator=g)
        labels = ids.clone()
        labels[LENGTH - i % 3:] = -100
        rows.append({"input_ids": ids, "labels": labels})
    return rows


class Snapshots(TrainerCallback):
    """The model as each update begins: the weights its micro-batches' losses are taken at."""

    def __init__(self) -> None:
        self.states: list[dict[str, torch.Tensor]] = []

    def on_step_begin(self, args, state, control, *, model=None, **kwargs):
        self.states.append(copy.deepcopy(model.state_dict()))


def train(tmp_path, model, data, epochs: int, *callbacks):
    """Train ``model`` on ``data`` with the Trainer and the callback; the Trainer's own loss of
    each update (logged every update) and the recorded ones."""
    path = tmp_path / "run.jsonl"
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=BS,
        gradient_accumulation_steps=ACCUM, num_train_epochs=epochs, learning_rate=1e-2,
        use_cpu=True, report_to="none", save_strategy="no", logging_steps=1,
        disable_tqdm=True, seed=3)
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[LrcheckCallback(path), *callbacks])
    trainer.train()
    own = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    recorded = [json.loads(line)["loss"] for line in path.read_text().splitlines()]
    return own, recorded


def test_a_causal_lms_loss_is_the_trainers_own_loss(tmp_path):
    """``loss_type="ForCausalLM"`` (what every ``*ForCausalLM`` class gets from its name; GPT-2's
    class name gives None): the Trainer counts the window's items over ``labels[..., 1:]`` and
    its loss is the mean over them. Counting every label made the recorded loss low by the
    shifted count over the unshifted one (48/56 on the first update here)."""
    model = gpt2()
    model.loss_type = "ForCausalLM"
    own, recorded = train(tmp_path, model, sequences(2 * BS * ACCUM), 1)
    assert len(own) == len(recorded) == 2
    assert recorded == pytest.approx(own, rel=1e-6), f"Trainer {own}, recorded {recorded}"


def test_gpt2s_loss_is_its_mean_over_the_shifted_labels(tmp_path):
    """Plain ``GPT2LMHeadModel``: 8 sequences, one window of bs 4 x accum 2, two epochs; each
    update's recorded loss is the model's mean cross-entropy over the whole window at the
    weights the update began with, taken here in one forward."""
    data = sequences(BS * ACCUM)
    snapshots = Snapshots()
    _, recorded = train(tmp_path, gpt2(), data, 2, snapshots)
    model = gpt2()
    expected = []
    for state in snapshots.states:
        model.load_state_dict(state)
        with torch.no_grad():
            out = model(input_ids=torch.stack([r["input_ids"] for r in data]),
                        labels=torch.stack([r["labels"] for r in data]))
        expected.append(float(out.loss))
    assert len(recorded) == 2
    assert recorded == pytest.approx(expected, rel=1e-6), f"by hand {expected}, got {recorded}"


def test_only_decoder_only_causal_lms_shift_their_labels():
    assert shifts_labels(gpt2())
    bert = transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=16))
    assert not shifts_labels(bert)
    t5 = transformers.T5ForConditionalGeneration(transformers.T5Config(
        vocab_size=50, d_model=16, d_kv=8, d_ff=16, num_layers=1, num_heads=2))
    assert t5.loss_type == "ForConditionalGeneration" and not shifts_labels(t5)
    assert not shifts_labels(torch.nn.Linear(2, 2))
