#!/usr/bin/env bash
# pipelines/imdb.yaml against the Python reference (../shared/bench/py_imdb_pipeline.py) shape
# by shape: the same 20,000 generated labelled reviews rewritten as plain ASCII, dense HTML and
# entities, two sentences each, and three times as long (benches/pipeline_shapes.py), to find
# which corpus property moves the ratio. Prints the best of RUNS alternating runs per side and
# the ratio for each shape.
#
#   benches/pipeline_shapes.sh        # RUNS=2
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
RUNS=${RUNS:-2}
ensure_python "tokenizers, pyarrow, numpy" tokenizers pyarrow numpy \
  || { echo "benches/pipeline_shapes.sh: no Python environment with tokenizers, pyarrow, numpy" >&2; exit 2; }
ref=../shared/bench/py_imdb_pipeline.py
[ -f "$ref" ] || { echo "benches/pipeline_shapes.sh: no $ref" >&2; exit 2; }
src="$WORK/imdb-20k/aclImdb"
[ -d "$src" ] || "$GEN" --out "$src" --per-label 5000 --unsup 10000 2>/dev/null
python3 benches/pipeline_shapes.py "$src" "$WORK/shapes"
best() { sort -g | head -1; }
printf '%-6s %8s %12s %12s %7s\n' shape "text MB" "bertpipe s" "python s" ratio
for shape in base ascii html short long; do
  d="$WORK/shapes/$shape/aclImdb"
  mb=$(cat "$d"/train/*/* "$d"/test/*/* | wc -c)
  imdb_side_by_side "$d" "$(nproc)"
  a=$(printf '%s\n' "${OURS[@]}" | best); b=$(printf '%s\n' "${THEIRS[@]}" | best)
  awk -v s="$shape" -v mb="$mb" -v a="$a" -v b="$b" 'BEGIN { printf "%-6s %8.1f %12.3f %12.3f %6.1fx\n", s, mb / 1e6, a, b, b / a }'
done
