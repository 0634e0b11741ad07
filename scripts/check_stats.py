"""Cross-checks `bertpipe stats --json` on a shard folder (written with `sink.keep_text: true`)
against numpy / pandas computed independently from the shards read with pyarrow.

    .venv/bin/python scripts/check_stats.py out/imdb-text [path/to/bertpipe]
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

root = Path(sys.argv[1])
binary = sys.argv[2] if len(sys.argv) > 2 else "target/release/bertpipe"
report = json.loads(subprocess.run([binary, "stats", str(root), "--json", "--quiet", "--by", "label"],
                                   check=True, capture_output=True, text=True).stdout)
manifest = json.loads((root / "manifest.json").read_text())
order = manifest["config"]["source"].get("splits") or sorted(manifest["splits"])
tables = [pq.read_table(root / s["file"]) for split in order for s in manifest["splits"][split]["shards"]]
text = [t for tab in tables for t in tab.column("text").to_pylist()]
labels = [l for tab in tables for l in tab.column("label").to_pylist()]
columns = {
    "chars": np.array([len(t) for t in text], dtype=np.float64),
    "words": np.array([len(t.split()) for t in text], dtype=np.float64),
    "tokens": np.array([v for tab in tables for v in tab.column("length").to_pylist()], dtype=np.float64),
}
names = {0: "neg", 1: "pos", None: "unsup"}
worst = 0.0
for group in report["groups"]:
    mask = np.array([group["group"] == "all" or names[l] == group["group"] for l in labels])
    assert group["documents"] == int(mask.sum()), (group["group"], group["documents"], mask.sum())
    for metric, values in columns.items():
        v = values[mask]
        want = {
            "min": v.min(), "p5": np.quantile(v, 0.05), "p25": np.quantile(v, 0.25),
            "median": np.median(v), "mean": v.mean(), "p75": np.quantile(v, 0.75),
            "p95": np.quantile(v, 0.95), "p99": np.quantile(v, 0.99), "max": v.max(), "std": v.std(ddof=1),
        }
        for stat, w in want.items():
            got = group[metric][stat]
            err = abs(got - w) / max(abs(w), 1.0)
            worst = max(worst, err)
            assert err < 1e-9, f"{group['group']} {metric} {stat}: bertpipe {got}, numpy {w}"
    dups = len(text) - len(set(text)) if group["group"] == "all" else None
    if dups is not None:
        assert group["duplicates"] == dups, (group["duplicates"], dups)
print(f"{len(text)} rows, {len(report['groups'])} groups x {len(columns)} columns x 10 statistics agree with numpy "
      f"(largest relative difference {worst:.1e})")
