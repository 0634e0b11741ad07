#!/usr/bin/env python3
"""The reference side of benches/eval.sh: a seeded random BERT sequence classifier saved as an HF
checkpoint (bertpipe exports it), and the same weights exported by `torch.onnx.export` (the
TorchScript exporter, opset 17, dynamic batch and sequence axes) — what a Python user ships today.

    eval_reference.py OUT_DIR LAYERS HIDDEN HEADS VOCAB_TXT
writes OUT_DIR/checkpoint/ (config.json, model.safetensors, vocab.txt) and OUT_DIR/torch.onnx.
"""
import os, shutil, sys, warnings
import torch
from transformers import BertConfig, BertForSequenceClassification

out, layers, hidden, heads, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
vocab_size = sum(1 for _ in open(vocab, encoding="utf-8"))
torch.manual_seed(0)
cfg = BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                 intermediate_size=4 * hidden, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
model = BertForSequenceClassification(cfg).eval()
ckpt = os.path.join(out, "checkpoint")
model.save_pretrained(ckpt, safe_serialization=True)
shutil.copy(vocab, os.path.join(ckpt, "vocab.txt"))

ids = torch.randint(1000, vocab_size, (2, 16))
args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
        "token_type_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch"}}
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(model, args, os.path.join(out, "torch.onnx"), input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["logits"], dynamic_axes=axes, opset_version=17, dynamo=False)
print(f"reference: {ckpt} and {os.path.join(out, 'torch.onnx')} ({layers}L/{hidden}H/{heads}A, vocab {vocab_size})")
