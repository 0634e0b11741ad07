#!/usr/bin/env bash
# The Python wheel, checked as a user meets it (CI runs this):
#   1. `pip install .` into a fresh venv (maturin from PyPI, the Rust build in
#      $CARGO_TARGET_DIR): its `bertpipe` command and module work;
#   2. `maturin build --release`: the wheel file installs offline (`--no-index`) into another
#      fresh venv, without torch, and works there;
#   3. that wheel in the test venv, then tests/python with pytest: ShardDataset against the
#      trainer, to_hf_dataset, the notebook calls, the command, a torchrun DDP run.
# The test venv (torch, transformers, datasets, torchdata, pytest) is kept between runs in
# $BERTPIPE_WHEEL_VENV (default ~/.cache/bertpipe-wheel-venv); torch comes from its CPU-only
# index when that answers, else from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
# The Rust build honours the lock file, as `cargo build --locked` does.
export MATURIN_PEP517_ARGS="--locked"
venv="${BERTPIPE_WHEEL_VENV:-$HOME/.cache/bertpipe-wheel-venv}"
py="$venv/bin/python"

if ! "$py" -c "import torch, transformers, datasets, torchdata, pytest, pyarrow" 2>/dev/null; then
  echo "== making $venv (once; from the package registries)"
  [ -x "$py" ] || python3 -m venv "$venv"
  "$py" -m pip install -q --upgrade pip
  "$py" -c "import torch" 2>/dev/null \
    || "$py" -m pip install -q --index-url https://download.pytorch.org/whl/cpu torch 2>/dev/null \
    || "$py" -m pip install -q torch
  "$py" -m pip install -q pytest transformers datasets torchdata pyarrow
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "== pip install . into a fresh venv (maturin from PyPI; the Rust build reuses $CARGO_TARGET_DIR)"
python3 -m venv "$work/fresh"
start=$(date +%s)
"$work/fresh/bin/pip" install -q .
echo "pip install . took $(( $(date +%s) - start )) s"
"$work/fresh/bin/bertpipe" --version
"$work/fresh/bin/python" -c "import bertpipe; print('import bertpipe:', bertpipe.__version__)"

echo "== maturin build --release: the wheel file, installed offline (--no-index) into another fresh venv"
"$py" -m pip install -q "maturin>=1.9.4,<2"
start=$(date +%s)
"$venv/bin/maturin" build --release --locked --quiet --out "$work/wheels" >/dev/null
wheel="$(ls "$work"/wheels/bertpipe-*.whl)"
echo "maturin build took $(( $(date +%s) - start )) s; $(basename "$wheel"): $(du -k "$wheel" | cut -f1) KiB"
python3 -m venv "$work/offline"
"$work/offline/bin/pip" install -q --no-index "$wheel"
"$work/offline/bin/bertpipe" pipeline validate pipelines/imdb.yaml
"$work/offline/bin/python" -c "import bertpipe; print('import bertpipe:', bertpipe.__version__, 'ShardDataset over', bertpipe.ShardDataset.__mro__[1].__name__, '(no torch here)')"

echo "== tests/python (pytest) against the wheel, in $venv"
"$py" -m pip install -q --force-reinstall --no-deps "$wheel"
# The wheel's command first on PATH: the tests call `bertpipe` as a user would.
export PATH="$venv/bin:$PATH"
"$py" -m pytest -q -rs tests/python -p no:cacheprovider "$@" | tee "$work/pytest.txt"
# A test the environment would skip (torchdata, transformers missing) is a failure here.
if grep -qi "skipped" "$work/pytest.txt"; then
  echo "a Python test was skipped; every one must run here" >&2
  exit 1
fi
