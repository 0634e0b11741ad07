#!/usr/bin/env python3
"""Golden fixtures for bertpipe's bf16 compute (`dtype: bf16`), from `transformers` + `torch`.

bertpipe's bf16 runs every matrix product with both operands rounded to bf16 and the product
accumulated and returned in f32; everything else (embeddings, LayerNorm, softmax, GELU,
residuals, loss) stays f32 and the master weights are f32. This script runs the committed
tiny checkpoints of BERT's own 0.02 init (tests/fixtures/tiny-bert-narrow-{cls,pretrain}, from make_golden_model.py) the
same way in PyTorch, by routing `F.linear` and `torch.matmul` through bf16 operands, on the
batch of golden_model.json, and writes tests/fixtures/golden_bf16.json: classification
logits, loss and the gradients of the watched tensors; pretraining MLM and NSP logits.

    .venv/bin/python scripts/make_golden_bf16.py
"""
import json, os
import torch
import torch.nn.functional as F
from transformers import BertForPreTraining, BertForSequenceClassification

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
g = json.load(open(os.path.join(root, "golden_model.json")))
ids = torch.tensor(g["input_ids"])
mask = torch.tensor(g["attention_mask"])
tt = torch.tensor(g["token_type_ids"])
labels = torch.tensor(g["labels"])

f32_linear, f32_matmul = F.linear, torch.matmul


def bf16_linear(x, w, b=None):
    y = f32_matmul(x.bfloat16(), w.bfloat16().t()).float()
    return y if b is None else y + b


def bf16_matmul(a, b):
    return f32_matmul(a.bfloat16(), b.bfloat16()).float()




def run():
    """The narrow checkpoints' figures as F.linear / torch.matmul now compute them."""
    r = {}
    cls = BertForSequenceClassification.from_pretrained(os.path.join(root, "tiny-bert-narrow-cls"),
                                                        attn_implementation="eager").train()
    named = dict(cls.named_parameters())
    res = cls(input_ids=ids, attention_mask=mask, token_type_ids=tt, labels=labels)
    res.loss.backward()
    r["cls_logits"] = res.logits.tolist()
    r["cls_loss"] = res.loss.item()
    r["grads"] = {n: named[n].grad.flatten().tolist() for n in g["grads"]}
    pre = BertForPreTraining.from_pretrained(os.path.join(root, "tiny-bert-narrow-pretrain"),
                                             attn_implementation="eager").eval()
    with torch.no_grad():
        p = pre(input_ids=ids, attention_mask=mask, token_type_ids=tt)
    r["mlm_logits"] = [p.prediction_logits[b, s].tolist() for b, s in g["mlm_positions"]]
    r["nsp_logits"] = p.seq_relationship_logits.tolist()
    return r


# The same figures in f32 (what bf16 must clearly differ from), then with bf16 products.
f32 = run()
F.linear, torch.matmul = bf16_linear, bf16_matmul
out = {"torch": torch.__version__, **run(), "f32": f32}
F.linear, torch.matmul = f32_linear, f32_matmul
with open(os.path.join(root, "golden_bf16.json"), "w") as f:
    json.dump(out, f)
d = max(abs(a - b) for r1, r2 in zip(out["cls_logits"], f32["cls_logits"]) for a, b in zip(r1, r2))
print(f"wrote {root}/golden_bf16.json (torch {torch.__version__}); max |bf16 - f32| classifier logits {d:.2e}")
