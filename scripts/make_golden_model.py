#!/usr/bin/env python3
"""Golden fixtures for bertpipe's candle BERT, from `transformers` + `torch` on CPU.

Writes tests/fixtures/tiny-bert-{pretrain,cls}/ (HF checkpoints: config.json,
model.safetensors, vocab.txt) and tests/fixtures/golden_model.json: for a padded batch, the
last hidden states, classification logits, pretraining (MLM at chosen positions + NSP)
logits, both losses, gradients of several tensors after one backward of the classification
loss, and those tensors after one AdamW step (weight decay 0.01 except biases and LayerNorm,
global-norm clipping), and then — from the same starting weights — five AdamW steps under
a linear warmup/decay schedule (moments carried, bias correction past the first step, a 0
learning rate at step 0), recomputing loss and gradients each step. Dropout is 0 so train
and eval agree.

The weights are drawn 10x wider than BERT's 0.02 (initializer_range 0.2): with the usual
range, a 2-layer random model's [CLS] output hardly depends on the input, and the fixture's
rows gave logits within 2e-4 of each other — a 1e-4 comparison could not see the input. The
script checks the rows' logits differ by far more than the tolerance.

    python3 -m venv .venv && .venv/bin/pip install torch transformers safetensors
    .venv/bin/python scripts/make_golden_model.py
"""
import json, os, sys
import torch
from transformers import BertConfig, BertForPreTraining, BertForSequenceClassification

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden_steps import one_step, scheduled_steps  # noqa: E402

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures")
VOCAB = 120
vocab = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
vocab += [f"w{i}" for i in range(VOCAB - len(vocab))]


def build(init_range):
    """A pretraining model and a classifier sharing its encoder, weights N(0, init_range)."""
    torch.manual_seed(1234)
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0, initializer_range=init_range, attn_implementation="eager")
    cfg.id2label = {0: "neg", 1: "pos"}; cfg.label2id = {"neg": 0, "pos": 1}
    pre = BertForPreTraining(cfg).eval()
    # Random, not-zero biases and LayerNorm parameters, so a wrong broadcast cannot hide.
    with torch.no_grad():
        for n, p in pre.named_parameters():
            if n.endswith("bias") or "LayerNorm" in n:
                p.add_(torch.randn_like(p) * 0.1)
    cls = BertForSequenceClassification(cfg).eval()
    cls.bert.load_state_dict(pre.bert.state_dict())
    with torch.no_grad():
        cls.classifier.bias.add_(torch.randn_like(cls.classifier.bias) * 0.1)
    return pre, cls


# The bf16 fixture (make_golden_bf16.py) keeps BERT's own 0.02: with wide weights one bf16
# rounding step of a near-saturated activation moves the logits by 2^-7, and the bf16 check
# compares how bf16 is applied, not how chaotic a random model is.
for prefix, init_range in [("tiny-bert-narrow", 0.02), ("tiny-bert", 0.2)]:
    pre, cls = build(init_range)
    for name, model in [(f"{prefix}-pretrain", pre), (f"{prefix}-cls", cls)]:
        d = os.path.join(root, name)
        model.save_pretrained(d, safe_serialization=True)
        with open(os.path.join(d, "vocab.txt"), "w") as f:
            f.write("\n".join(vocab) + "\n")

# A padded batch: rows of 11, 7 and 4 real tokens, second segment in row 0.
B, S = 3, 11
lens = [11, 7, 4]
g = torch.Generator().manual_seed(7)
ids = torch.randint(104, VOCAB, (B, S), generator=g)
mask = torch.zeros(B, S, dtype=torch.long)
tt = torch.zeros(B, S, dtype=torch.long)
for b, n in enumerate(lens):
    ids[b, 0] = 101; ids[b, n - 1] = 102; ids[b, n:] = 0; mask[b, :n] = 1
