#!/usr/bin/env bash
# A BERT training step (fwd + bwd + clip + AdamW) in bertpipe (candle, CPU) and in PyTorch on
# the same machine, side by side: BERT-mini (4L/256H) and BERT-tiny (2L/128H), batch 32 x 128.
# Prints each median, the ratio candle / torch (lower is better; 1.0 = as fast as PyTorch) and
# each process's peak RSS.
#   benches/train.sh            (finds or makes .venv with torch + transformers)
#   BERTPIPE_UNFUSED=1 benches/train.sh     the graph path, without the fused CPU kernels
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
source benches/common.sh
ensure_python "torch, transformers" torch transformers \
  || { echo "benches/train.sh: no Python environment with torch + transformers; nothing measured" >&2; exit 2; }
py=$PY
steps=${STEPS:-8}
cargo build --release --example train_step -q
exe="$CARGO_TARGET_DIR/release/examples/train_step"
ratio() { python3 -c "import sys; print(f'{float(sys.argv[1])/float(sys.argv[2]):.2f}')" "$1" "$2"; }
for shape in "4 256 4 32 128" "2 128 2 32 128"; do
  c=$(peak "$exe" $shape "$steps")
  t=$(peak "$py" ../shared/bench/torch_step.py $shape "$steps")
  echo "$c" | paste -sd' ' | sed 's/ peak/, peak/'
  echo "$t" | paste -sd' ' | sed 's/ peak/, peak/'
  cs=$(echo "$c" | head -1 | sed -E 's/.*: ([0-9.]+) s\/step.*/\1/')
  ts=$(echo "$t" | head -1 | sed -E 's/.*: ([0-9.]+) s\/step.*/\1/')
  echo "ratio candle/torch (L H A B S = $shape): $(ratio "$cs" "$ts")"
done
echo "== real-length batches (IMDb-shaped lengths up to 512, length-grouped, padded per batch)"
BERTPIPE_REAL_LENGTHS=1 "$exe" 4 256 4 32 512 "$steps"
