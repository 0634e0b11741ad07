//! `bertpipe train --dry-run`: everything a run would check (shards, vocabulary, model, output
//! folder) is checked, the plan printed, and nothing trained or written to `output_dir`; with
//! `--show-batches EPOCH:FROM..TO` the rows of those batches too, drawn exactly as training
//! draws them, to see the order or replay the batches around a loss spike.

use std::fmt::Write as _;

use anyhow::{bail, Result};

use super::config::{ComputeDtype, EvalStrategy, TrainConfig};
use super::data::{LoaderSpec, Order};
use super::{BatchRange, TrainOptions, Trainer};
use crate::contract::progress::human_bytes;

/// The plan of a run, and the rows of `opts.show_batches` when asked for.
pub fn dry_run(cfg: &TrainConfig, opts: &TrainOptions) -> Result<String> {
    let t = Trainer::new(cfg, &TrainOptions { dry_run: true, ..opts.clone() })?;
    let mut out = t.plan();
    if let Some(range) = opts.show_batches {
        out.push('\n');
        out.push_str(&t.show_batches(range)?);
    }
    Ok(out)
}

impl Trainer {
    fn plan(&self) -> String {
        let cfg = &self.cfg;
        let mut s = String::new();
        let mut line = |key: &str, text: String| {
            let _ = writeln!(s, "{key:<12}{text}");
        };
        let train = &self.train;
        let rows = match &train.order {
            Order::Permuted(store) => store.rows(),
            Order::InFileOrder => 0,
        };
        let shards = train.shards.manifest.splits[&train.split].shards.len();
        line("data", format!("'{}', split `{}`: {rows} rows in {shards} shard(s)", cfg.data.display(), train.split));
        if let Some(e) = &self.eval {
            let n: u64 = e.shards.shard_rows(&e.split).map(|r| r.iter().sum()).unwrap_or(0);
            line("eval", format!("split `{}`: {n} rows, {}", e.split, self.eval_when()));
        } else {
            line("eval", "none".into());
        }
        let tok = train.shards.tokenizer().ok();
        line(
            "vocabulary",
            tok.map(|t| {
                format!("{} tokens (sha256 {}…)", t.vocab_size, &t.vocab_sha256[..12.min(t.vocab_sha256.len())])
            })
            .unwrap_or_default(),
        );
        let c = &self.model.config;
        let params: usize = self.model.params.vars.iter().map(|(_, v)| v.elem_count()).sum();
        let origin = match (&cfg.model.preset, &cfg.model.config, &cfg.model.init_from) {
            (Some(p), _, _) => format!("fresh, preset `{p}`"),
            (_, Some(p), _) => format!("fresh, from '{}'", p.display()),
            (_, _, Some(d)) => format!("from '{}'", d.display()),
            _ => String::new(),
        };
        line(
            "model",
            format!(
                "{}, {} layers, hidden {}, {} heads, {:.1}M parameters ({origin})",
                self.model.kind.architecture(),
                c.num_hidden_layers,
                c.hidden_size,
                c.num_attention_heads,
                params as f64 / 1e6
            ),
        );
        let dtype = match cfg.dtype {
            ComputeDtype::F32 => "f32",
            ComputeDtype::Bf16 => "bf16 matrix products, f32 weights",
        };
        line("device", format!("{}, {dtype}", super::device::describe(&self.device)));
        if let Order::Permuted(store) = &train.order {
            line(
                "order",
                format!(
                    "each epoch a permutation of all {rows} rows (seed {}), read from the row store '{}' ({})",
                    cfg.seed,
                    store.dir().display(),
                    human_bytes(store.bytes())
                ),
            );
        }
        let window = train.window_rows();
        line(
            "batches",
            format!(
                "{} rows, {} per epoch{}; {}{}",
                train.batch_size,
                self.batches_per_epoch,
                if cfg.gradient_accumulation_steps > 1 {
                    format!(", {} summed per optimiser step", cfg.gradient_accumulation_steps)
                } else {
                    String::new()
                },
                if train.group_by_length {
                    format!("rows grouped by length within windows of {window} (the rows held in memory)")
                } else {
                    "one batch's rows held in memory".into()
                },
                train.pad_to.map(|p| format!(", padded to {p}")).unwrap_or_default()
            ),
        );
        let steps_per_epoch = self.batches_per_epoch.div_ceil(cfg.gradient_accumulation_steps as u64);
        line(
            "schedule",
            format!(
                "{} optimiser steps ({:.2} epochs of {steps_per_epoch}); {:?}, warmup {} steps, peak learning rate {:e}",
                self.total_steps,
                self.total_steps as f64 / steps_per_epoch.max(1) as f64,
                cfg.lr_scheduler_type,
                self.warmup_steps,
                cfg.learning_rate
            )
            .to_lowercase(),
        );
        if self.state.global_step > 0 {
            line(
                "resume",
                format!(
                    "at step {} (epoch {}, batch {})",
                    self.state.global_step, self.state.epoch_index, self.state.batch_in_epoch
                ),
            );
        }
        let (weights, activations, seq) = self.memory_estimate(params);
        line(
            "memory",
            format!(
                "≈ {} on the device: weights, gradients and AdamW moments {}, activations ≈ {} at {} × {seq} tokens (rough)",
                human_bytes(weights + activations),
                human_bytes(weights),
                human_bytes(activations),
                train.batch_size
            ),
        );
        line("output", format!("'{}'", cfg.output_dir.display()));
        for n in &self.notes {
            line("note", n.clone());
        }
        s.push_str("nothing was trained (--dry-run)\n");
        s
    }

