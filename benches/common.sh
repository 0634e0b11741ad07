# Shared by the benchmark scripts: build, locate binaries, time one run, take a median.
# shellcheck shell=bash
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
RUNS=${RUNS:-3}
WORK=${BENCH_DIR:-/tmp/bertpipe-bench}
cargo build --release --quiet --bin bertpipe --example gen_aclimdb
BIN="$CARGO_TARGET_DIR/release/bertpipe"
GEN="$CARGO_TARGET_DIR/release/examples/gen_aclimdb"
mkdir -p "$WORK"

# One run: prints wall seconds and the child's peak RSS (KiB), from a fresh Python each time.
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
