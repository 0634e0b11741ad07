#!/usr/bin/env python3
"""Golden fixtures for bertpipe's RoBERTa family, from `transformers` + `torch` on CPU.

Writes tests/fixtures/tiny-roberta-{mlm,cls}/ (HF checkpoints: config.json, model.safetensors)
and tests/fixtures/golden_roberta.json: for a padded batch (RoBERTa's padding id 1, so the
position ids count from 2 over the real tokens), the last hidden states, MLM logits at chosen
positions and the MLM loss, classification logits (RobertaClassificationHead on `<s>`) and
loss, gradients of several tensors after one backward of the classification loss (the padding
rows of the word and position embeddings get none), those tensors after one clipped AdamW
step (weight decay 0.01 except biases and LayerNorms), and five AdamW steps under a linear
warmup/decay schedule. Dropout is 0; weights are drawn N(0, 0.2) with random biases and norms,
as for the BERT fixture (scripts/make_golden_model.py), so the rows' logits differ by far more
than the tolerance.

    python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors
    .venv/bin/python scripts/make_golden_roberta.py
"""
import os
import sys

import torch
from transformers import RobertaConfig, RobertaForMaskedLM, RobertaForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_steps import heads_on_batch, padded_batch, train_and_write  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
VOCAB, PAD, BOS, EOS = 120, 1, 0, 2


def build():
    torch.manual_seed(4321)
    cfg = RobertaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=66, type_vocab_size=1, pad_token_id=PAD,
                        bos_token_id=BOS, eos_token_id=EOS, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, initializer_range=0.2, layer_norm_eps=1e-5,
                        attn_implementation="eager")
    cfg.id2label = {0: "neg", 1: "pos"}
    cfg.label2id = {"neg": 0, "pos": 1}
    mlm = RobertaForMaskedLM(cfg).eval()
    with torch.no_grad():
        for n, p in mlm.named_parameters():
            if n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    cls = RobertaForSequenceClassification(cfg).eval()
    cls.roberta.load_state_dict(mlm.roberta.state_dict(), strict=False)
    with torch.no_grad():
        for n, p in cls.classifier.named_parameters():
            if n.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
        # A wider output layer, so the rows' logits differ by far more than the tolerance.
        cls.classifier.out_proj.weight.mul_(4.0)
    return mlm, cls


mlm, cls = build()
for name, model in [("tiny-roberta-mlm", mlm), ("tiny-roberta-cls", cls)]:
    model.save_pretrained(os.path.join(root, name), safe_serialization=True)

ids, mask = padded_batch(VOCAB, 11, BOS, EOS, PAD)
ids[0, 5] = EOS  # `<s> A </s></s> B </s>` in row 0
ids[0, 6] = EOS
out, spread = heads_on_batch(mlm.roberta, mlm, cls, ids, mask)

watch = ["classifier.dense.weight", "classifier.out_proj.bias", "roberta.embeddings.LayerNorm.weight",
         "roberta.embeddings.word_embeddings.weight", "roberta.embeddings.position_embeddings.weight",
         "roberta.encoder.layer.0.attention.self.query.weight", "roberta.encoder.layer.1.output.dense.weight",
         "roberta.encoder.layer.1.attention.output.LayerNorm.bias"]
out = train_and_write(cls, ids, mask, watch, out, spread, os.path.join(root, "golden_roberta.json"))
# The padding row of the position embeddings gets no gradient (`nn.Embedding(padding_idx=…)`).
H = cls.config.hidden_size
assert not any(out["grads"]["roberta.embeddings.position_embeddings.weight"][PAD * H:(PAD + 1) * H])
