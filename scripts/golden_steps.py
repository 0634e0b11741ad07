"""The optimiser half of the golden model fixtures, shared by make_golden_model.py (BERT),
make_golden_roberta.py and make_golden_modernbert.py: HF Trainer's AdamW parameter groups (no
weight decay for biases and LayerNorms), and several clipped steps under the linear
warmup/decay schedule."""
import torch
from transformers import get_linear_schedule_with_warmup


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
