#!/usr/bin/env python3
"""Golden fixtures for bertpipe's ModernBERT family, from `transformers` + `torch` on CPU.

Writes tests/fixtures/tiny-modernbert-{mlm,cls}/ (HF checkpoints: config.json,
model.safetensors) and tests/fixtures/golden_modernbert.json: for a padded batch longer than the
local window (4 layers: 0 and 3 global, 1 and 2 local with a window of ±2 tokens), the last
hidden states, MLM logits at chosen positions and the MLM loss, classification logits with
`cls` and with `mean` pooling and their loss, gradients of several tensors after one backward
of the classification loss (the padding row of the token embeddings gets none), those tensors
after one clipped AdamW step (no weight decay for biases and norms), and five AdamW steps under
a linear warmup/decay schedule. Dropout is 0; weights are drawn N(0, 0.2) (truncated at ±2σ,
as ModernBERT's init), norms perturbed, so the rows' logits differ by far more than the
tolerance. Eager attention: HF's reference path.

    python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors
    .venv/bin/python scripts/make_golden_modernbert.py
"""
import os
import sys

import torch
from transformers import ModernBertConfig, ModernBertForMaskedLM, ModernBertForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_steps import heads_on_batch, padded_batch, train_and_write  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
VOCAB, PAD, CLS, SEP = 120, 1, 0, 2


def config(pooling="cls"):
    cfg = ModernBertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                           intermediate_size=48, max_position_embeddings=64, local_attention=4,
                           global_attn_every_n_layers=3, pad_token_id=PAD, bos_token_id=CLS, cls_token_id=CLS,
                           eos_token_id=SEP, sep_token_id=SEP, initializer_range=0.2, norm_eps=1e-5,
                           classifier_pooling=pooling, attn_implementation="eager")
    cfg.id2label = {0: "neg", 1: "pos"}
    cfg.label2id = {"neg": 0, "pos": 1}
    return cfg


def build():
    torch.manual_seed(2468)
    mlm = ModernBertForMaskedLM(config()).eval()
    with torch.no_grad():
        for n, p in mlm.named_parameters():
            if n.endswith("bias") or "norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    cls = ModernBertForSequenceClassification(config()).eval()
    cls.model.load_state_dict(mlm.model.state_dict())
    cls.head.load_state_dict(mlm.head.state_dict())
    with torch.no_grad():
        cls.classifier.bias.add_(torch.randn_like(cls.classifier.bias) * 0.1)
        # A wider output layer, so the rows' logits differ by far more than the tolerance.
        cls.classifier.weight.mul_(4.0)
    return mlm, cls


mlm, cls = build()
for name, model in [("tiny-modernbert-mlm", mlm), ("tiny-modernbert-cls", cls)]:
    model.save_pretrained(os.path.join(root, name), safe_serialization=True)

ids, mask = padded_batch(VOCAB, 13, CLS, SEP, PAD)
ids[0, 5] = SEP  # `[CLS] A [SEP] B [SEP]` in row 0
out, spread = heads_on_batch(mlm.model, mlm, cls, ids, mask)
with torch.no_grad():
    mean = ModernBertForSequenceClassification(config("mean")).eval()
    mean.load_state_dict(cls.state_dict())
    out["cls_logits_mean"] = mean(input_ids=ids, attention_mask=mask).logits.tolist()
    assert (torch.tensor(out["cls_logits_mean"]) - torch.tensor(out["cls_logits"])).abs().max() > 0.05, \
        "mean pooling changes nothing"

watch = ["classifier.weight", "classifier.bias", "head.dense.weight", "head.norm.weight",
         "model.embeddings.norm.weight", "model.embeddings.tok_embeddings.weight",
         "model.layers.0.attn.Wqkv.weight", "model.layers.1.mlp.Wi.weight", "model.layers.2.attn_norm.weight",
         "model.layers.3.attn.Wo.weight", "model.final_norm.weight"]
out = train_and_write(cls, ids, mask, watch, out, spread, os.path.join(root, "golden_modernbert.json"))
# The padding row of the token embeddings gets no gradient (`nn.Embedding(padding_idx=…)`).
H = cls.config.hidden_size
assert not any(out["grads"]["model.embeddings.tok_embeddings.weight"][PAD * H:(PAD + 1) * H])
