"""What the golden model fixtures share — make_golden_model.py (BERT), make_golden_roberta.py
and make_golden_modernbert.py: the padded batch and the heads' outputs recorded on it (the
last two), HF Trainer's AdamW parameter groups (no weight decay for biases and LayerNorms), and
several clipped steps under the linear warmup/decay schedule."""
import torch
import transformers
from transformers import get_linear_schedule_with_warmup

MLM_POSITIONS = [[0, 2], [0, 8], [1, 3], [2, 1]]
MLM_LABELS = [110, 57, 105, 119]
LABELS = [1, 0, 1]


def padded_batch(vocab, seed, start, end, pad, lens=(11, 7, 4)):
    """Random ids of rows `lens` long (the longest unpadded), each `start … end`, then `pad`."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (len(lens), max(lens)), generator=g)
    mask = torch.zeros(len(lens), max(lens), dtype=torch.long)
    for b, n in enumerate(lens):
        ids[b, 0] = start
        ids[b, n - 1] = end
        ids[b, n:] = pad
        mask[b, :n] = 1
    return ids, mask


def heads_on_batch(encoder, mlm, cls, ids, mask):
    """The fixture's batch and `transformers`' outputs on it: the encoder's last hidden states,
    MLM logits at MLM_POSITIONS and their loss, classification logits (the rows' logits must
    differ by far more than the tests' tolerance). Returns the record and that spread."""
    out = {"input_ids": ids.tolist(), "attention_mask": mask.tolist(),
           "token_type_ids": torch.zeros_like(ids).tolist(), "labels": LABELS, "mlm_positions": MLM_POSITIONS,
           "mlm_labels": MLM_LABELS, "torch": torch.__version__, "transformers": transformers.__version__}
    rows, seq = ids.shape
    with torch.no_grad():
        out["hidden"] = encoder(input_ids=ids, attention_mask=mask).last_hidden_state.tolist()
        logits = mlm(input_ids=ids, attention_mask=mask).logits
        out["mlm_logits"] = [logits[b, s].tolist() for b, s in MLM_POSITIONS]
        lab = torch.full((rows, seq), -100)
        for (b, s), l in zip(MLM_POSITIONS, MLM_LABELS):
            lab[b, s] = l
        out["mlm_loss"] = mlm(input_ids=ids, attention_mask=mask, labels=lab).loss.item()
        cls_logits = cls(input_ids=ids, attention_mask=mask).logits
        out["cls_logits"] = cls_logits.tolist()
    spread = min((cls_logits[a] - cls_logits[b]).abs().max().item() for a in range(rows) for b in range(a + 1, rows))
    assert spread > 0.05, f"the rows' logits differ by only {spread:.2e}"
    return out, spread


def no_decay(name):
    # HF Trainer leaves out biases and every nn.LayerNorm (ModernBERT's `norm`, `attn_norm`, …).
    module = name.rsplit(".", 2)[-2] if name.count(".") else ""
    return name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name or module.endswith("norm")


def adamw(model, lr, weight_decay):
    """The model's parameters by name, and AdamW over them in HF Trainer's two groups."""
    named = dict(model.named_parameters())
    groups = [{"params": [p for n, p in named.items() if not no_decay(n)], "weight_decay": weight_decay},
              {"params": [p for n, p in named.items() if no_decay(n)], "weight_decay": 0.0}]
    return named, torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.999), eps=1e-8)


def one_step(model, loss_fn, watch, lr, weight_decay, clip):
    """One training step — loss, backward, clip to `clip`, AdamW — as the fixture records it: the
    loss, the `watch` tensors' gradients, the gradient norm before clipping, those tensors after
    the step, and the step's settings."""
    named, opt = adamw(model, lr, weight_decay)
    loss = loss_fn()
    loss.backward()
    out = {"cls_loss": loss.item(), "grads": {n: named[n].grad.flatten().tolist() for n in watch}}
    out["grad_norm"] = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
    opt.step()
    out["step"] = {"lr": lr, "weight_decay": weight_decay, "max_grad_norm": clip}
    out["after_step"] = {n: named[n].detach().flatten().tolist() for n in watch}
    return out


def scheduled_steps(model, loss_fn, watch, lr, weight_decay, clip, warmup, total, steps):
    """`steps` AdamW steps under `get_linear_schedule_with_warmup(warmup, total)`, the gradient
    clipped to `clip`: per step the learning rate, loss, gradient norm and the `watch` tensors
    after it."""
    named, opt = adamw(model, lr, weight_decay)
    sched = get_linear_schedule_with_warmup(opt, warmup, total)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
        step_lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        out.append({"lr": step_lr, "loss": loss.item(), "grad_norm": norm,
                    "after": {n: named[n].detach().flatten().tolist() for n in watch}})
    return out


def train_and_write(cls, ids, mask, watch, out, spread, path, lr=1e-2, weight_decay=0.01, clip=0.1,
                    warmup=2, total=6, steps=5):
    """Records into `out`, from the classifier's initial weights each time: one clipped AdamW step
    (one_step) and `steps` scheduled ones (scheduled_steps), on the fixture's batch and LABELS;
    then writes `out` to `path` as JSON."""
    import json
    import os
    labels = torch.tensor(LABELS)
    loss = lambda: cls(input_ids=ids, attention_mask=mask, labels=labels).loss  # noqa: E731
    initial = {k: v.detach().clone() for k, v in cls.state_dict().items()}
    cls.train()
    out.update(one_step(cls, loss, watch, lr, weight_decay, clip))
    cls.load_state_dict(initial)
    record = scheduled_steps(cls, loss, watch, lr, weight_decay, clip, warmup, total, steps)
    out["schedule"] = {"lr": lr, "weight_decay": weight_decay, "max_grad_norm": clip, "warmup": warmup,
                       "total": total, "steps": record}
    with open(path, "w") as f:
        json.dump(out, f)
    print(f"wrote {os.path.basename(path)} (torch {torch.__version__}, transformers {transformers.__version__}); "
          f"rows' logits differ by >= {spread:.3f}; scheduled losses {[round(s['loss'], 4) for s in record]}")
    return out
