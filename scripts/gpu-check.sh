#!/usr/bin/env bash
# One call on a lent GPU machine: build with CUDA, fine-tune on CUDA, compare CPU and CUDA
# logits of the result, time a BERT-mini / BERT-base training step on CUDA, and evaluate the
# exported model with ONNX Runtime's CUDA provider (the machine's onnxruntime-gpu).
# Prints everything it measured; exits non-zero if a check fails. Budget: under 8 minutes
# after the build.
#   scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-gpu}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
command -v nvcc >/dev/null && nvcc --version | tail -1
t0=$(date +%s)
cargo build --release --features cuda --bin bertpipe --example model_outputs --example train_step
echo "== build: $(( $(date +%s) - t0 )) s"
bin="$CARGO_TARGET_DIR/release/bertpipe"
work=$(mktemp -d)
"$bin" pipeline run pipelines/imdb.yaml --quiet --set sink.path="$work/imdb"
echo "== fine-tune on CUDA (tiny, sample)"
"$bin" train pipelines/imdb-finetune.yaml --quiet --device cuda --set data="$work/imdb" --set output_dir="$work/ft"
echo "== CPU vs CUDA logits of the fine-tuned model"
python3 - "$work" "$CARGO_TARGET_DIR/release/examples/model_outputs" <<'PY'
import json, subprocess, sys, random
work, exe = sys.argv[1], sys.argv[2]
random.seed(0)
lens = [128, 97, 64, 5]
ids = [[101] + [random.randrange(1000, 30000) for _ in range(n - 2)] + [102] + [0] * (128 - n) for n in lens]
mask = [[1] * n + [0] * (128 - n) for n in lens]
batch = json.dumps({"input_ids": ids, "attention_mask": mask, "token_type_ids": [[0] * 128 for _ in lens]})
run = lambda dev: json.loads(subprocess.run([exe, f"{work}/ft/final", "classify", dev], input=batch, capture_output=True, text=True, check=True).stdout)["logits"]
cpu, gpu = run("cpu"), run("cuda")
d = max(abs(a - b) for r1, r2 in zip(cpu, gpu) for a, b in zip(r1, r2))
print(f"max |logits cpu - cuda| = {d:.2e} ({'ok' if d < 1e-4 else 'TOO LARGE'})")
sys.exit(0 if d < 1e-4 else 1)
PY
echo "== ONNX: export (plain and --optimize), eval on CPU and on CUDA"
"$bin" doctor || true
"$bin" export onnx --checkpoint "$work/ft/final" --out "$work/model.onnx" --verify 2>&1 | tail -1
"$bin" export onnx --checkpoint "$work/ft/final" --out "$work/model-opt.onnx" --optimize --verify 2>&1 | tail -1
"$bin" eval --model "$work/model.onnx" --data "$work/imdb" --quiet --out "$work/eval-cpu" | grep -E '^rows|docs/s|^eval'
for m in model model-opt; do
  "$bin" eval --model "$work/$m.onnx" --data "$work/imdb" --device cuda --batch-size 64 --quiet --out "$work/eval-cuda-$m" | grep -E '^rows|docs/s|^eval' || echo "CUDA eval of $m FAILED"
done
echo "== training step on CUDA"
for shape in "4 256 4 32 128" "12 768 12 32 128"; do
  BERTPIPE_DEVICE=cuda "$CARGO_TARGET_DIR/release/examples/train_step" $shape 8
done
if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
  echo "== PyTorch on CUDA, same shapes"
  for shape in "4 256 4 32 128" "12 768 12 32 128"; do
    python3 - $shape <<'PY'
import sys, time, statistics, torch
from transformers import BertConfig, BertForSequenceClassification
L, H, A, B, S = map(int, sys.argv[1:6])
m = BertForSequenceClassification(BertConfig(vocab_size=30522, hidden_size=H, num_hidden_layers=L, num_attention_heads=A, intermediate_size=4*H)).cuda().train()
opt = torch.optim.AdamW(m.parameters(), lr=2e-5, weight_decay=0.01)
ids = torch.randint(1000, 30000, (B, S)).cuda(); y = torch.randint(0, 2, (B,)).cuda()
ts = []
for i in range(10):
    torch.cuda.synchronize(); t = time.perf_counter()
    m(input_ids=ids, labels=y).loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step(); opt.zero_grad()
    torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
med = statistics.median(ts[2:]); print(f"torch cuda L{L} H{H}: {med:.4f} s/step, {B*S/med:.0f} tokens/s")
PY
  done
fi
echo "== total $(( $(date +%s) - t0 )) s"
