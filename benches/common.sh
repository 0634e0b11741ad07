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

# Runs a command; its stdout's last line, then "peak RSS N MB" of the process tree.
peak() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys
out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
print(out)
print(f"peak RSS {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024:.0f} MB")
PY
}

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# RUNS alternating runs of pipelines/imdb.yaml (THREADS workers, 0: all cores) and the Python
# reference (../shared/bench/py_imdb_pipeline.py with $PY, PROCS processes) on the aclImdb
# folder DIR; each side's wall seconds in the arrays OURS and THEIRS.
imdb_side_by_side() {
  local dir=$1 procs=$2 threads=${3:-0} wall
  OURS=(); THEIRS=()
  for _ in $(seq "$RUNS"); do
    read -r wall _ < <(measure "$BIN" pipeline run pipelines/imdb.yaml --quiet --overwrite --threads "$threads" \
      --set "source.path=$dir" --set "source.labels=[neg, pos]" --set "sink.path=$WORK/side-by-side-out")
    OURS+=("$wall")
    rm -rf "$WORK/side-by-side-py"
    read -r wall _ < <(measure "$PY" ../shared/bench/py_imdb_pipeline.py "$dir" data/vocab/bert-base-uncased.txt \
      "$WORK/side-by-side-py" --procs "$procs")
    THEIRS+=("$wall")
  done
}

# Finds or makes the Python environment a benchmark needs: $PYTHON if set, else .venv, made
# here from the package registries when absent (torch's CPU-only index first, PyPI after).
# Sets PY; on failure says why and returns 1, so a script can stop with that message instead
# of a traceback.
ensure_python() {
  local mods="$1"; shift
  PY=${PYTHON:-.venv/bin/python}
  if [ -x "$PY" ] && "$PY" -c "import $mods" 2>/dev/null; then return 0; fi
  if [ -n "${PYTHON:-}" ]; then
    echo "PYTHON=$PYTHON cannot import $mods" >&2; return 1
  fi
  echo "== making .venv with: $* (once; from the package registries)" >&2
  [ -x .venv/bin/python ] || python3 -m venv .venv || { echo "python3 -m venv failed" >&2; return 1; }
  if [[ " $* " == *" torch "* ]] && ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/pip install -q --index-url https://download.pytorch.org/whl/cpu torch 2>/dev/null \
      || .venv/bin/pip install -q torch || { echo "could not install torch" >&2; return 1; }
  fi
  .venv/bin/pip install -q "$@" || { echo "could not install $*" >&2; return 1; }
  "$PY" -c "import $mods" || { echo ".venv cannot import $mods" >&2; return 1; }
}
