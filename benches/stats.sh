#!/usr/bin/env bash
# `bertpipe stats` on the IMDb-sized generated corpus (50,000 labelled reviews, ~70 MB, aclImdb
# layout): from finished shards (target ≤ 2 s), from the raw folder and from the pipeline YAML
# (target: about the cost of the cleaning pass, `pipeline run pipelines/imdb-clean.yaml`, which
# is measured side by side). Medians of RUNS runs, peak RSS, and the ratios.
#
#   benches/stats.sh             # RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
dir="$WORK/imdb-50000"
[ -d "$dir/aclImdb" ] || "$GEN" --out "$dir/aclImdb" --per-label 12500 --unsup 0 2>/dev/null
src=(--set "source.path=$dir/aclImdb" --set "source.labels=[neg, pos]")

# Shards to read back: the classification pipeline as shipped (ids, no text) and with the text kept.
"$BIN" pipeline run pipelines/imdb.yaml --quiet --overwrite "${src[@]}" --set "sink.path=$WORK/stats-ids"
"$BIN" pipeline run pipelines/imdb.yaml --quiet --overwrite "${src[@]}" --set "sink.path=$WORK/stats-text" --set sink.keep_text=true

declare -A MED=()
run() {  # name, command...
  local name=$1; shift
  local times=() rss=0 wall kib
  for _ in $(seq "$RUNS"); do
    read -r wall kib < <(measure "$@")
    times+=("$wall"); [ "$kib" -gt "$rss" ] && rss=$kib
  done
  MED[$name]=$(printf '%s\n' "${times[@]}" | median)
  awk -v n="$name" -v m="${MED[$name]}" -v r="$rss" 'BEGIN { printf "%-44s %8.3f s %8.1f MB\n", n, m, r / 1024 }'
}
printf '%-44s %10s %11s\n' "50,000 reviews" "median" "peak RSS"
run "stats shards (ids + noise, no text)" "$BIN" stats "$WORK/stats-ids" --quiet
run "stats shards (with text)" "$BIN" stats "$WORK/stats-text" --quiet
run "stats shards (with text) --by label --plot" "$BIN" stats "$WORK/stats-text" --quiet --by label --plot "$WORK/stats-plots"
run "stats raw folder" "$BIN" stats "$dir/aclImdb" --quiet
run "stats pipelines/imdb-clean.yaml" "$BIN" stats pipelines/imdb-clean.yaml --quiet "${src[@]}"
run "stats pipelines/imdb.yaml (+ tokens)" "$BIN" stats pipelines/imdb.yaml --quiet "${src[@]}"
run "pipeline run pipelines/imdb-clean.yaml" "$BIN" pipeline run pipelines/imdb-clean.yaml --quiet --overwrite "${src[@]}" --set "sink.path=$WORK/stats-clean"
awk -v a="${MED[stats pipelines/imdb-clean.yaml]}" -v b="${MED[pipeline run pipelines/imdb-clean.yaml]}" \
  'BEGIN { printf "stats imdb-clean.yaml / pipeline run imdb-clean.yaml: %.2f\n", a / b }'
awk -v a="${MED[stats raw folder]}" -v b="${MED[pipeline run pipelines/imdb-clean.yaml]}" \
  'BEGIN { printf "stats raw folder / pipeline run imdb-clean.yaml:      %.2f\n", a / b }'
