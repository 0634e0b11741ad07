#!/usr/bin/env python3
"""PyTorch CPU reference for benches/families.sh: median seconds per sequence-classification
training step (forward, backward, clip, AdamW) of a BERT, RoBERTa or ModernBERT of the given size — the
work of `examples/train_step.rs` with BERTPIPE_FAMILY set. Two threads, as on this machine.

    family_step.py FAMILY LAYERS HIDDEN HEADS BATCH SEQ [STEPS]
"""
import statistics
import sys
import time

import torch
from transformers import (BertConfig, BertForSequenceClassification, ModernBertConfig,
                          ModernBertForSequenceClassification, RobertaConfig, RobertaForSequenceClassification)

family = sys.argv[1]
L, H, A, B, S = map(int, sys.argv[2:7])
steps = int(sys.argv[7]) if len(sys.argv) > 7 else 8
torch.manual_seed(0)
torch.set_num_threads(2)
if family == "bert":
    m = BertForSequenceClassification(BertConfig(vocab_size=30522, hidden_size=H, num_hidden_layers=L,
                                                 num_attention_heads=A, intermediate_size=4 * H, num_labels=2))
elif family == "roberta":
    m = RobertaForSequenceClassification(RobertaConfig(vocab_size=50265, hidden_size=H, num_hidden_layers=L,
                                                       num_attention_heads=A, intermediate_size=4 * H,
                                                       max_position_embeddings=514, type_vocab_size=1,
                                                       pad_token_id=1, layer_norm_eps=1e-5, num_labels=2))
elif family == "modernbert":
    # ModernBERT-base's shape at this depth (examples/train_step.rs, BERTPIPE_FAMILY=modernbert);
    # transformers' default attention on the CPU (SDPA over padded rows: flash attention's
    # unpadding needs a GPU).
    m = ModernBertForSequenceClassification(ModernBertConfig(vocab_size=50368, hidden_size=H, num_hidden_layers=L,
                                                             num_attention_heads=A, intermediate_size=3 * H // 2,
                                                             pad_token_id=50283, num_labels=2))
else:
    sys.exit(f"unknown family {family}")
m.train()
opt = torch.optim.AdamW(m.parameters(), lr=2e-5, weight_decay=0.01)
ids = torch.randint(1000, 30000, (B, S))
mask = torch.ones(B, S, dtype=torch.long)
y = torch.randint(0, 2, (B,))
ts = []
for i in range(steps + 2):
    t = time.perf_counter()
    out = m(input_ids=ids, attention_mask=mask, labels=y)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    if i >= 2:
        ts.append(time.perf_counter() - t)
med = statistics.median(ts)
print(f"torch {torch.__version__} {family} L{L} H{H} A{A} batch {B}x{S}: {med:.3f} s/step, {B / med:.1f} samples/s, "
      f"{B * S / med:.0f} tokens/s")
