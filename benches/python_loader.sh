#!/usr/bin/env bash
# The Python loader beside HF's: one epoch of MLM batches (batch 32) from the same pretraining
# shards (pipelines/imdb-pretrain.yaml with masking: dynamic, over 20,000 generated reviews),
#   bertpipe   ShardDataset(mask=True) + its Collator: the trainer's order and masks (Rust)
#   hf         datasets.load_dataset("parquet") + DataCollatorForLanguageModeling(0.15)
# with 0 and 2 DataLoader workers. Each configuration runs once to build its caches (the row
# store; datasets' Arrow files), then RUNS times; prints the median rows/s, peak RSS of the
# main process and of one worker, and bertpipe/hf ratios. Needs the wheel installed in
# $BERTPIPE_WHEEL_VENV (scripts/python-check.sh makes it).
#
#   benches/python_loader.sh       # RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
py="${BERTPIPE_WHEEL_VENV:-$HOME/.cache/bertpipe-wheel-venv}/bin/python"
"$py" -c "import bertpipe, datasets, transformers" || { echo "install the wheel first: scripts/python-check.sh" >&2; exit 1; }
corpus="$WORK/imdb-20k/aclImdb"
[ -d "$corpus" ] || "$GEN" --out "$corpus" --per-label 5000 --unsup 10000 2>/dev/null
shards="$WORK/python-loader/pretrain"
[ -f "$shards/manifest.json" ] || "$BIN" pipeline run pipelines/imdb-pretrain.yaml --quiet --overwrite \
  --set "source.path=$corpus" --set "sink.path=$shards" --set "steps[7].masking=dynamic"
vocab="$PWD/data/vocab/bert-base-uncased.txt"
rows=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['splits']['train']['rows'])" "$shards/manifest.json")
echo "shards: $rows training rows of up to 128 tokens ($shards)"

declare -A R
printf '%-10s %8s %10s %12s %12s\n' loader workers "rows/s" "main RSS" "worker RSS"
for workers in 0 2; do
  for mode in bertpipe hf; do
    "$py" benches/python_loader.py "$mode" "$shards" "$workers" "$vocab" >/dev/null   # caches
    rates=(); main=0; worker=0
    for _ in $(seq "$RUNS"); do
      read -r n s m w < <("$py" benches/python_loader.py "$mode" "$shards" "$workers" "$vocab")
      rates+=("$(awk -v n="$n" -v s="$s" 'BEGIN { printf "%.0f", n / s }')")
      [ "$m" -gt "$main" ] && main=$m; [ "$w" -gt "$worker" ] && worker=$w
    done
    med=$(printf '%s\n' "${rates[@]}" | median)
    R[$mode.$workers]=$med
    awk -v l="$mode" -v k="$workers" -v r="$med" -v m="$main" -v w="$worker" \
      'BEGIN { printf "%-10s %8d %10d %9.0f MB %9s\n", l, k, r, m / 1024, (k ? sprintf("%.0f MB", w / 1024) : "-") }'
  done
done
for workers in 0 2; do
  awk -v a="${R[bertpipe.$workers]}" -v b="${R[hf.$workers]}" -v k="$workers" \
    'BEGIN { printf "bertpipe / hf rows/s, %d workers: %.2f\n", k, a / b }'
done
