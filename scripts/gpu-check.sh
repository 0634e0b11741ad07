#!/usr/bin/env bash
# The CUDA checks, in one call on a lent GPU machine. That machine has CUDA, PyTorch and
# Python but no Rust toolchain and no network, so the binaries are built beforehand here by
# scripts/gpu-build.sh into .gpu/ (git-ignored), which the call carries:
#   scripts/gpu-build.sh
#   run carry=[".gpu"] timeout_s=540 command="scripts/gpu-check.sh"
# It fine-tunes the tiny model on the sample on CUDA in f32 and in bf16, compares the f32
# run's losses with the CPU's (same data order and dropout masks on every device) and CPU and
# CUDA logits of one model, times BERT-mini / BERT-base training steps on CUDA (f32 and bf16,
# beside PyTorch's), and evaluates the exported model with ONNX Runtime's CUDA provider where
# the machine has one. Prints everything it measured; exits non-zero if a check fails.
# Budget: about 5 minutes.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
fail=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
[ -d .gpu ] || { echo "no .gpu/: run scripts/gpu-build.sh here first and carry .gpu"; exit 2; }
echo "binaries built from $(cat .gpu/commit 2>/dev/null), tree at $(git rev-parse HEAD 2>/dev/null)"
bin=/tmp/bertpipe-gpu
mkdir -p "$bin"
for f in .gpu/*.xz; do
  python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" \
    "$f" "$bin/$(basename "$f" .xz)"
done
chmod +x "$bin"/*
# libcudart from the build; cuBLAS, cuRAND and NVRTC (loaded at run time) from PyTorch's wheels,
# wherever Python has them: site-packages, the user's site-packages (pip install --user), or
# any other folder on sys.path.
libs=$(python3 - <<'PY'
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()] + [p for p in sys.path if p]
dirs = set()
for root in roots:
    for pat in ("nvidia/*/lib", "nvidia/cu13/lib", "torch/lib"):
        for d in glob.glob(os.path.join(root, pat)):
            dirs.add(d)
print(":".join(sorted(dirs)))
PY
)
[ -n "$libs" ] || echo "note: no CUDA libraries of PyTorch's wheels found on Python's paths"
export LD_LIBRARY_PATH="$PWD/.gpu:$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$bin:$PATH"
bertpipe doctor || true

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bertpipe pipeline run pipelines/imdb.yaml --quiet --set sink.path="$work/imdb" || exit 1
# The reference model for the comparisons below, trained on the CPU, and the same run with
# candle's graph ops instead of the fused CPU kernels (what CUDA runs): how far two correct
# implementations drift apart bounds how far CUDA may. Every step is logged.
every="--set logging_steps=1"
bertpipe train pipelines/imdb-finetune.yaml --quiet $every --set data="$work/imdb" --set output_dir="$work/ft-cpu" \
  2>&1 | grep -E '^trained|^eval' || exit 1
BERTPIPE_UNFUSED=1 bertpipe train pipelines/imdb-finetune.yaml --quiet $every --set max_steps=10 --set eval_split=null \
  --set data="$work/imdb" --set output_dir="$work/ft-cpu-graph" >/dev/null 2>&1 || { echo "CPU graph-op run FAILED"; fail=1; }
for dt in f32 bf16; do
  echo "== fine-tune on CUDA (tiny, sample, $dt)"
  if ! bertpipe train pipelines/imdb-finetune.yaml --quiet $every --device cuda --set dtype=$dt \
      --set data="$work/imdb" --set output_dir="$work/ft-$dt"; then
    echo "CUDA fine-tune ($dt) FAILED"; fail=1
  fi
done
echo "== CPU vs CUDA training (same data order and dropout masks on every device)"
python3 - "$work" <<'PY' || { echo "CPU vs CUDA training FAILED"; fail=1; }
import json, sys
work = sys.argv[1]
def log(run):
    return {r["step"]: r for r in map(json.loads, open(f"{work}/{run}/metrics.jsonl")) if "loss" in r}
cpu, graph, gpu = log("ft-cpu"), log("ft-cpu-graph"), log("ft-f32")
rel = lambda a, b: abs(a - b) / max(abs(a), 1e-9)
ok = True
# Step 1 starts from the same weights: its loss and gradient norm can be equal.
for key in ("loss", "grad_norm"):
    d = rel(cpu[1][key], gpu[1][key])
    print(f"step 1 {key}: cpu {cpu[1][key]:.7f} cuda {gpu[1][key]:.7f}, relative difference {d:.1e} ({'ok' if d < 1e-5 else 'TOO LARGE'})")
    ok &= d < 1e-5
# Later steps: float differences compound; CUDA may drift from the fused CPU run as far as the
# CPU's own graph-op run does (x10, and at least 1e-5).
print("step  cpu fused   cpu graph   cuda       |fused-graph|  |fused-cuda|")
for s in sorted(set(cpu) & set(graph) & set(gpu)):
    dg, dc = rel(cpu[s]["loss"], graph[s]["loss"]), rel(cpu[s]["loss"], gpu[s]["loss"])
    bound = max(10 * dg, 1e-5)
    flag = "ok" if dc <= bound else "TOO LARGE"
    ok &= dc <= bound
    print(f"{s:4d}  {cpu[s]['loss']:.6f}  {graph[s]['loss']:.6f}  {gpu[s]['loss']:.6f}  {dg:.1e}        {dc:.1e} ({flag}, bound {bound:.1e})")
