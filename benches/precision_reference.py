#!/usr/bin/env python3
"""The reference side of benches/eval.sh's precision rows: what a Python user ships today for a
quantised BERT. The checkpoint exported by `torch.onnx.export` (TorchScript exporter, opset 17,
dynamic batch and sequence), then ONNX Runtime's `quantize_dynamic` applied to it twice — with
its defaults (QInt8 weights per tensor: the one-line recipe) and with the settings its docs give
for x86 without VNNI (per channel, reduce_range). bertpipe's metadata (vocabulary, labels,
max_len) is copied onto each so `bertpipe eval` can score them on the same shards.

    precision_reference.py CHECKPOINT OUT_DIR METADATA_FROM.onnx
writes OUT_DIR/torch.onnx, OUT_DIR/ort-int8.onnx, OUT_DIR/ort-int8-pc.onnx.
"""
import os, sys, warnings
import onnx
import torch
from onnxruntime.quantization import QuantType, quantize_dynamic
from transformers import BertForSequenceClassification

ckpt, out, meta_from = sys.argv[1], sys.argv[2], sys.argv[3]
model = BertForSequenceClassification.from_pretrained(ckpt).eval()
ids = torch.randint(1000, model.config.vocab_size, (2, 16))
args = (ids, torch.ones_like(ids), torch.zeros_like(ids))
axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
        "token_type_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch"}}
torch_onnx = os.path.join(out, "torch.onnx")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch.onnx.export(model, args, torch_onnx, input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["logits"], dynamic_axes=axes, opset_version=17, dynamo=False)
meta = {p.key: p.value for p in onnx.load(meta_from, load_external_data=False).metadata_props}


def stamp(path, precision):
    m = onnx.load(path)
    del m.metadata_props[:]
    for k, v in {**meta, "precision": precision, "created_by": "torch.onnx / onnxruntime.quantization"}.items():
        m.metadata_props.add(key=k, value=v)
    onnx.save(m, path)


stamp(torch_onnx, "fp32")
for name, kw in [("ort-int8.onnx", {}), ("ort-int8-pc.onnx", {"per_channel": True, "reduce_range": True})]:
    path = os.path.join(out, name)
    quantize_dynamic(torch_onnx, path, weight_type=QuantType.QInt8, **kw)
    stamp(path, "int8")
print(f"reference: {torch_onnx}, ort-int8.onnx (quantize_dynamic defaults), ort-int8-pc.onnx (per_channel, reduce_range)")