tt[0, 6:11] = 1; ids[0, 5] = 102
labels = torch.tensor([1, 0, 1])
mlm_pos = [[0, 2], [0, 7], [1, 3], [2, 1]]  # (row, position)
mlm_labels = torch.tensor([110, 57 + 60, 105, 119])
nsp_labels = torch.tensor([0, 1, 0])

out = {"input_ids": ids.tolist(), "attention_mask": mask.tolist(), "token_type_ids": tt.tolist(),
       "labels": labels.tolist(), "mlm_positions": mlm_pos, "mlm_labels": mlm_labels.tolist(),
       "nsp_labels": nsp_labels.tolist(), "torch": torch.__version__}
import transformers; out["transformers"] = transformers.__version__
with torch.no_grad():
    h = pre.bert(input_ids=ids, attention_mask=mask, token_type_ids=tt).last_hidden_state
    out["hidden"] = h.tolist()
    p = pre(input_ids=ids, attention_mask=mask, token_type_ids=tt)
    pl = p.prediction_logits
    out["mlm_logits"] = [pl[b, s].tolist() for b, s in mlm_pos]
    out["nsp_logits"] = p.seq_relationship_logits.tolist()
    # HF loss: labels -100 everywhere except the chosen positions.
    lab = torch.full((B, S), -100)
    for (b, s), l in zip(mlm_pos, mlm_labels):
        lab[b, s] = l
    out["pretrain_loss"] = pre(input_ids=ids, attention_mask=mask, token_type_ids=tt, labels=lab,
                               next_sentence_label=nsp_labels).loss.item()
    cls_logits = cls(input_ids=ids, attention_mask=mask, token_type_ids=tt).logits
    out["cls_logits"] = cls_logits.tolist()
    # The rows must be told apart by a 1e-4 comparison many times over.
    spread = min((cls_logits[a] - cls_logits[b]).abs().max().item() for a in range(B) for b in range(a + 1, B))
    assert spread > 0.05, f"the rows' logits differ by only {spread:.2e}: the fixture would not test the input"
    out["cls_logits_min_row_spread"] = spread
    hidden_spread = (h[0, 0] - h[1, 0]).abs().max().item()
    assert hidden_spread > 0.05, f"[CLS] hidden states of rows 0 and 1 differ by only {hidden_spread:.2e}"
initial = {k: v.detach().clone() for k, v in cls.state_dict().items()}

# One training step of the classifier: loss, backward, clip, AdamW.
cls.train()
LR, WD, CLIP = 1e-2, 0.01, 0.1
watch = ["classifier.weight", "classifier.bias", "bert.pooler.dense.bias", "bert.embeddings.LayerNorm.weight",
         "bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
         "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.1.output.dense.weight",
         "bert.encoder.layer.1.attention.output.LayerNorm.bias"]
out.update(one_step(cls, lambda: cls(input_ids=ids, attention_mask=mask, token_type_ids=tt, labels=labels).loss,
                    watch, LR, WD, CLIP))

# Several steps under a schedule, from the same starting weights: warmup 2, total 6 (HF's
# get_linear_schedule_with_warmup: lr 0, .5, 1, .75, .5 of the base at steps 0..4).
cls.load_state_dict(initial)
WARMUP, TOTAL, STEPS = 2, 6, 5
steps = scheduled_steps(cls, lambda: cls(input_ids=ids, attention_mask=mask, token_type_ids=tt, labels=labels).loss,
                        watch, LR, WD, CLIP, WARMUP, TOTAL, STEPS)
out["schedule"] = {"lr": LR, "weight_decay": WD, "max_grad_norm": CLIP, "warmup": WARMUP, "total": TOTAL,
                   "steps": steps}

with open(os.path.join(root, "golden_model.json"), "w") as f:
    json.dump(out, f)
print(f"wrote {root}/golden_model.json (torch {torch.__version__}, transformers {transformers.__version__}); "
      f"grad norm {out['grad_norm']:.4f} clipped to {CLIP}; rows' logits differ by >= {out['cls_logits_min_row_spread']:.3f}; "
      f"losses over {STEPS} scheduled steps {[round(s['loss'], 4) for s in steps]}")
