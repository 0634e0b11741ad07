//! AdamW with decoupled weight decay (PyTorch's `torch.optim.AdamW` update, step for step),
//! global-norm gradient clipping (`clip_grad_norm_`), and HF's learning-rate schedules.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use candle_core::{DType, Tensor};

use super::config::Schedule;
use crate::model::params::Params;

/// Biases and LayerNorm parameters get no weight decay (the HF/BERT convention; HF's Trainer
/// leaves out every `nn.LayerNorm`, which ModernBERT names `norm`, `attn_norm`, `mlp_norm`,
/// `final_norm`).
pub fn decays(name: &str) -> bool {
    let module = name.rsplit('.').nth(1).unwrap_or("");
    !(name.ends_with(".bias")
        || name.contains("LayerNorm")
        || name.contains("layer_norm")
        || module.ends_with("norm")
        || name == "cls.predictions.bias"
        || name == "lm_head.bias")
}

pub struct AdamW {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Optimiser steps taken (PyTorch's `state['step']`).
    pub step: u64,
    /// First and second moments, in parameter order.
    moments: Vec<Moments>,
}

/// A parameter's moments: host vectors updated in place with the parameter (CPU f32), or
/// tensors updated by tensor ops (other devices).
enum Moments {
    Host { m: Vec<f32>, v: Vec<f32> },
    Device { m: Tensor, v: Tensor },
}

/// Whether a parameter is updated by the fused in-place CPU kernel.
fn in_place(t: &Tensor) -> bool {
    matches!(t.device(), candle_core::Device::Cpu)
        && t.dtype() == DType::F32
        && t.is_contiguous()
        && crate::model::ops::kernels_enabled()
}

/// One AdamW step for one parameter, in place, in a single pass: clipping coefficient, weight
/// decay, both moments, bias correction — the same f32 arithmetic as the tensor-op path.
struct AdamWKernel {
    moments: std::sync::Mutex<(Vec<f32>, Vec<f32>)>,
    beta1: f32,
    beta2: f32,
    eps: f32,
    /// `1 − lr·wd` (1 when the parameter does not decay).
    decay: f32,
    /// `lr / (1 − β1ᵗ)` and `√(1 − β2ᵗ)`.
    step_size: f32,
    bias2_sqrt: f32,
    /// Gradient scale from clipping (1: none).
    coef: f32,
}

impl candle_core::InplaceOp2 for AdamWKernel {
    fn name(&self) -> &'static str {
        "bertpipe-adamw"
    }

    fn cpu_fwd(
        &self,
        s1: &mut candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        use rayon::prelude::*;
        let (Some((a1, b1)), Some((a2, b2))) = (l1.contiguous_offsets(), l2.contiguous_offsets()) else {
            candle_core::bail!("adamw: parameter or gradient not contiguous");
        };
        let candle_core::CpuStorage::F32(p) = s1 else { candle_core::bail!("adamw: parameter not f32") };
        let p = &mut p[a1..b1];
        let g = &s2.as_slice::<f32>()?[a2..b2];
        let mut guard = self.moments.lock().expect("moments lock");
        let (m, v) = &mut *guard;
        let (b1c, b2c) = (1.0 - self.beta1, 1.0 - self.beta2);
        const CHUNK: usize = 1 << 14;
        p.par_chunks_mut(CHUNK)
            .zip(g.par_chunks(CHUNK))
            .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
            .for_each(|((p, g), (m, v))| {
                for i in 0..p.len() {
                    let gi = if self.coef < 1.0 { g[i] * self.coef } else { g[i] };
                    let pi = if self.decay != 1.0 { p[i] * self.decay } else { p[i] };
                    m[i] = m[i] * self.beta1 + gi * b1c;
                    v[i] = v[i] * self.beta2 + gi * gi * b2c;
                    let denom = v[i].sqrt() / self.bias2_sqrt + self.eps;
                    p[i] = pi - (m[i] / denom) * self.step_size;
                }
            });
        Ok(())
    }
}

impl AdamW {
    pub fn new(params: &Params, beta1: f64, beta2: f64, eps: f64, weight_decay: f64) -> Result<AdamW> {
        AdamW::build(params, beta1, beta2, eps, weight_decay, true)
    }

    /// The tensor-op update everywhere (what other devices run), for comparisons.
    pub fn new_tensor_ops(params: &Params, beta1: f64, beta2: f64, eps: f64, weight_decay: f64) -> Result<AdamW> {
        AdamW::build(params, beta1, beta2, eps, weight_decay, false)
    }

