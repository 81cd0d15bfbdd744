"""A causal LM fine-tune with transformers' Trainer, as a user writes it: a tiny GPT-2 built
from a config (nothing downloaded), sentences of different lengths padded by the LM collator,
gradient_accumulation_steps, max_grad_norm, a cosine schedule with warmup.

    python hf_trainer.py --bs 16                   # the reference
    python hf_trainer.py --bs 4 --accum 4          # a correct candidate
    ... --bug mean-loss    # compute_loss overridden to return outputs.loss: each micro-batch's
                           # token mean, num_items_in_batch ignored (transformers #34191)
    ... --bug warmup-micro # warmup_steps counted in micro-batches (3 × accum)
    --dropout 0.1      # GPT-2's default dropout: the effects not comparable (warned), the causes
    --checkpointing    # gradient checkpointing: the forward recomputed in the backward
"""

import argparse
import tempfile

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    DataCollatorForLanguageModeling,
    GPT2Config,
    GPT2LMHeadModel,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
)

p = argparse.ArgumentParser()
p.add_argument("--bs", type=int, default=16)
p.add_argument("--accum", type=int, default=1)
p.add_argument("--steps", type=int, default=10)
p.add_argument("--dtype", default="float32")
p.add_argument("--dropout", type=float, default=0.0, help="GPT-2's own default: 0.1")
p.add_argument("--checkpointing", action="store_true", help="gradient_checkpointing=True")
p.add_argument("--bug", default="")
args = p.parse_args()

words = sorted({"the", "cat", "sat", "on", "a", "mat", "while", "dog", "ran", "to", "park",
                "and", "back", "again", "every", "day", "under", "grey", "skies", "with", "rain"})
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[PAD]", "[UNK]", *words])},
                                 unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="[PAD]", unk_token="[UNK]")
g = torch.Generator().manual_seed(0)
N = args.steps * args.bs * args.accum
texts = [" ".join(words[j] for j in torch.randint(len(words), (int(n),), generator=g))
         for n in torch.randint(3, 16, (N,), generator=g)]
train = [{"input_ids": tokenizer(t)["input_ids"]} for t in texts]

torch.manual_seed(0)
config = GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=32, n_layer=2, n_head=2,
                    resid_pdrop=args.dropout, embd_pdrop=args.dropout, attn_pdrop=args.dropout,
                    pad_token_id=tokenizer.pad_token_id)
model = GPT2LMHeadModel(config).to(getattr(torch, args.dtype))


class MeanLossTrainer(Trainer):
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        return (outputs.loss, outputs) if return_outputs else outputs.loss


warmup = 3 * args.accum if args.bug == "warmup-micro" else 3
with tempfile.TemporaryDirectory() as out:
    targs = TrainingArguments(output_dir=out, per_device_train_batch_size=args.bs,
                              gradient_accumulation_steps=args.accum, max_steps=args.steps,
                              learning_rate=1e-3, weight_decay=0.01, max_grad_norm=1.0,
                              lr_scheduler_type="cosine", warmup_steps=warmup, seed=0,
                              report_to="none", save_strategy="no", logging_steps=1,
                              use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
                              gradient_checkpointing=args.checkpointing)
    cls = MeanLossTrainer if args.bug == "mean-loss" else Trainer
    trainer = cls(model=model, args=targs, train_dataset=train,
                  data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False))
    trainer.train()
