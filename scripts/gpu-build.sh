#!/usr/bin/env bash
# Builds the CUDA binaries for scripts/gpu-check.sh HERE, on a machine without a GPU, because
# the lent GPU machine has no Rust toolchain and fetches nothing. CUDA's compiler comes from
# PyPI (nvcc, nvvm and headers of CUDA 13.0, matching that machine's driver: newer PTX would
# not load there). The result — bertpipe, model_outputs and train_step, stripped and
# xz-compressed (the GPU machine unpacks them with Python's lzma), plus libcudart — goes to
# .gpu/ (git-ignored), which the device call carries:
#   scripts/gpu-build.sh             # ~40 min cold on 2 cores, minutes when warm
#   run carry=[".gpu"] command="scripts/gpu-check.sh"
# cudarc loads the driver, cuBLAS, cuRAND and NVRTC at run time (vendor/candle-core asks for
# `dynamic-loading`), so nothing from CUDA is needed to link but libcudart (candle-kernels).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda="${BERTPIPE_CUDA_HOME:-$HOME/.cache/bertpipe-cuda13}"
if [ ! -x "$cuda/nvidia/cu13/bin/nvcc" ]; then
  python3 -m pip install -q --target "$cuda" "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-runtime==13.0.*" \
    "nvidia-cuda-cccl==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-crt==13.0.*"
fi
export CUDA_HOME="$cuda/nvidia/cu13"
ln -sf libcudart.so.13 "$CUDA_HOME/lib/libcudart.so"
export PATH="$CUDA_HOME/bin:$PATH" CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
export LIBRARY_PATH="$CUDA_HOME/lib${LIBRARY_PATH:+:$LIBRARY_PATH}"
export CARGO_TARGET_DIR="${BERTPIPE_CUDA_TARGET:-$HOME/.cache/bertpipe-target-cuda}"
nvcc --version | tail -1
t0=$(date +%s)
cargo build --release --locked --features cuda --bin bertpipe --example model_outputs --example train_step
echo "== build: $(( $(date +%s) - t0 )) s"
rm -rf .gpu && mkdir -p .gpu
for exe in bertpipe examples/model_outputs examples/train_step; do
  strip -o ".gpu/$(basename $exe)" "$CARGO_TARGET_DIR/release/$exe"
  xz -9 -T0 ".gpu/$(basename $exe)"
done
cp "$CUDA_HOME/lib/libcudart.so.13" .gpu/
git rev-parse HEAD > .gpu/commit
ls -la .gpu
