#!/usr/bin/env python3
"""Shows that bertpipe's shards open unchanged in pyarrow and Hugging Face `datasets`.

    .venv/bin/pip install pyarrow datasets tokenizers
    .venv/bin/python scripts/check_shards.py out/imdb [data/vocab/bert-base-uncased.txt]

Checks, for every split in the manifest: pyarrow reads each shard with the contract's types,
the row counts and sha256 match the manifest, `datasets.load_dataset("parquet")` loads the
split with the same rows, and (with a vocab) the ids decode back to text with HF tokenizers.
"""
import hashlib
import json
import pathlib
import sys

import pyarrow as pa
import pyarrow.parquet as pq

out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "out/imdb")
manifest = json.loads((out / "manifest.json").read_text())
assert manifest["format"] == "bertpipe-shards/1", manifest["format"]
for split, stats in manifest["splits"].items():
    files = [out / s["file"] for s in stats["shards"]]
    for f, s in zip(files, stats["shards"]):
        assert hashlib.sha256(f.read_bytes()).hexdigest() == s["sha256"], f
    table = pa.concat_tables([pq.read_table(f) for f in files])
    assert table.num_rows == stats["rows"], (split, table.num_rows, stats["rows"])
    schema = table.schema
    assert schema.field("id").type == pa.string()
    assert schema.field("label").type == pa.int64()
    if manifest["task"] == "classify":
        assert schema.field("input_ids").type == pa.list_(pa.int32()), schema.field("input_ids").type
        assert schema.field("token_type_ids").type == pa.list_(pa.int8())
        assert schema.field("length").type == pa.int32()
        lengths = table.column("length").to_pylist()
        assert max(lengths) <= manifest["max_len"], max(lengths)
        assert sum(lengths) == stats["tokens"]
    print(f"pyarrow: {split}: {table.num_rows} rows, schema ok, checksums ok")

try:
    import datasets
except ImportError:
    print("datasets not installed: skipped")
else:
    data_files = {split: [str(out / s["file"]) for s in st["shards"]] for split, st in manifest["splits"].items()}
    ds = datasets.load_dataset("parquet", data_files=data_files)
    for split, st in manifest["splits"].items():
        assert ds[split].num_rows == st["rows"], (split, ds[split].num_rows)
        print(f"datasets {datasets.__version__}: {split}: {ds[split].num_rows} rows, features {list(ds[split].features)}")

if len(sys.argv) > 2 and manifest["task"] == "classify":
    from tokenizers import BertWordPieceTokenizer
    tok = BertWordPieceTokenizer(sys.argv[2], lowercase=True)
    split = next(iter(manifest["splits"]))
    first = pq.read_table(out / manifest["splits"][split]["shards"][0]["file"]).slice(0, 1).to_pylist()[0]
    print("decoded:", tok.decode(first["input_ids"], skip_special_tokens=False)[:160])
