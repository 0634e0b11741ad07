#!/usr/bin/env bash
# Runs fuzz targets under libFuzzer (cargo-fuzz, nightly; no sanitizer: bertpipe is safe Rust,
# the findings are panics, aborts, timeouts and memory blow-ups).
#   scripts/fuzz.sh TARGET [SECONDS]     one target (default 600 s)
#   scripts/fuzz.sh all [SECONDS]        every target in turn
# Targets: pipeline_yaml tokenizer sources contract_files model_files (bertpipe::fuzz).
# Each starts from fuzz/seeds/TARGET plus fuzz/regressions/TARGET; a finding lands in
# fuzz/artifacts/TARGET/: fix it, then move it to fuzz/regressions/TARGET/ so that
# `cargo test` (tests/fuzz_replay.rs) replays it from then on. The working corpus grows in
# $FUZZ_CORPUS (default ~/.cache/bertpipe-fuzz/corpus), outside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET|all [SECONDS]}
secs=${2:-600}
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export CARGO_TARGET_DIR=${FUZZ_TARGET_DIR:-$HOME/.cache/bertpipe-fuzz/target}
corpus_root=${FUZZ_CORPUS:-$HOME/.cache/bertpipe-fuzz/corpus}
targets=("$target")
[ "$target" = all ] && targets=(pipeline_yaml tokenizer sources contract_files model_files)
for t in "${targets[@]}"; do
  corpus="$corpus_root/$t"
  mkdir -p "$corpus" "fuzz/artifacts/$t" "fuzz/regressions/$t"
  echo "== fuzz $t for $secs s (corpus $corpus)"
  cargo +nightly fuzz run --fuzz-dir fuzz -s none "$t" "$corpus" "fuzz/seeds/$t" "fuzz/regressions/$t" -- \
    -max_total_time="$secs" -rss_limit_mb=4096 -timeout=30 -max_len=262144 \
    -artifact_prefix="fuzz/artifacts/$t/" -print_final_stats=1
done
