#!/usr/bin/env bash
# Whole-pipeline benchmark: `bertpipe pipeline run` on generated corpora in aclImdb layout,
# 5,000 and 50,000 reviews (the IMDb-sized one is ~68 MB), as folders and as .tar.gz.
# Prints the median wall time of RUNS runs, docs/s, MB/s, peak RSS, and the ratio of peak RSS
# between the two sizes (memory must stay flat as the corpus grows).
#
#   benches/pipeline.sh                # RUNS=5 THREADS=0 (all cores)
#   RUNS=3 THREADS=1 benches/pipeline.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
RUNS=${RUNS:-5}
THREADS=${THREADS:-0}
WORK=${BENCH_DIR:-/tmp/bertpipe-bench}
cargo build --release --quiet --bin bertpipe --example gen_aclimdb
BIN="$CARGO_TARGET_DIR/release/bertpipe"
GEN="$CARGO_TARGET_DIR/release/examples/gen_aclimdb"
mkdir -p "$WORK"

# One run: wall seconds and peak RSS (KiB) of the child, from a fresh Python each time.
measure() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
wall = time.perf_counter() - t
if r.returncode != 0:
    sys.stderr.write(r.stderr.decode()); sys.exit(r.returncode)
print(f"{wall:.4f} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
PY
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

declare -A RSS
printf '%-22s %8s %10s %8s %10s\n' corpus "median s" "docs/s" "MB/s" "peak RSS"
for per_label in 1250 12500; do
  docs=$((per_label * 4))
  dir="$WORK/imdb-$docs"
  [ -d "$dir/aclImdb" ] || "$GEN" --out "$dir/aclImdb" --per-label "$per_label" --unsup 0 2>/dev/null
  [ -f "$dir/aclImdb_v1.tar.gz" ] || "$GEN" --out "$dir/aclImdb_v1.tar.gz" --per-label "$per_label" --unsup 0 --tar 2>/dev/null
  mb=$(du -sb --apparent-size "$dir/aclImdb" | awk '{printf "%.1f", $1/1e6}')
  for form in aclImdb aclImdb_v1.tar.gz; do
    times=(); rss=0
    for _ in $(seq "$RUNS"); do
      read -r wall kib < <(measure "$BIN" pipeline run pipelines/imdb-clean.yaml --quiet --overwrite --threads "$THREADS" \
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
