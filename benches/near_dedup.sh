#!/usr/bin/env bash
# Near-dedup benchmark: `pipeline run` over a generated JSONL corpus with planted near copies
# (examples/gen_near_dups.rs: 10% of the documents copy an earlier one with 0–30% of its words
# changed), the same cleaning pipeline with exact `dedup` only and with `near_dedup` after it,
# alternating runs. Prints the median wall time of each, their ratio (target ≤ 1.5×), the peak
# RSS of each and the near_dedup memory per document; then the pairs found against the planted
# truth and against `datasketch` (benches/near_dedup_reference.py, same shingles, 14×8 bands).
#
#   benches/near_dedup.sh              # 50,000 documents, RUNS=3
#   BIG=1 benches/near_dedup.sh        # adds 500,000 documents (memory per document at scale)
#   PYTHON=/path/to/python benches/near_dedup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
cargo build --release --quiet --example gen_near_dups
NEAR_GEN="$CARGO_TARGET_DIR/release/examples/gen_near_dups"
THREADS=${THREADS:-0}

pipeline() { # name, extra steps
  cat > "$WORK/$1.yaml" <<YAML
name: $1
source: {type: jsonl, path: $WORK/near-DOCS.jsonl, id_field: id}
steps:
  - type: html_strip
  - type: unicode_normalize
  - type: punctuation
  - type: dedup
$2
sink: {type: parquet, path: $WORK/out-$1, keep_text: false}
YAML
}
pipeline exact ""
pipeline near "  - type: near_dedup"

sizes="50000"
[ "${BIG:-0}" = 1 ] && sizes="$sizes 500000"
printf '%-10s %-7s %9s %10s %10s %12s\n' docs steps "median s" "docs/s" "peak RSS" "near rejects"
for docs in $sizes; do
  data="$WORK/near-$docs.jsonl"
  [ -f "$data" ] || "$NEAR_GEN" --out "$data" --docs "$docs"
  declare -A MED=() RSS=()
  for kind in exact near; do eval "t_$kind=()"; RSS[$kind]=0; done
  for _ in $(seq "$RUNS"); do
    for kind in exact near; do
      read -r wall kib < <(measure "$BIN" pipeline run "$WORK/$kind.yaml" --quiet --overwrite --threads "$THREADS" \
        --set "source.path=$data" --set "sink.path=$WORK/out-$kind-$docs")
      eval "t_$kind+=($wall)"
      [ "$kib" -gt "${RSS[$kind]}" ] && RSS[$kind]=$kib
    done
  done
  for kind in exact near; do
    eval "MED[$kind]=\$(printf '%s\n' \"\${t_$kind[@]}\" | median)"
    rejects=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(s['rejected'].get('near_duplicate_of',0) for s in m['splits'].values()))" "$WORK/out-$kind-$docs/manifest.json")
    awk -v d="$docs" -v k="$kind" -v m="${MED[$kind]}" -v r="${RSS[$kind]}" -v n="$rejects" \
      'BEGIN { printf "%-10s %-7s %9.3f %10.0f %7.1f MB %12d\n", d, k, m, d / m, r / 1024, n }'
  done
  awk -v a="${MED[near]}" -v b="${MED[exact]}" 'BEGIN { printf "near_dedup / dedup only, wall time: %.2fx (target <= 1.5x)\n", a / b }'
  awk -v a="${RSS[near]}" -v b="${RSS[exact]}" -v d="$docs" \
    'BEGIN { printf "near_dedup memory: %+.1f MB peak RSS, %.0f bytes per document\n", (a - b) / 1024, (a - b) * 1024 / d }'
done

ensure_python "datasketch, pyarrow" datasketch pyarrow \
  || { echo "benches/near_dedup.sh: no Python environment with datasketch, pyarrow; the comparison is skipped" >&2; exit 2; }
"$PY" benches/near_dedup_reference.py "$WORK/near-50000.jsonl" "$WORK/out-near-50000"
