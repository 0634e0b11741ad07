#!/usr/bin/env bash
# Peak memory of `bertpipe eval` against the split's size: generated splits of ROWS rows each
# (default 100000 and 1000000; short two-class texts, shards of 10,000 rows) evaluated with the
# tiny test classifier (tests/fixtures/tiny-bert-cls: the model is not what is measured), peak
# RSS from /usr/bin/time, and what the report holds per row. Prints, per size: rows, seconds,
# peak RSS, and the growth per added row between consecutive sizes.
#   benches/eval_memory.sh                  ROWS="100000 1000000" to choose the sizes
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
cargo build --release -q
bin="$CARGO_TARGET_DIR/release/bertpipe"
ort=$(ls "${BERTPIPE_CACHE_DIR:-$HOME/.cache/bertpipe}"/*/onnxruntime/capi/libonnxruntime.so* 2>/dev/null | head -1 || true)
[ -n "${ORT_DYLIB_PATH:-}" ] && ort=$ORT_DYLIB_PATH
[ -n "$ort" ] || { echo "eval_memory: no ONNX Runtime (run \`bertpipe doctor --install\`); nothing measured" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "eval_memory: /usr/bin/time is missing; nothing measured" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fixture=tests/fixtures/tiny-bert-cls
"$bin" export onnx --checkpoint "$fixture" --out "$work/tiny.onnx" --ort-lib "$ort" >/dev/null 2>&1
prev_rows=""; prev_kb=""
printf '%-9s %8s %12s %22s\n' rows seconds "peak RSS" "growth per added row"
for rows in ${ROWS:-100000 1000000}; do
  python3 - "$work/corpus-$rows.jsonl" "$rows" <<'PY'
import random, sys
path, n = sys.argv[1], int(sys.argv[2])
words = "the a film movie good bad great awful plot actor scene story boring fun was is and of".split()
rng = random.Random(7)
with open(path, "w") as f:
    for i in range(n):
        label = rng.choice(["neg", "pos"])
        text = " ".join(rng.choice(words) for _ in range(rng.randint(4, 30)))
        f.write('{"id": "r%d", "label": "%s", "text": "%s"}\n' % (i, label, text))
PY
  cat > "$work/p-$rows.yaml" <<YAML
name: memory
seed: 1
source: { type: jsonl, path: $work/corpus-$rows.jsonl, label_field: label, id_field: id, label_map: { neg: 0, pos: 1 }, split: test }
steps:
  - type: noise_score
  - type: tokenize
    vocab: $PWD/$fixture/vocab.txt
    lowercase: true
  - type: classify_sequences
    max_len: 64
sink: { type: parquet, path: $work/shards-$rows, shard_rows: 10000, leakage: off }
YAML
  "$bin" pipeline run "$work/p-$rows.yaml" --quiet >/dev/null
  /usr/bin/time -f "%e %M" -o "$work/time-$rows" "$bin" eval --model "$work/tiny.onnx" --data "$work/shards-$rows" \
    --split test --batch-size 256 --quiet --ort-lib "$ort" --out "$work/eval-$rows" >/dev/null
  read -r secs kb < "$work/time-$rows"
  growth="-"
  if [ -n "$prev_rows" ]; then
    growth=$(python3 -c "print(f'{($kb - $prev_kb) * 1024 / ($rows - $prev_rows):.1f} bytes')")
  fi
  printf '%-9s %8s %9.1f MB %22s\n' "$rows" "$secs" "$(python3 -c "print($kb/1024)")" "$growth"
  prev_rows=$rows; prev_kb=$kb
  rm -rf "$work/shards-$rows" "$work/corpus-$rows.jsonl" "$work/eval-$rows"
done