sys.exit(0 if ok else 1)
PY
echo "== CPU vs CUDA logits of the CPU-trained model"
python3 - "$work" "$bin/model_outputs" <<'PY' || { echo "CPU vs CUDA logits FAILED"; fail=1; }
import json, subprocess, sys, random
work, exe = sys.argv[1], sys.argv[2]
random.seed(0)
lens = [128, 97, 64, 5]
ids = [[101] + [random.randrange(1000, 30000) for _ in range(n - 2)] + [102] + [0] * (128 - n) for n in lens]
mask = [[1] * n + [0] * (128 - n) for n in lens]
batch = json.dumps({"input_ids": ids, "attention_mask": mask, "token_type_ids": [[0] * 128 for _ in lens]})
run = lambda dev: json.loads(subprocess.run([exe, f"{work}/ft-cpu/final", "classify", dev], input=batch, capture_output=True, text=True, check=True).stdout)["logits"]
cpu, gpu = run("cpu"), run("cuda")
d = max(abs(a - b) for r1, r2 in zip(cpu, gpu) for a, b in zip(r1, r2))
print(f"max |logits cpu - cuda| = {d:.2e} ({'ok' if d < 1e-4 else 'TOO LARGE'})")
sys.exit(0 if d < 1e-4 else 1)
PY
echo "== training step on CUDA (batch 32 x 128, median of 8 steps)"
for dt in f32 bf16; do
  for shape in "4 256 4 32 128" "12 768 12 32 128"; do
    BERTPIPE_DEVICE=cuda BERTPIPE_DTYPE=$dt timeout 120 "$bin/train_step" $shape 8 || { echo "train_step $dt $shape FAILED"; fail=1; }
  done
done
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "== PyTorch on CUDA, same shapes (f32, then bf16 autocast)"
  python3 - <<'PY'
import time, statistics, torch
from transformers import BertConfig, BertForSequenceClassification
for L, H, A in [(4, 256, 4), (12, 768, 12)]:
    for amp in (False, True):
        B, S = 32, 128
        m = BertForSequenceClassification(BertConfig(vocab_size=30522, hidden_size=H, num_hidden_layers=L, num_attention_heads=A, intermediate_size=4*H)).cuda().train()
        opt = torch.optim.AdamW(m.parameters(), lr=2e-5, weight_decay=0.01)
        ids = torch.randint(1000, 30000, (B, S)).cuda(); y = torch.randint(0, 2, (B,)).cuda()
        ts = []
        for i in range(10):
            torch.cuda.synchronize(); t = time.perf_counter()
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
                loss = m(input_ids=ids, labels=y).loss
            loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); opt.zero_grad()
            torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
        med = statistics.median(ts[2:])
        print(f"torch cuda L{L} H{H} {'bf16' if amp else 'f32'}: {med:.4f} s/step, {B*S/med:.0f} tokens/s")
PY
fi
echo "== ONNX: export (plain, --optimize, --fp16), eval on CPU and on CUDA, the fp16 gate on CUDA"
bertpipe export onnx --checkpoint "$work/ft-cpu/final" --out "$work/model.onnx" --verify 2>&1 | tail -1 \
  || { echo "ONNX export --verify FAILED"; fail=1; }
bertpipe export onnx --checkpoint "$work/ft-cpu/final" --out "$work/model-opt.onnx" --optimize --verify 2>&1 | tail -1 \
  || { echo "ONNX export --optimize --verify FAILED"; fail=1; }
bertpipe export onnx --checkpoint "$work/ft-cpu/final" --out "$work/model-fp16.onnx" --precision fp16 --optimize --verify 2>&1 | tail -1 \
  || { echo "ONNX export --precision fp16 --optimize --verify FAILED"; fail=1; }
bertpipe eval --model "$work/model.onnx" --data "$work/imdb" --quiet --out "$work/eval-cpu" | grep -E '^rows|docs/s|^eval' \
  || { echo "CPU eval FAILED"; fail=1; }
if python3 -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers()" 2>/dev/null; then
  for m in model model-opt; do
    bertpipe eval --model "$work/$m.onnx" --data "$work/imdb" --device cuda --batch-size 64 --quiet \
      --out "$work/eval-cuda-$m" | grep -E '^rows|docs/s|^eval' || { echo "CUDA eval of $m FAILED"; fail=1; }
  done
  # fp16 on CUDA, gated against the fp32 fused graph on the same rows (agreement, Δ accuracy, speed).
  bertpipe eval --model "$work/model-fp16.onnx" --baseline "$work/model-opt.onnx" --data "$work/imdb" --device cuda \
    --batch-size 64 --quiet --out "$work/eval-cuda-fp16" | grep -E 'rows flipped|^  accuracy|throughput|gate:' \
    || { echo "CUDA fp16 gate FAILED"; fail=1; }
else
  echo "ONNX Runtime here has no CUDA provider (the CPU onnxruntime wheel): CUDA eval not run"
fi
echo "== total $(( $(date +%s) - t0 )) s; $([ $fail = 0 ] && echo 'all checks passed' || echo 'SOME CHECKS FAILED')"
exit $fail
