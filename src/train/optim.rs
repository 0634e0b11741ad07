//! AdamW with decoupled weight decay (PyTorch's `torch.optim.AdamW` update, step for step),
//! global-norm gradient clipping (`clip_grad_norm_`), and HF's learning-rate schedules.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use candle_core::{DType, Tensor};

use super::config::Schedule;
use crate::model::params::Params;

/// Biases and LayerNorm parameters get no weight decay (the HF/BERT convention).
pub fn decays(name: &str) -> bool {
    !(name.ends_with(".bias") || name.contains("LayerNorm") || name == "cls.predictions.bias")
}

pub struct AdamW {
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    /// Optimiser steps taken (PyTorch's `state['step']`).
    pub step: u64,
    /// First and second moments, by parameter name.
    pub exp_avg: Vec<Tensor>,
    pub exp_avg_sq: Vec<Tensor>,
}

impl AdamW {
    pub fn new(params: &Params, beta1: f64, beta2: f64, eps: f64, weight_decay: f64) -> Result<AdamW> {
        let zeros = |v: &candle_core::Var| v.as_tensor().zeros_like();
        Ok(AdamW {
            beta1,
            beta2,
            eps,
            weight_decay,
            step: 0,
            exp_avg: params.vars.iter().map(|(_, v)| zeros(v)).collect::<candle_core::Result<_>>()?,
            exp_avg_sq: params.vars.iter().map(|(_, v)| zeros(v)).collect::<candle_core::Result<_>>()?,
        })
    }

    /// One update with gradients `grads[i]` for `params.vars[i]` (already clipped).
    pub fn step(&mut self, params: &Params, grads: &[Tensor], lr: f64) -> Result<()> {
        self.step += 1;
        let t = self.step as i32;
        let bias1 = 1.0 - self.beta1.powi(t);
        let bias2_sqrt = (1.0 - self.beta2.powi(t)).sqrt();
        for (i, (name, var)) in params.vars.iter().enumerate() {
            let g = &grads[i];
            let p = var.as_tensor();
            let p =
                if decays(name) && self.weight_decay > 0.0 { (p * (1.0 - lr * self.weight_decay))? } else { p.clone() };
            let m = ((&self.exp_avg[i] * self.beta1)? + (g * (1.0 - self.beta1))?)?;
            let v = ((&self.exp_avg_sq[i] * self.beta2)? + (g.sqr()? * (1.0 - self.beta2))?)?;
            let denom = ((v.sqrt()? / bias2_sqrt)? + self.eps)?;
            let p = (p - (m.div(&denom)? * (lr / bias1))?)?;
            var.set(&p)?;
            self.exp_avg[i] = m;
            self.exp_avg_sq[i] = v;
        }
        Ok(())
    }

    /// Moments for `optimizer.safetensors`.
    pub fn state_tensors(&self, params: &Params) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for (i, (name, _)) in params.vars.iter().enumerate() {
            out.push((format!("exp_avg.{name}"), self.exp_avg[i].clone()));
            out.push((format!("exp_avg_sq.{name}"), self.exp_avg_sq[i].clone()));
        }
        out
    }

    /// Restores moments saved by [`AdamW::state_tensors`].
    pub fn load_state(&mut self, params: &Params, saved: &BTreeMap<String, Tensor>, step: u64) -> Result<()> {
        for (i, (name, var)) in params.vars.iter().enumerate() {
            let get = |key: String| -> Result<Tensor> {
                let t = saved.get(&key).with_context(|| format!("optimizer state has no `{key}`"))?;
                Ok(t.to_dtype(DType::F32)?.to_device(var.device())?)
            };
            self.exp_avg[i] = get(format!("exp_avg.{name}"))?;
            self.exp_avg_sq[i] = get(format!("exp_avg_sq.{name}"))?;
        }
        self.step = step;
        Ok(())
    }
}

/// Scales gradients to a global L2 norm of at most `max_norm` (0: no clipping) exactly as
/// `torch.nn.utils.clip_grad_norm_` does: `g · min(1, max_norm / (norm + 1e-6))`. Returns the
/// gradients and the norm before clipping.
pub fn clip_grad_norm(grads: &[Tensor], max_norm: f64) -> Result<(Vec<Tensor>, f64)> {
    let mut sum_sq = 0f64;
    for g in grads {
        sum_sq += g.sqr()?.sum_all()?.to_dtype(DType::F64)?.to_scalar::<f64>()?;
    }
    let norm = sum_sq.sqrt();
    let coef = if max_norm > 0.0 { (max_norm / (norm + 1e-6)).min(1.0) } else { 1.0 };
    let out =
        if coef < 1.0 { grads.iter().map(|g| g * coef).collect::<candle_core::Result<_>>()? } else { grads.to_vec() };
    Ok((out, norm))
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
    }
}
