#!/usr/bin/env bash
# Data-parallel training on this machine (the `mpi` feature, OpenMPI): the step time of one
# global batch of 16 rows as 2 ranks × 1 thread (mpirun -n 2, 8 rows each) beside 1 rank × 2
# threads and 1 rank × 1 thread, BERT-mini (preset `mini`, 4 layers, 256 hidden) fine-tuning on
# the bundled sample's shards (pipelines/imdb.yaml, rows up to 512 tokens), dropout on; then the
# all-reduce alone for BERT-mini, MiniLM-L6 and BERT-base gradients over MPI on loopback
# (examples/allreduce.rs). A run's step time is its mean over the logged windows (the first,
# with its warm-up, left out): every run trains the same batches, whose lengths vary a lot with
# length grouping, so windows differ by batch and only whole runs compare; the median of RUNS
# runs is printed.
#   benches/data_parallel.sh              STEPS=40 RUNS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
command -v mpirun >/dev/null || { echo "benches/data_parallel.sh: no mpirun (apt install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
cargo build --release --quiet --locked --features mpi --bin bertpipe --example allreduce
BIN="$CARGO_TARGET_DIR/release/bertpipe"
RUNS=${RUNS:-3}; steps=${STEPS:-40}
w=${BENCH_DIR:-/tmp/bertpipe-bench}/data_parallel; rm -rf "$w"; mkdir -p "$w"
"$BIN" pipeline run pipelines/imdb.yaml --quiet --overwrite --set sink.path="$w/imdb"

# One training: NAME PER_DEVICE THREADS [LAUNCHER…]; prints its windows' seconds per step.
train() {
  local name=$1 per_device=$2 threads=$3; shift 3
  "$@" "$BIN" train pipelines/imdb-finetune.yaml --quiet --overwrite \
    --set data="$w/imdb" --set output_dir="$w/$name" --set model.preset=mini \
    --set per_device_train_batch_size="$per_device" --set threads="$threads" \
    --set max_steps="$steps" --set logging_steps=5 --set eval_strategy=no --set save_steps=100000 >/dev/null 2>"$w/$name.err" \
    || { cat "$w/$name.err" >&2; exit 1; }
  python3 - "$w/$name/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
w = rows[1:]
step = sum(16 / r["samples_per_second"] for r in w) / len(w)
print(step, sum(r.get("allreduce_seconds_per_step", 0) for r in w) / len(w))
PY
}

: > "$w/steps.txt"
for i in $(seq 1 "$RUNS"); do
  train one-2t 16 2 env | sed 's/^/1x2 /' >> "$w/steps.txt"
  train two-1t 8 1 mpirun -n 2 --bind-to core | sed 's/^/2x1 /' >> "$w/steps.txt"
  train one-1t 16 1 env | sed 's/^/1x1 /' >> "$w/steps.txt"
done
python3 - "$w/steps.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    k, s, c = line.split()
    runs.setdefault(k, []).append((float(s), float(c)))
base = statistics.median(s for s, _ in runs["1x2"])
print(f"BERT-mini, global batch 16, rows up to 512 tokens, seconds per optimiser step (median of {len(runs['1x2'])} runs):")
names = {"1x2": "1 rank  × 2 threads", "2x1": "2 ranks × 1 thread ", "1x1": "1 rank  × 1 thread "}
for k in ["1x2", "2x1", "1x1"]:
    s = statistics.median(x for x, _ in runs[k])
    c = statistics.median(x for _, x in runs[k])
    extra = f", of which all-reduce {c:.3f} s" if c else ""
    print(f"  {names[k]}  {s:.3f} s/step  ({s / base:.2f}× the 1 × 2 step{extra})")
PY
mpirun -n 2 --bind-to core "$CARGO_TARGET_DIR/release/examples/allreduce"