    fn build(params: &Params, beta1: f64, beta2: f64, eps: f64, weight_decay: f64, fused: bool) -> Result<AdamW> {
        let moments = params
            .vars
            .iter()
            .map(|(_, var)| {
                let t = var.as_tensor();
                Ok(if fused && in_place(t) {
                    Moments::Host { m: vec![0.0; t.elem_count()], v: vec![0.0; t.elem_count()] }
                } else {
                    Moments::Device { m: t.zeros_like()?, v: t.zeros_like()? }
                })
            })
            .collect::<Result<_>>()?;
        Ok(AdamW { beta1, beta2, eps, weight_decay, step: 0, moments })
    }

    /// One update with gradients `grads[i]` for `params.vars[i]`, scaled by `coef` (the
    /// clipping coefficient from [`clip_coefficient`]; 1 for none).
    pub fn step(&mut self, params: &Params, grads: &[Tensor], lr: f64, coef: f64) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let bias1 = 1.0 - self.beta1.powi(t);
        let bias2_sqrt = (1.0 - self.beta2.powi(t)).sqrt();
        for (i, (name, var)) in params.vars.iter().enumerate() {
            let decays = decays(name) && self.weight_decay > 0.0;
            match &mut self.moments[i] {
                Moments::Host { m, v } => {
                    let kernel = AdamWKernel {
                        moments: std::sync::Mutex::new((std::mem::take(m), std::mem::take(v))),
                        beta1: self.beta1 as f32,
                        beta2: self.beta2 as f32,
                        eps: self.eps as f32,
                        decay: if decays { (1.0 - lr * self.weight_decay) as f32 } else { 1.0 },
                        step_size: (lr / bias1) as f32,
                        bias2_sqrt: bias2_sqrt as f32,
                        coef: coef as f32,
                    };
                    let g = grads[i].contiguous()?;
                    var.as_tensor().inplace_op2(&g, &kernel)?;
                    (*m, *v) = kernel.moments.into_inner().expect("moments lock");
                }
                Moments::Device { m, v } => {
                    let g = if coef < 1.0 { (&grads[i] * coef)? } else { grads[i].clone() };
                    let p = var.as_tensor();
                    let p = if decays { (p * (1.0 - lr * self.weight_decay))? } else { p.clone() };
                    let new_m = ((&*m * self.beta1)? + (&g * (1.0 - self.beta1))?)?;
                    let new_v = ((&*v * self.beta2)? + (g.sqr()? * (1.0 - self.beta2))?)?;
                    let denom = ((new_v.sqrt()? / bias2_sqrt)? + self.eps)?;
                    let p = (p - (new_m.div(&denom)? * (lr / bias1))?)?;
                    var.set(&p)?;
                    (*m, *v) = (new_m, new_v);
                }
            }
        }
        Ok(())
    }

    /// Moments for `optimizer.safetensors`.
    pub fn state_tensors(&self, params: &Params) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (i, (name, var)) in params.vars.iter().enumerate() {
            let (m, v) = match &self.moments[i] {
                Moments::Device { m, v } => (m.clone(), v.clone()),
                Moments::Host { m, v } => {
                    let shape = var.as_tensor().shape();
                    let host = |x: &Vec<f32>| {
                        Tensor::from_slice(x, shape, &candle_core::Device::Cpu).expect("moment matches its parameter")
                    };
                    (host(m), host(v))
                }
            };
            out.push((format!("exp_avg.{name}"), m));
            out.push((format!("exp_avg_sq.{name}"), v));
        }
        out
    }

    /// Restores moments saved by [`AdamW::state_tensors`].
    pub fn load_state(&mut self, params: &Params, saved: &BTreeMap<String, Tensor>, step: u64) -> Result<()> {
        for (i, (name, var)) in params.vars.iter().enumerate() {
            let get = |key: String| -> Result<Tensor> {
                let t = saved.get(&key).with_context(|| format!("optimizer state has no `{key}`"))?;
                if t.elem_count() != var.elem_count() {
                    anyhow::bail!(
                        "optimizer state `{key}` has {} values, the parameter {}",
                        t.elem_count(),
                        var.elem_count()
                    );
                }
                Ok(t.to_dtype(DType::F32)?.to_device(var.device())?)
            };
            let (m, v) = (get(format!("exp_avg.{name}"))?, get(format!("exp_avg_sq.{name}"))?);
            self.moments[i] = match &self.moments[i] {
                Moments::Host { .. } => {
                    Moments::Host { m: m.flatten_all()?.to_vec1::<f32>()?, v: v.flatten_all()?.to_vec1::<f32>()? }
                }
                Moments::Device { .. } => Moments::Device { m, v },
            };
        }
        self.step = step;
        Ok(())
    }
}

