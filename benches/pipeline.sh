#!/usr/bin/env bash
# Whole-pipeline benchmark: `bertpipe pipeline run` of pipelines/imdb-clean.yaml (cleaning)
# and pipelines/imdb.yaml (cleaning + WordPiece + 512-token sequences) on generated corpora in
# aclImdb layout, 5,000 and 50,000 reviews (the IMDb-sized one is ~68 MB), as folders and as
# .tar.gz. Prints the median wall time of RUNS runs, docs/s, MB/s of review text, peak RSS, and
# the ratio of peak RSS between the two sizes (memory must stay flat as the corpus grows).
#
#   benches/pipeline.sh                # RUNS=3 THREADS=0 (all cores)
#   RUNS=5 THREADS=1 PIPELINES=imdb benches/pipeline.sh
#   BIG=1 benches/pipeline.sh          # adds 500,000 reviews (.tar.gz, ~680 MB of text) and the
#                                      # 500k/50k peak-RSS ratio: the real test of flat memory
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
PIPELINES=${PIPELINES:-imdb-clean imdb}
THREADS=${THREADS:-0}

for pipeline in $PIPELINES; do
declare -A RSS=()
echo "== pipelines/$pipeline.yaml"
printf '%-22s %8s %10s %8s %10s\n' corpus "median s" "docs/s" "MB/s" "peak RSS"
sizes="1250 12500"
[ "${BIG:-0}" = 1 ] && sizes="$sizes 125000"
for per_label in $sizes; do
  docs=$((per_label * 4))
  dir="$WORK/imdb-$docs"
  forms="aclImdb aclImdb_v1.tar.gz"
  [ "$per_label" -gt 12500 ] && forms="aclImdb_v1.tar.gz"   # half a million small files is a test of the file system
  [ -d "$dir/aclImdb" ] || [ "$per_label" -gt 12500 ] || "$GEN" --out "$dir/aclImdb" --per-label "$per_label" --unsup 0 2>/dev/null
  [ -f "$dir/aclImdb_v1.tar.gz" ] || "$GEN" --out "$dir/aclImdb_v1.tar.gz" --per-label "$per_label" --unsup 0 --tar 2>/dev/null
  mb=$(awk -v d="$docs" 'BEGIN { printf "%.1f", d * 1408 / 1e6 }')   # ~1,408 bytes of text per review
  [ -d "$dir/aclImdb" ] && mb=$(du -sb --apparent-size "$dir/aclImdb" | awk '{printf "%.1f", $1/1e6}')
  for form in $forms; do
    times=(); rss=0
    for _ in $(seq "$RUNS"); do
      read -r wall kib < <(measure "$BIN" pipeline run "pipelines/$pipeline.yaml" --quiet --overwrite --threads "$THREADS" \
        --set "source.path=$dir/$form" --set "source.labels=[neg, pos]" --set "sink.path=$WORK/out")
      times+=("$wall"); [ "$kib" -gt "$rss" ] && rss=$kib
    done
    med=$(printf '%s\n' "${times[@]}" | median)
    RSS[$docs-$form]=$rss
    awk -v c="$docs $form" -v m="$med" -v d="$docs" -v mb="$mb" -v r="$rss" \
      'BEGIN { printf "%-22s %8.3f %10.0f %8.1f %7.1f MB\n", c, m, d / m, mb / m, r / 1024 }'
  done
done
awk -v a="${RSS[50000-aclImdb]}" -v b="${RSS[5000-aclImdb]}" 'BEGIN { printf "peak RSS ratio 50k/5k (folder): %.2f\n", a / b }'
awk -v a="${RSS[50000-aclImdb_v1.tar.gz]}" -v b="${RSS[5000-aclImdb_v1.tar.gz]}" 'BEGIN { printf "peak RSS ratio 50k/5k (tar.gz): %.2f\n", a / b }'
if [ -n "${RSS[500000-aclImdb_v1.tar.gz]:-}" ]; then
  awk -v a="${RSS[500000-aclImdb_v1.tar.gz]}" -v b="${RSS[50000-aclImdb_v1.tar.gz]}" 'BEGIN { printf "peak RSS ratio 500k/50k (tar.gz): %.2f\n", a / b }'
fi
done

# Side by side with the Python reference (../shared/bench/py_imdb_pipeline.py: the seed recipes,
# HF tokenizers, pyarrow, multiprocessing over the same cores), 50,000 reviews as a folder,
# alternating runs. Finds or makes .venv with tokenizers, pyarrow and numpy.
ensure_python "tokenizers, pyarrow, numpy" tokenizers pyarrow numpy \
  || { echo "benches/pipeline.sh: no Python environment with tokenizers, pyarrow, numpy; the Python side is skipped" >&2; exit 2; }
py=$PY
ref=../shared/bench/py_imdb_pipeline.py
if [[ " $PIPELINES " == *" imdb "* ]] && [ -f "$ref" ] && "$py" -c "import tokenizers, pyarrow, numpy" 2>/dev/null; then
  dir="$WORK/imdb-50000/aclImdb"
  procs=$(nproc); [ "$THREADS" -gt 0 ] && procs=$THREADS
  imdb_side_by_side "$dir" "$procs" "$THREADS"
  a=$(printf '%s\n' "${OURS[@]}" | median); b=$(printf '%s\n' "${THEIRS[@]}" | median)
  awk -v a="$a" -v b="$b" -v p="$procs" 'BEGIN { printf "pipelines/imdb.yaml vs the Python reference, 50,000 reviews (folder, %d processes): %.3f s vs %.3f s: %.1fx (target >= 20)\n", p, a, b, b / a }'
else
  echo "(no Python reference run: needs PIPELINES to include imdb, $ref and $py with tokenizers, pyarrow, numpy)"
fi
