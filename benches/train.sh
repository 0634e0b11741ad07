#!/usr/bin/env bash
# A BERT training step (fwd + bwd + clip + AdamW) in bertpipe (candle, CPU) and in PyTorch on
# the same machine, side by side: BERT-mini (4L/256H) and BERT-tiny (2L/128H), batch 32 x 128.
# Prints each median and the ratio candle / torch (lower is better; 1.0 = as fast as PyTorch).
#   benches/train.sh            (needs .venv with torch + transformers: see the README)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
py=${PYTHON:-.venv/bin/python}
steps=${STEPS:-8}
cargo build --release --example train_step -q
exe="$CARGO_TARGET_DIR/release/examples/train_step"
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.2f}')" "$1" "$2"; }
for shape in "4 256 4 32 128" "2 128 2 32 128"; do
  c=$("$exe" $shape "$steps")
  t=$("$py" ../shared/bench/torch_step.py $shape "$steps" 2>/dev/null | tail -1)
  echo "$c"
  echo "$t"
  cs=$(echo "$c" | sed -E 's/.*: ([0-9.]+) s\/step.*/\1/')
  ts=$(echo "$t" | sed -E 's/.*: ([0-9.]+) s\/step.*/\1/')
  echo "ratio candle/torch (L H A B S = $shape): $(ratio "$cs" "$ts")"
done
