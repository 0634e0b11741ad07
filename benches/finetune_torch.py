#!/usr/bin/env python3
"""PyTorch's standard fine-tuning recipe on bertpipe's shards, for benches/finetune.sh: the
same checkpoint, rows, batch size, epochs, learning rate, warmup, weight decay (none on biases
and LayerNorm) and clipping as the bertpipe run; a seeded shuffled DataLoader with dynamic
padding (as DataCollatorWithPadding); evaluation and a checkpoint (model + optimiser) at each
epoch's end, as HF Trainer with eval/save_strategy "epoch". Prints one JSON line.
Usage: finetune_torch.py CHECKPOINT SHARDS OUT EPOCHS BATCH LR WARMUP_RATIO
Environment: MAX_STEPS (stop after N steps), PAD_TO (pad every batch to at least N tokens, as
bertpipe's pad_to_max_length), GRADIENT_CHECKPOINTING=1 (model.gradient_checkpointing_enable())."""
import glob, inspect, json, math, os, sys, time
import pyarrow.parquet as pq
import torch
from transformers import AutoModelForSequenceClassification, get_linear_schedule_with_warmup

ckpt, shards, out = sys.argv[1:4]
epochs, batch, lr, warmup = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
torch.manual_seed(42)
torch.set_num_threads(os.cpu_count())

def rows(split):
    ids, types, labels = [], [], []
    for f in sorted(glob.glob(f"{shards}/{split}/*.parquet")):
        t = pq.read_table(f, columns=["input_ids", "token_type_ids", "label"]).to_pydict()
        ids += t["input_ids"]; types += t["token_type_ids"]; labels += t["label"]
    return ids, types, labels

PAD_TO = int(os.environ.get("PAD_TO", "0"))

def collate(items):
    longest = max(max(len(i) for i, _, _ in items), PAD_TO)
    pad = lambda xs: [x + [0] * (longest - len(x)) for x in xs]
    ids, types, labels = zip(*items)
    mask = [[1] * len(x) + [0] * (longest - len(x)) for x in ids]
    return (torch.tensor(pad(list(ids))), torch.tensor(pad(list(types))), torch.tensor(mask), torch.tensor(labels))

train, test = list(zip(*rows("train"))), list(zip(*rows("test")))
num_labels = max(l for *_, l in train) + 1
model = AutoModelForSequenceClassification.from_pretrained(ckpt, num_labels=num_labels)
# ModernBERT takes no token_type_ids.
TYPES = "token_type_ids" in inspect.signature(model.forward).parameters

def run(ids, types, mask, **kw):
    if TYPES:
        kw["token_type_ids"] = types
    return model(input_ids=ids, attention_mask=mask, **kw)
if os.environ.get("GRADIENT_CHECKPOINTING") == "1":
    model.gradient_checkpointing_enable()
# HF Trainer's rule, as bertpipe's optimiser: no decay on biases and on every LayerNorm, which
# ModernBERT names `norm`, `attn_norm`, `mlp_norm`, `final_norm`.
no_decay = lambda n: (n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n
                      or n.rsplit(".", 2)[-2].endswith("norm"))
groups = [
    {"params": [p for n, p in model.named_parameters() if not no_decay(n)], "weight_decay": 0.01},
    {"params": [p for n, p in model.named_parameters() if no_decay(n)], "weight_decay": 0.0},
]
opt = torch.optim.AdamW(groups, lr=lr)
loader = torch.utils.data.DataLoader(train, batch_size=batch, shuffle=True, collate_fn=collate,
                                     generator=torch.Generator().manual_seed(42))
total = epochs * len(loader)
# MAX_STEPS (benches/train_memory.sh): stop after that many optimiser steps, then evaluate and
# save as at an epoch's end.
max_steps = int(os.environ.get("MAX_STEPS", "0")) or total
total = min(total, max_steps)
sched = get_linear_schedule_with_warmup(opt, math.ceil(warmup * total), total)

def evaluate():
    model.eval()
    conf = [[0] * num_labels for _ in range(num_labels)]
    with torch.no_grad():
        for i in range(0, len(test), 64):
            ids, types, mask, y = collate(test[i:i + 64])
            pred = run(ids, types, mask).logits.argmax(-1)
            for t, p in zip(y.tolist(), pred.tolist()):
                conf[t][p] += 1
    model.train()
    acc = sum(conf[c][c] for c in range(num_labels)) / len(test)
    f1s = []
    for c in range(num_labels):
        tp, fp, fn = conf[c][c], sum(conf[r][c] for r in range(num_labels)) - conf[c][c], sum(conf[c]) - conf[c][c]
        p, r = tp / max(tp + fp, 1), tp / max(tp + fn, 1)
        f1s.append(0.0 if p + r == 0 else 2 * p * r / (p + r))
    return acc, sum(f1s) / num_labels

started = time.perf_counter()
model.train()
history = []
step = 0
for epoch in range(epochs):
    for ids, types, mask, y in loader:
        loss = run(ids, types, mask, labels=y).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); sched.step(); opt.zero_grad()
        step += 1
        if step == total:
            break
    acc, f1 = evaluate()
    history.append({"epoch": epoch + 1, "accuracy": acc, "macro_f1": f1})
    d = f"{out}/checkpoint-epoch{epoch + 1}"
    model.save_pretrained(d); torch.save(opt.state_dict(), f"{d}/optimizer.pt")
    if step == total:
        break
print(json.dumps({"seconds": time.perf_counter() - started, "accuracy": acc, "macro_f1": f1,
                  "steps": total, "history": history, "torch": torch.__version__}))
