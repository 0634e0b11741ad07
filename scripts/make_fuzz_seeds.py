#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpus, fuzz/seeds/TARGET/, from the repository's own files:
the pipelines, sample reviews in each source format, a manifest / journal / scan file of the
layout, and the tiny checkpoint. A seed's first byte is the selector the target reads.

    python3 scripts/make_fuzz_seeds.py
"""
import glob, gzip, io, json, os, struct, tarfile

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
seeds = os.path.join(root, "fuzz", "seeds")


def put(target, name, data):
    d = os.path.join(seeds, target)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, name), "wb").write(data)


for p in sorted(glob.glob(os.path.join(root, "pipelines", "*.yaml"))):
    put("pipeline_yaml", os.path.basename(p), open(p, "rb").read())

reviews = [open(p, "rb").read()[:600] for p in sorted(glob.glob(os.path.join(root, "data/aclImdb-sample/train/*/*.txt")))[:3]]
texts = [b"Hello, world! Don't stop.", "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u6771\u4eac [SEP] [MASK]x".encode(), reviews[0]]
for i, t in enumerate(texts):
    put("tokenizer", f"uncased-{i}", b"\x00" + t)
    put("tokenizer", f"cased-{i}", b"\x01" + t)

lines = b"".join(json.dumps({"id": f"d{i}", "text": r.decode("utf-8", "replace"), "label": i % 2}).encode() + b"\n" for i, r in enumerate(reviews))
put("sources", "jsonl", b"\x00" + lines)
csv = b"text,label\n" + b"".join(b'"' + r.replace(b'"', b'""') + b'",' + str(i % 2).encode() + b"\n" for i, r in enumerate(reviews))
put("sources", "csv", b"\x01" + csv)
put("sources", "tsv", b"\x02" + b"text\tlabel\nA fine film.\t1\nDreadful.\t0\n")
put("sources", "text", b"\x03" + b"\n".join(reviews))
put("sources", "paragraphs", b"\x06" + b"\n\n".join(reviews))
try:
    import pyarrow as pa, pyarrow.parquet as pq
    buf = io.BytesIO()
    pq.write_table(pa.table({"text": [r.decode("utf-8", "replace") for r in reviews], "label": [0, 1, 0]}), buf)
    put("sources", "parquet", b"\x04" + buf.getvalue())
except ImportError:
    pass
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w:gz") as tar:
    for i, r in enumerate(reviews):
        info = tarfile.TarInfo(f"aclImdb/train/{'pos' if i % 2 else 'neg'}/{i}_{8 if i % 2 else 2}.txt")
        info.size = len(r)
        tar.addfile(info, io.BytesIO(r))
put("sources", "aclimdb", b"\x05" + buf.getvalue())

shard = lambda f, rows: {"file": f, "rows": rows, "bytes": 100, "sha256": "0" * 64}
split = lambda name, rows: {"docs_in": rows, "docs_out": rows, "rejected": {}, "rows": rows, "tokens": None,
                            "utf8_replaced": 0, "shards": [shard(f"{name}/part-00000.parquet", rows)]}
manifest = {"format": "bertpipe-shards/1", "created_by": "bertpipe", "task": "classify", "name": "imdb",
            "config": {}, "config_sha256": "cfg", "tokenizer": None, "max_len": 512, "seed": 42,
            "splits": {"test": split("test", 3), "train": split("train", 5)},
            "rejects": {"rows": 1, "shards": [shard("_rejects/part-00000.parquet", 1)]}}
put("contract_files", "manifest", b"\x00" + json.dumps(manifest, indent=2).encode())
merged = dict(manifest, tasks={"count": 2})
merged["splits"] = {"train": dict(split("train", 5), shards=[shard("tasks/00000/train/part-00000.parquet", 5)])}
merged["rejects"] = {"rows": 0, "shards": []}
put("contract_files", "manifest-merged", b"\x00" + json.dumps(merged).encode())
journal = [{"config_sha256": "cfg"}, {"folder": "train", "shard": shard("train/part-00000.parquet", 5)},
           {"folder": "train", "shard": shard("train/part-00001.parquet", 5)}, {"folder": "_rejects", "shard": shard("_rejects/part-00000.parquet", 1)}]
put("contract_files", "journal", b"\x01" + b"".join(json.dumps(j).encode() + b"\n" for j in journal))
header = json.dumps({"format": "bertpipe-scan/1", "config_sha256": "cfg", "task": {"index": 0, "count": 1}, "keys": 2, "scores": 2}).encode()
scan = header + b"\n" + b"k" * 16 + struct.pack("<I", 5) + b"doc-1" + b"q" * 16 + struct.pack("<I", 5) + b"doc-2" + struct.pack("<ff", 1.5, 2.5)
put("contract_files", "scan", b"\x02" + scan)

ckpt = os.path.join(root, "tests/fixtures/tiny-bert-cls")
config = open(os.path.join(ckpt, "config.json"), "rb").read()
weights = open(os.path.join(ckpt, "model.safetensors"), "rb").read()
put("model_files", "tiny-bert-cls", struct.pack("<H", len(config)) + config + weights)
put("model_files", "config-only", struct.pack("<H", len(config)) + config)
print("wrote", seeds)