    /// When evaluation runs, in words.
    fn eval_when(&self) -> String {
        match self.cfg.eval_strategy() {
            EvalStrategy::Epoch => "at each epoch's end".into(),
            EvalStrategy::Steps => format!("every {} steps", self.cfg.eval_steps.unwrap_or(0)),
            EvalStrategy::No => "never".into(),
        }
    }

    /// Bytes of f32 weights + gradients + two AdamW moments, of activations kept for the
    /// backward pass (per layer about `b·s·(34h + 5·a·s)` halves, as Korthikanti et al. count
    /// them, doubled for f32), and the sequence length assumed (the shards' longest row).
    fn memory_estimate(&self, params: usize) -> (u64, u64, usize) {
        let c = &self.model.config;
        let seq = self.train.pad_to.unwrap_or_else(|| self.train.shards.manifest.longest_row());
        let (b, s, h, a) =
            (self.train.batch_size as u64, seq as u64, c.hidden_size as u64, c.num_attention_heads as u64);
        let per_layer = b * s * (34 * h + 5 * a * s) * 2;
        (params as u64 * 16, per_layer * c.num_hidden_layers as u64, seq)
    }

    /// One tab-separated line per row of the asked batches: epoch, batch, the optimiser step
    /// it feeds, the row's position in its split, its id, label and length.
    fn show_batches(&self, r: BatchRange) -> Result<String> {
        let spec: &LoaderSpec = &self.train;
        if r.from >= self.batches_per_epoch {
            bail!("--show-batches: an epoch has {} batches (0..{})", self.batches_per_epoch, self.batches_per_epoch);
        }
        let accum = self.cfg.gradient_accumulation_steps as u64;
        let steps_per_epoch = self.batches_per_epoch.div_ceil(accum);
        let mut s = String::from("epoch\tbatch\tstep\trow\tid\tlabel\ttokens\n");
        let to = r.to.min(self.batches_per_epoch);
        for (k, batch) in spec.epoch_from(r.epoch, r.from)?.take((to - r.from) as usize).enumerate() {
            let batch = batch?;
            let b = r.from + k as u64;
            let step = r.epoch * steps_per_epoch + b / accum + 1;
            for i in 0..batch.rows {
                let tokens =
                    batch.attention_mask[i * batch.seq..(i + 1) * batch.seq].iter().filter(|&&m| m == 1).count();
                let id = batch.ids.get(i).filter(|x| !x.is_empty()).map_or("-", String::as_str);
                let label = batch.labels.get(i).map_or("-".to_string(), |l| l.to_string());
                let _ = writeln!(s, "{}\t{b}\t{step}\t{}\t{id}\t{label}\t{tokens}", r.epoch, batch.indices[i]);
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::BatchRange;

    #[test]
    fn batch_ranges_parse_half_open_or_inclusive() {
        assert_eq!("0:10..20".parse(), Ok(BatchRange { epoch: 0, from: 10, to: 20 }));
        assert_eq!("2:5..=5".parse(), Ok(BatchRange { epoch: 2, from: 5, to: 6 }));
        for bad in ["10..20", "0:10", "0:a..b", "1:5..5"] {
            assert!(bad.parse::<BatchRange>().is_err(), "{bad}");
        }
    }
}
