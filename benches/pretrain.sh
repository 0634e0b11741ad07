#!/usr/bin/env bash
# Pretraining-data benchmark: pipelines/imdb-pretrain.yaml (NSP + static masking, and packed
# MLM-only rows) against pipelines/imdb.yaml (classification) on the same generated text —
# 50,000 labelled + 50,000 unlabelled reviews (~140 MB) as .tar.gz. Prints the median wall time
# of RUNS runs, rows/s, MB/s, peak RSS, and the pretraining/classification time ratio
# (target ≤ 2).
#
#   benches/pretrain.sh            # RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
corpus="$WORK/imdb-100k/aclImdb_v1.tar.gz"
[ -f "$corpus" ] || "$GEN" --out "$corpus" --per-label 12500 --unsup 50000 --tar 2>/dev/null
MB=$(awk 'BEGIN { printf "%.1f", 100000 * 1408 / 1e6 }')   # ~1,408 bytes of text per review
rows() { python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(s['rows'] for s in m['splits'].values()))" "$WORK/out/manifest.json"; }

declare -A T
printf '%-28s %8s %10s %8s %10s\n' pipeline "median s" "rows/s" "MB/s" "peak RSS"
for variant in "classify:imdb.yaml:" "pretrain-nsp:imdb-pretrain.yaml:" "pretrain-packed:imdb-pretrain.yaml:steps[7].nsp=false"; do
  IFS=: read -r name file set <<<"$variant"
  extra=(); [ -n "$set" ] && extra=(--set "$set")
  # The same 100,000 reviews for every variant (imdb-pretrain.yaml reads train/ only by default).
  [[ $name == pretrain* ]] && extra+=(--set "source.splits=[train, test]")
  times=(); rss=0
  for _ in $(seq "$RUNS"); do
    read -r wall kib < <(measure "$BIN" pipeline run "pipelines/$file" --quiet --overwrite "${extra[@]}" \
      --set "source.path=$corpus" --set "source.labels=[neg, pos, unsup]" --set "sink.path=$WORK/out")
    times+=("$wall"); [ "$kib" -gt "$rss" ] && rss=$kib
  done
  med=$(printf '%s\n' "${times[@]}" | median)
  T[$name]=$med
  awk -v c="$name" -v m="$med" -v n="$(rows)" -v mb="$MB" -v r="$rss" \
    'BEGIN { printf "%-28s %8.3f %10.0f %8.1f %7.1f MB\n", c, m, n / m, mb / m, r / 1024 }'
done
awk -v a="${T[pretrain-nsp]}" -v b="${T[classify]}" 'BEGIN { printf "pretrain (NSP) / classify time: %.2f (target <= 2)\n", a / b }'
awk -v a="${T[pretrain-packed]}" -v b="${T[classify]}" 'BEGIN { printf "pretrain (packed) / classify time: %.2f\n", a / b }'
