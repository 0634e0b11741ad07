#!/usr/bin/env bash
# `bertpipe run` on the extracted aclImdb-shaped corpus at full size (12,500 reviews per label
# in train/ and test/, 50,000 in train/unsup: 100,000 review files plus the non-review files,
# ~130 MB): what content keys cost.
#   - the first dry run on a fresh OUT: nothing read yet, so nothing to hash (a corpus folder
#     keys a stage by what its run reads in it, its read set);
#   - the first real run (the pipeline stage, tokenizing 50,000 reviews) and what it hashed:
#     the files the run read (its read set) and its outputs;
#   - `--dry-run` on the up-to-date chain: one `stat` per file (median of RUNS);
#   - after `touch` on every corpus file (same bytes, new times): the dry run hashes them
#     again and still finds the chain up to date.
#
#   benches/chain.sh             # RUNS=3
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
dir="$WORK/imdb-100k"
[ -d "$dir/aclImdb" ] || "$GEN" --out "$dir/aclImdb" --per-label 12500 --unsup 50000 2>/dev/null
files=$(find "$dir/aclImdb" -type f | wc -l)
bytes=$(du -sb "$dir/aclImdb" | cut -f1)
exp="$WORK/chain-100k.yaml"
cat >"$exp" <<YAML
name: chain-100k
out: $WORK/chain-100k-out
stages:
  data:
    base: $PWD/pipelines/imdb.yaml
    source.path: $dir/aclImdb
YAML
rm -rf "$WORK/chain-100k-out"
awk -v f="$files" -v b="$bytes" -v d="$dir/aclImdb" 'BEGIN { printf "%s files, %.1f MB under %s\n", f, b / 1e6, d }'

timed() {  # label, command... : one run, wall seconds and the chain's own hashing line
  local label=$1; shift
  local t0 t1 out
  t0=$(date +%s.%N)
  out=$("$@" 2>&1) || { echo "$out" >&2; exit 1; }
  t1=$(date +%s.%N)
  printf '%-52s %8.3f s   %s\n' "$label" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$(grep -o 'hashed [0-9]* files, [0-9.]* MB' <<<"$out" || echo 'nothing hashed past 64 MB')"
}
timed "dry run, fresh OUT (no read set yet)" "$BIN" run "$exp" --dry-run
rm -rf "$WORK/chain-100k-out"
timed "first run, fresh OUT (pipeline + hashing)" "$BIN" run "$exp"
sleep 3  # past the 2 s racy window, so the outputs just written are trusted from now on
timed "second run (re-hashes the outputs written in the first)" "$BIN" run "$exp"
times=()
for _ in $(seq "$RUNS"); do
  t0=$(date +%s.%N)
  "$BIN" run "$exp" --dry-run >"$WORK/chain-dry.txt" 2>&1
  t1=$(date +%s.%N)
  times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')")
  grep -q "up to date" "$WORK/chain-dry.txt" || { cat "$WORK/chain-dry.txt"; exit 1; }
done
printf '%-52s %8.3f s   (median of %s)\n' "dry run, up to date (a stat per file)" "$(printf '%s\n' "${times[@]}" | median)" "$RUNS"
find "$dir/aclImdb" -type f -exec touch {} +
sleep 3
timed "dry run after touching every file (re-hash, same keys)" "$BIN" run "$exp" --dry-run
"$BIN" run "$exp" --dry-run 2>&1 | grep -E "^data " 
