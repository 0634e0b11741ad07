#!/usr/bin/env bash
# Throughput of `tokenize` with an HF tokenizer.json that is not WordPiece (the `tokenizers`
# crate path): the RoBERTa-, ModernBERT- (byte-level BPE) and XLM-R-shaped (Unigram) tokenizers
# of tests/fixtures/tokenizers, on 50,000 generated reviews in aclImdb layout (a folder),
# beside Python `tokenizers` `encode_batch` (benches/tokenize_bpe.py) on the same files, both
# from reading the files to the ids on all cores. bertpipe also writes the Parquet shards and
# manifest; Python keeps its encodings in memory. Median of RUNS alternating runs; the token
# counts of both sides must agree.
#
#   benches/tokenize_bpe.sh                    # RUNS=3, all three tokenizers
#   FAMILIES=roberta RUNS=5 benches/tokenize_bpe.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
FAMILIES=${FAMILIES:-roberta modernbert xlmr}
ensure_python "tokenizers" tokenizers || { echo "benches/tokenize_bpe.sh: no Python with tokenizers" >&2; exit 2; }
dir="$WORK/imdb-50000/aclImdb"
[ -d "$dir" ] || "$GEN" --out "$dir" --per-label 12500 --unsup 0 2>/dev/null
mb=$(du -sb --apparent-size "$dir" | awk '{printf "%.1f", $1/1e6}')
echo "50,000 reviews ($mb MB), $(nproc) cores, median of $RUNS"
printf '%-11s %10s %10s %12s %12s %8s %12s\n' tokenizer "ours s" "python s" "ours tok/s" "python tok/s" ratio "(py encode)"
for family in $FAMILIES; do
  tok="$PWD/tests/fixtures/tokenizers/$family/tokenizer.json"
  yaml="$WORK/tokenize-$family.yaml"
  cat > "$yaml" <<YAML
name: tokenize-$family
source: { type: aclimdb, path: $dir, labels: [neg, pos] }
steps:
  - type: tokenize
    tokenizer: $tok
sink: { type: parquet, path: $WORK/tokenize-out }
YAML
  ours=(); theirs=(); encode=()
  for _ in $(seq "$RUNS"); do
    read -r wall _ < <(measure "$BIN" pipeline run "$yaml" --quiet --overwrite)
    ours+=("$wall")
    t=$(python3 -c 'import time; print(time.perf_counter())')
    line=$("$PY" benches/tokenize_bpe.py "$dir" "$tok")
    theirs+=("$(python3 -c "import time; print(time.perf_counter() - $t)")")
    encode+=("$(echo "$line" | awk '{print $4}')")
  done
  ours_tokens=$(python3 -c "import json; m = json.load(open('$WORK/tokenize-out/manifest.json')); print(sum(s['tokenization']['document_tokens'] for s in m['splits'].values()))")
  py_tokens=$(echo "$line" | awk '{print $NF}')
  [ "$ours_tokens" = "$py_tokens" ] || { echo "token counts differ: ours $ours_tokens, python $py_tokens" >&2; exit 1; }
  a=$(printf '%s\n' "${ours[@]}" | median); b=$(printf '%s\n' "${theirs[@]}" | median); e=$(printf '%s\n' "${encode[@]}" | median)
  awk -v f="$family" -v a="$a" -v b="$b" -v e="$e" -v n="$ours_tokens" \
    'BEGIN { printf "%-11s %10.2f %10.2f %12.0f %12.0f %7.2fx %12.2f\n", f, a, b, n / a, n / b, b / a, e }'
done
