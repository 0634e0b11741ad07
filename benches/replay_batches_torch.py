#!/usr/bin/env python3
"""PyTorch trains on exactly bertpipe's batches: the rows that `bertpipe train X.yaml --dry-run
--show-batches 0:0..N` lists for each batch of epoch 0, padded as bertpipe pads them, with the
recipe of benches/finetune_torch.py (AdamW, no decay on biases and norms, linear warmup 10%,
clipping at 1.0). Prints each step's loss, gradient norm (before clipping) and learning rate as
JSON lines — the fields of bertpipe's metrics.jsonl — then the test split's accuracy.

It tells a difference of data order from a difference of arithmetic: with the same batches a
ModernBERT from random weights gives bertpipe's losses and gradient norms step by step (to
~1e-6) and its accuracy after the epoch, where PyTorch's own shuffled order gives another.

Usage: replay_batches_torch.py SHARDS CHECKPOINT PLAN.txt NUM_LABELS [LR] [WEIGHT_DECAY]
  bertpipe train train.yaml --dry-run --show-batches 0:0..68 > plan.txt
  python benches/replay_batches_torch.py shards ckpt plan.txt 3 5e-5 0.01
"""
import glob, json, math, sys
import pyarrow.parquet as pq
import torch
from transformers import AutoModelForSequenceClassification, get_linear_schedule_with_warmup

torch.manual_seed(42)
shards, ckpt, plan, num_labels = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
lr = float(sys.argv[5]) if len(sys.argv) > 5 else 5e-5
decay = float(sys.argv[6]) if len(sys.argv) > 6 else 0.01


def split(name):
    ids, labels = [], []
    for f in sorted(glob.glob(f"{shards}/{name}/*.parquet")):
        t = pq.read_table(f, columns=["input_ids", "label"]).to_pydict()
        ids += t["input_ids"]; labels += t["label"]
    return ids, labels


def padded(ids, rows):
    longest = max(len(ids[r]) for r in rows)
    x = torch.tensor([ids[r] + [0] * (longest - len(ids[r])) for r in rows])
    m = torch.tensor([[1] * len(ids[r]) + [0] * (longest - len(ids[r])) for r in rows])
    return x, m


ids, labels = split("train")
# --show-batches lines: epoch, batch, step, row (position in the split), id, label, tokens.
batches = {}
for line in open(plan):
    p = line.rstrip("\n").split("\t")
    if len(p) >= 7 and p[0] == "0" and p[1].isdigit():
        batches.setdefault(int(p[1]), []).append(int(p[3]))
steps = len(batches)
model = AutoModelForSequenceClassification.from_pretrained(ckpt, num_labels=num_labels)
no_decay = lambda n: (n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n
                      or n.rsplit(".", 2)[-2].endswith("norm"))
groups = [{"params": [p for n, p in model.named_parameters() if not no_decay(n)], "weight_decay": decay},
          {"params": [p for n, p in model.named_parameters() if no_decay(n)], "weight_decay": 0.0}]
opt = torch.optim.AdamW(groups, lr=lr)
sched = get_linear_schedule_with_warmup(opt, math.ceil(0.1 * steps), steps)
model.train()
for b in range(steps):
    rows = batches[b]
    x, m = padded(ids, rows)
    rate = sched.get_last_lr()[0]
    loss = model(input_ids=x, attention_mask=m, labels=torch.tensor([labels[r] for r in rows])).loss
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); sched.step(); opt.zero_grad()
    print(json.dumps({"step": b + 1, "loss": loss.item(), "grad_norm": norm.item(), "learning_rate": rate}), flush=True)
test_ids, test_labels = split("test")
model.eval()
correct = 0
with torch.no_grad():
    for i in range(0, len(test_ids), 64):
        rows = list(range(i, min(i + 64, len(test_ids))))
        pred = model(*padded(test_ids, rows)).logits.argmax(-1).tolist()
        correct += sum(int(p == test_labels[r]) for p, r in zip(pred, rows))
print(json.dumps({"accuracy": correct / len(test_ids)}))