/// The global L2 norm of `grads` (read in place for CPU f32 tensors) and the coefficient that
/// clips it to `max_norm` (0: no clipping), as `torch.nn.utils.clip_grad_norm_` computes it:
/// `min(1, max_norm / (norm + 1e-6))`.
pub fn clip_coefficient(grads: &[Tensor], max_norm: f64) -> Result<(f64, f64)> {
    let mut sum_sq = 0f64;
    for g in grads {
        sum_sq += match host_sum_sq(g) {
            Some(s) => s,
            None => g.sqr()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?,
        };
    }
    let norm = sum_sq.sqrt();
    let coef = if max_norm > 0.0 { (max_norm / (norm + 1e-6)).min(1.0) } else { 1.0 };
    Ok((norm, coef))
}

/// Σ g² of a gradient the in-place kernel handles, read where it lies: fixed blocks summed in
/// parallel, then in block order, so the result does not depend on the thread count.
fn host_sum_sq(g: &Tensor) -> Option<f64> {
    use rayon::prelude::*;
    if !in_place(g) {
        return None;
    }
    let (storage, layout) = g.storage_and_layout();
    let (candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)), Some((a, b))) =
        (&*storage, layout.contiguous_offsets())
    else {
        return None;
    };
    let blocks: Vec<f64> =
        v[a..b].par_chunks(1 << 15).map(|c| c.iter().map(|&x| (x as f64) * (x as f64)).sum::<f64>()).collect();
    Some(blocks.iter().sum())
}

/// The learning rate for optimiser step `step` (0-based), as HF's schedulers compute it:
/// linear warmup from 0, then linear decay to 0, half a cosine, or constant.
pub fn learning_rate(schedule: Schedule, base: f64, step: u64, warmup: u64, total: u64) -> f64 {
    if step < warmup {
        return base * step as f64 / warmup.max(1) as f64;
    }
    let progress = (step - warmup) as f64 / (total.saturating_sub(warmup)).max(1) as f64;
    match schedule {
        Schedule::Constant => base,
        Schedule::Linear => base * (1.0 - progress).max(0.0),
        Schedule::Cosine => base * (0.5 * (1.0 + (std::f64::consts::PI * progress).cos())).max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_match_hf() {
        // get_linear_schedule_with_warmup(warmup 2, total 10) at steps 0..: 0, .5, 1, 7/8, …
        let lr = |s| learning_rate(Schedule::Linear, 1.0, s, 2, 10);
        assert_eq!((lr(0), lr(1), lr(2), lr(3), lr(10)), (0.0, 0.5, 1.0, 0.875, 0.0));
        let cos = |s| learning_rate(Schedule::Cosine, 1.0, s, 0, 10);
        assert!((cos(5) - 0.5).abs() < 1e-12 && cos(0) == 1.0);
        assert_eq!(learning_rate(Schedule::Constant, 0.1, 7, 2, 10), 0.1);
    }

    #[test]
    fn no_decay_for_biases_and_layer_norm() {
        assert!(decays("bert.encoder.layer.0.attention.self.query.weight"));
        assert!(!decays("bert.encoder.layer.0.attention.self.query.bias"));
        assert!(!decays("bert.embeddings.LayerNorm.weight"));
        assert!(!decays("cls.predictions.bias"));
        assert!(!decays("lm_head.layer_norm.weight") && !decays("lm_head.bias"));
        for norm in [
            "model.embeddings.norm",
            "model.layers.1.attn_norm",
            "model.layers.0.mlp_norm",
            "model.final_norm",
            "head.norm",
        ] {
            assert!(!decays(&format!("{norm}.weight")), "{norm}");
        }
        assert!(decays("model.layers.0.attn.Wqkv.weight") && decays("model.embeddings.tok_embeddings.weight"));
        assert!(decays("roberta.encoder.layer.0.output.dense.weight"));
    }
}
