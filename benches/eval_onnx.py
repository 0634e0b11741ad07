#!/usr/bin/env python3
"""The timing side of benches/eval.sh: ONNX models under the same ONNX Runtime session options,
side by side on the same IMDb-shaped documents (log-normal lengths around 230 tokens, capped at
512; seeded), length-sorted batches with dynamic padding, and fixed-512 padding for the first.

    eval_onnx.py THREADS DOCS REPEATS NAME=MODEL.onnx... [A/B...]
Prints docs/s (median of REPEATS) per model and the ratios to the model named `torch`, and each
ratio A/B asked for (`int8/fp32`: NAME A's docs/s over NAME B's).
"""
import statistics, sys, time
import numpy as np
import onnxruntime as ort

threads, docs, repeats = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
models = [a.split("=", 1) for a in sys.argv[4:] if "=" in a]
ratios = [a.split("/", 1) for a in sys.argv[4:] if "=" not in a]
rng = np.random.default_rng(0)
lengths = np.clip(np.round(rng.lognormal(np.log(230), 0.5, docs)), 8, 512).astype(int)
rows = [np.concatenate([[101], rng.integers(1000, 30000, n - 2), [102]]).astype(np.int64) for n in lengths]
order = np.argsort(-lengths, kind="stable")
batch = 32


def batches(fixed):
    for s in range(0, docs, batch):
        idx = order[s:s + batch]
        seq = fixed or int(lengths[idx].max())
        ids = np.zeros((len(idx), seq), np.int64)
        mask = np.zeros((len(idx), seq), np.int64)
        for r, i in enumerate(idx):
            ids[r, :lengths[i]] = rows[i]
            mask[r, :lengths[i]] = 1
        yield {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def docs_per_s(path, fixed=None):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = list(batches(fixed))
    sess.run(["logits"], feeds[-1])  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for f in feeds:
            sess.run(["logits"], f)
        times.append(time.perf_counter() - t)
    return docs / statistics.median(times)


print(f"onnxruntime {ort.__version__}, {threads} threads, {docs} docs (mean {lengths.mean():.0f}, median {int(np.median(lengths))}, "
      f"max {lengths.max()} tokens), batch {batch}, median of {repeats}")
rates = {}
for name, path in models:
    rates[name] = docs_per_s(path)
    print(f"{name:<22} length-sorted dynamic padding: {rates[name]:7.1f} docs/s")
first = models[0]
if not ratios:
    fixed = docs_per_s(first[1], 512)
    print(f"{first[0]:<22} fixed 512 padding:             {fixed:7.1f} docs/s  (dynamic / fixed = {rates[first[0]] / fixed:.2f}x)")
if "torch" in rates:
    for name in rates:
        if name != "torch":
            print(f"ratio {name} / torch: {rates[name] / rates['torch']:.2f}")
for a, b in ratios:
    print(f"ratio {a} / {b}: {rates[a] / rates[b]:.2f}")
