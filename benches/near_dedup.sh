#!/usr/bin/env bash
# Near-dedup benchmark: `pipeline run` over a generated JSONL corpus with planted near copies
# (examples/gen_near_dups.rs: 10% of the documents copy an earlier one with 0–30% of its words
# changed), each pipeline with exact `dedup` only and with `near_dedup` after it, alternating
# runs. Three pipelines, from the cheapest to what users run:
#   ids       html_strip, unicode_normalize, punctuation, dedup; shards of ids only (the worst
#             case: almost nothing else to do, so near_dedup's share is largest)
#   text      the same, keeping the cleaned text (a cleaning and dedup pass)
#   tokenize  the same, then WordPiece and [CLS] … [SEP] sequences of 512 (as pipelines/imdb.yaml)
# Runs alternate, and which of the two goes first alternates too. Prints the median wall time
# of each, their ratio (target ≤ 1.5×), the peak RSS of each and
# the near_dedup memory per document; then the pairs found against the planted truth and
# against `datasketch` (benches/near_dedup_reference.py, same shingles, 14×8 bands).
#
#   benches/near_dedup.sh              # 50,000 documents, RUNS=3
#   BIG=1 benches/near_dedup.sh        # adds 500,000 documents (`ids`: memory per document at scale)
#   PYTHON=/path/to/python benches/near_dedup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
cargo build --release --quiet --example gen_near_dups
NEAR_GEN="$CARGO_TARGET_DIR/release/examples/gen_near_dups"
THREADS=${THREADS:-0}
VOCAB="$PWD/data/vocab/bert-base-uncased.txt"

pipeline() { # name, keep_text, extra steps after dedup
  cat > "$WORK/$1.yaml" <<YAML
name: $1
source: {type: jsonl, path: $WORK/near-DOCS.jsonl, id_field: id}
steps:
  - type: html_strip
  - type: unicode_normalize
  - type: punctuation
  - type: dedup
$3
sink: {type: parquet, path: $WORK/out-$1, keep_text: $2}
YAML
}
NEAR="  - type: near_dedup"
TOKENIZE="  - type: tokenize
    vocab: $VOCAB
    lowercase: true
  - type: classify_sequences
    max_len: 512
    truncation: head_tail"
pipeline ids-exact false ""
pipeline ids-near false "$NEAR"
pipeline text-exact true ""
pipeline text-near true "$NEAR"
pipeline tokenize-exact false "$TOKENIZE"
pipeline tokenize-near false "$NEAR
$TOKENIZE"

printf '%-8s %-9s %-6s %9s %10s %10s %12s\n' docs pipeline steps "median s" "docs/s" "peak RSS" "near rejects"
bench() { # docs, pipeline kinds...
  local docs=$1; shift
  local data="$WORK/near-$docs.jsonl"
  [ -f "$data" ] || "$NEAR_GEN" --out "$data" --docs "$docs"
  for p in "$@"; do
    declare -A MED=() RSS=()
    for kind in exact near; do eval "t_$kind=()"; RSS[$kind]=0; done
    for round in $(seq "$RUNS"); do
      # Which goes first alternates: on this machine the second of two runs is often faster.
      order="exact near"; [ $((round % 2)) = 0 ] && order="near exact"
      for kind in $order; do
        read -r wall kib < <(measure "$BIN" pipeline run "$WORK/$p-$kind.yaml" --quiet --overwrite --threads "$THREADS" \
          --set "source.path=$data" --set "sink.path=$WORK/out-$p-$kind-$docs")
        eval "t_$kind+=($wall)"
        [ "$kib" -gt "${RSS[$kind]}" ] && RSS[$kind]=$kib
      done
    done
    for kind in exact near; do
      eval "MED[$kind]=\$(printf '%s\n' \"\${t_$kind[@]}\" | median)"
      rejects=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(sum(s['rejected'].get('near_duplicate_of',0) for s in m['splits'].values()))" "$WORK/out-$p-$kind-$docs/manifest.json")
      awk -v d="$docs" -v p="$p" -v k="$kind" -v m="${MED[$kind]}" -v r="${RSS[$kind]}" -v n="$rejects" \
        'BEGIN { printf "%-8s %-9s %-6s %9.3f %10.0f %7.1f MB %12d\n", d, p, k, m, d / m, r / 1024, n }'
    done
    awk -v p="$p" -v a="${MED[near]}" -v b="${MED[exact]}" -v ra="${RSS[near]}" -v rb="${RSS[exact]}" -v d="$docs" \
      'BEGIN { printf "  %s: near_dedup / dedup only %.2fx wall (target <= 1.5x), %+.1f MB peak RSS (%.0f bytes per document)\n", p, a / b, (ra - rb) / 1024, (ra - rb) * 1024 / d }'
  done
}
bench 50000 ids text tokenize
[ "${BIG:-0}" = 1 ] && bench 500000 ids

ensure_python "datasketch, pyarrow" datasketch pyarrow \
  || { echo "benches/near_dedup.sh: no Python environment with datasketch, pyarrow; the comparison is skipped" >&2; exit 2; }
"$PY" benches/near_dedup_reference.py "$WORK/near-50000.jsonl" "$WORK/out-ids-near-50000"
