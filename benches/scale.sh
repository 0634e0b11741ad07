#!/usr/bin/env bash
# Beyond one process: what a task array and object storage cost on one machine, 50,000
# generated reviews through pipelines/imdb.yaml (which has dedup, so arrays need the scan).
#   1. one process (all cores) vs a 2-task array (scan ×2, run ×2 side by side with one thread
#      each, merge): the array's overhead is the scan pass and the merge's checksums;
#   2. the .tar.gz from disk to disk vs from a loopback S3 server to it (tests/s3-server; built
#      here if missing): the cost of streaming, staging and uploading.
# Prints medians of RUNS runs.
#   benches/scale.sh          RUNS=5 benches/scale.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
dir="$WORK/imdb-50000"
[ -d "$dir/aclImdb" ] || "$GEN" --out "$dir/aclImdb" --per-label 12500 --unsup 0 2>/dev/null
[ -f "$dir/aclImdb_v1.tar.gz" ] || "$GEN" --out "$dir/aclImdb_v1.tar.gz" --per-label 12500 --unsup 0 --tar 2>/dev/null
run() { "$BIN" pipeline run pipelines/imdb.yaml --quiet "$@"; }
secs() { local t; t=$(date +%s.%N); "$@" >/dev/null; awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }'; }

one=(); array=(); scan=(); merge=()
for _ in $(seq "$RUNS"); do
  one+=("$(secs run --overwrite --set "source.path=$dir/aclImdb" --set "sink.path=$WORK/scale-one")")
  rm -rf "$WORK/scale-array"
  t0=$(date +%s.%N)
  s=$(secs bash -c "for i in 0 1; do $BIN pipeline scan pipelines/imdb.yaml --quiet --threads 1 --task-index \$i --task-count 2 --set source.path=$dir/aclImdb --set sink.path=$WORK/scale-array & done; wait")
  for i in 0 1; do run --threads 1 --task-index "$i" --task-count 2 --set "source.path=$dir/aclImdb" --set "sink.path=$WORK/scale-array" & done; wait
  m=$(secs "$BIN" shards merge "$WORK/scale-array" --quiet)
  array+=("$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f", b - a }')"); scan+=("$s"); merge+=("$m")
done
med() { printf '%s\n' "$@" | median; }
echo "== pipelines/imdb.yaml, 50,000 reviews (folder), $(nproc) cores, medians of $RUNS"
printf '%-44s %8s s\n' "one process" "$(med "${one[@]}")"
printf '%-44s %8s s  (scan %s s, merge %s s)\n' "2 tasks: scan, run side by side, merge" "$(med "${array[@]}")" "$(med "${scan[@]}")" "$(med "${merge[@]}")"

server_dir="$CARGO_TARGET_DIR/s3-server"
server="$server_dir/release/bertpipe-s3-test-server"
[ -x "$server" ] || CARGO_TARGET_DIR="$server_dir" cargo build --release --quiet --locked --manifest-path tests/s3-server/Cargo.toml
root=$(mktemp -d); trap 'rm -rf "$root"' EXIT; mkdir -p "$root/bench/in"; cp "$dir/aclImdb_v1.tar.gz" "$root/bench/in/"
coproc SERVER { exec "$server" "$root" benchkey benchsecret; }
read -r port <&"${SERVER[0]}"
export AWS_ACCESS_KEY_ID=benchkey AWS_SECRET_ACCESS_KEY=benchsecret AWS_REGION=us-east-1 \
  AWS_ENDPOINT_URL="http://127.0.0.1:$port" AWS_ALLOW_HTTP=true BERTPIPE_CACHE_DIR="$root/cache"
disk=(); bucket=()
for _ in $(seq "$RUNS"); do
  disk+=("$(secs run --overwrite --set "source.path=$dir/aclImdb_v1.tar.gz" --set "sink.path=$WORK/scale-disk")")
  bucket+=("$(secs run --overwrite --set source.path=s3://bench/in/aclImdb_v1.tar.gz --set sink.path=s3://bench/out/imdb)")
done
kill "$SERVER_PID" 2>/dev/null || true
echo "== pipelines/imdb.yaml, 50,000 reviews (.tar.gz), loopback S3 (s3s-fs)"
printf '%-44s %8s s\n' "disk to disk" "$(med "${disk[@]}")"
printf '%-44s %8s s\n' "bucket to bucket" "$(med "${bucket[@]}")"
rm -rf "$root"
