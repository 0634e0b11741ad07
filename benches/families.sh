#!/usr/bin/env bash
# A fine-tuning step (forward, backward, clip, AdamW) of each model family at BERT-base size
# (12 layers, hidden 768, 12 heads; RoBERTa with its 50,265-token vocabulary and 514 positions;
# ModernBERT with base's 1,152-wide gated MLP, 50,368 tokens, local window 128 on 2 layers of 3)
# in bertpipe (candle, CPU) and in PyTorch on the same machine, side by side, in the form of
# benches/train.sh: each median s/step, the ratio candle / torch (lower is better) and each
# process's peak RSS.
#   benches/families.sh                 # batch 8 x 128, STEPS=4
#   SHAPE="12 768 12 16 128" STEPS=3 FAMILIES=roberta benches/families.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
source benches/common.sh
ensure_python "torch, transformers" torch transformers \
  || { echo "benches/families.sh: no Python environment with torch + transformers; nothing measured" >&2; exit 2; }
py=$PY
steps=${STEPS:-4}
shape=${SHAPE:-12 768 12 8 128}
cargo build --release --example train_step -q
exe="$CARGO_TARGET_DIR/release/examples/train_step"
for family in ${FAMILIES:-bert roberta modernbert}; do
  # shellcheck disable=SC2086
  c=$(BERTPIPE_FAMILY=$family peak "$exe" $shape "$steps")
  # shellcheck disable=SC2086
  t=$(peak "$py" benches/family_step.py "$family" $shape "$steps")
  echo "$c" | paste -sd' ' | sed 's/ peak/, peak/'
  echo "$t" | paste -sd' ' | sed 's/ peak/, peak/'
  cs=$(echo "$c" | head -1 | sed -E 's/.*: ([0-9.]+) s\/step.*/\1/')
  ts=$(echo "$t" | head -1 | sed -E 's/.*: ([0-9.]+) s\/step.*/\1/')
  python3 -c "import sys; print(f'ratio candle/torch ({sys.argv[3]}, L H A B S = {sys.argv[4]}): {float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$cs" "$ts" "$family" "$shape"
done
