#!/usr/bin/env bash
# ONNX inference throughput, side by side under one ONNX Runtime (Python onnxruntime, CPU):
# bertpipe's export (plain and --optimize) vs torch.onnx.export of the same weights, a random
# BERT-mini (4L/256H), IMDb-shaped lengths, 2 threads; and length-sorted dynamic batches vs
# fixed-512 padding. Then `bertpipe eval` end to end on the sample's shards with the same model.
#   benches/eval.sh      (finds or makes .venv with torch, transformers, onnxruntime==1.31.1, onnx)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
source benches/common.sh
ensure_python "torch, transformers, onnxruntime, onnx" torch transformers onnxruntime==1.31.1 onnx \
  || { echo "benches/eval.sh: no Python environment with torch, transformers, onnxruntime; nothing measured" >&2; exit 2; }
py=$PY
threads=${THREADS:-2}
docs=${DOCS:-256}
repeats=${REPEATS:-3}
cargo build --release -q
bin="$CARGO_TARGET_DIR/release/bertpipe"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" benches/eval_reference.py "$work" 4 256 4 data/vocab/bert-base-uncased.txt
ort_lib=$("$py" -c "import onnxruntime, glob, os; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), 'capi', 'libonnxruntime.so*')))[-1])")
"$bin" export onnx --checkpoint "$work/checkpoint" --out "$work/bertpipe.onnx" --verify --ort-lib "$ort_lib" 2>&1 | tail -1
"$bin" export onnx --checkpoint "$work/checkpoint" --out "$work/bertpipe-opt.onnx" --optimize --verify --ort-lib "$ort_lib" 2>&1 | tail -1
"$py" benches/eval_onnx.py "$threads" "$docs" "$repeats" torch="$work/torch.onnx" bertpipe="$work/bertpipe.onnx" bertpipe-optimize="$work/bertpipe-opt.onnx"

echo "== bertpipe eval on the sample's test split (this model, untrained: throughput only)"
"$bin" pipeline run pipelines/imdb.yaml --overwrite --quiet --set sink.path="$work/imdb"
for m in bertpipe bertpipe-opt; do
  "$bin" eval --model "$work/$m.onnx" --data "$work/imdb" --threads "$threads" --quiet --ort-lib "$ort_lib" --out "$work/eval-$m" | grep -E 'docs/s'
done
