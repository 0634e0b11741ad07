//! `bertpipe train --dry-run`: everything a run would check (shards, vocabulary, model, output
//! folder) is checked, the plan printed, and nothing trained or written to `output_dir`; with
//! `--show-batches EPOCH:FROM..TO` the rows of those batches too, drawn exactly as training
//! draws them, to see the order or replay the batches around a loss spike.

use std::fmt::Write as _;

use anyhow::{bail, Result};

use super::config::{ComputeDtype, EvalStrategy, TrainConfig};
use super::data::{LoaderSpec, Order, RowKind};
use super::memory;
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
                self.model.kind.architecture(self.model.config.class_prefix()),
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
        let w = &self.world;
        line("ranks", {
            let mut ranks = w.describe();
            if w.size > 1 {
                ranks.push_str(&format!(
                    "; rank 0 writes checkpoints and logs; gradients summed over MPI in {} MiB buckets",
                    (super::dist::bucket_floats() * 4) >> 20
                ));
            }
            ranks
        });
        let first_epoch = train.batches_in_epoch(0);
        line(
            "batches",
            format!(
                "global batch {} rows = {} per device × {} rank(s) × {} accumulation step(s){}, {}; {}{}",
                train.batch_size,
                cfg.per_device_train_batch_size,
                w.size,
                cfg.gradient_accumulation_steps,
                match train.max_tokens {
                    Some(t) => format!(
                        ", at most {t} tokens ({} per device){}",
                        cfg.max_tokens_per_batch.unwrap_or(t),
                        if train.packed { "" } else { " counting padding" }
                    ),
                    None => String::new(),
                },
                match train.max_tokens {
                    Some(_) =>
                        format!("{first_epoch} in epoch 0 (epochs differ: it depends on which rows share a window)"),
                    None => format!("{first_epoch} per epoch"),
                },
                if train.group_by_length {
                    format!("rows grouped by length within windows of {window} (the rows held in memory)")
                } else {
                    "one batch's rows held in memory".into()
                },
                if cfg.padding_free {
                    "; padding-free (each batch one stream of its rows' tokens, attention within each row)".to_string()
                } else {
                    train
                        .pad_to
                        .map(|p| format!(", padded to {p}"))
                        .unwrap_or_else(|| ", padded to each batch's longest row".into())
                }
            ),
        );
        if let Some(masking) = self.masking() {
            line("masking", masking);
        }
        let epochs = train.epochs_in_steps(self.total_steps);
        let steps_per_epoch = first_epoch;
        line(
            "schedule",
            format!(
                "{} optimiser steps ({epochs:.2} epochs{}); {:?}, warmup {} steps, peak learning rate {:e}",
                self.total_steps,
                if train.max_tokens.is_some() {
                    format!("; {steps_per_epoch} batches in epoch 0, the others by their rows' lengths")
                } else {
                    format!(" of {steps_per_epoch}")
                },
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
        let shape = self.memory_shape(params as u64);
        let e = memory::estimate(&shape);
        line(
            "memory",
            format!(
                "≈ {} peak RSS, evaluation and checkpoints included: weights, gradients and AdamW moments {}, activations of a training step {} at {} × {} tokens{}, an evaluation batch {} ({} rows), a checkpoint {}, the process {}",
                human_bytes(e.peak),
                human_bytes(e.model_state),
                human_bytes(e.step),
                shape.batch,
                shape.seq,
                if shape.checkpointing { " (gradient checkpointing)" } else { "" },
                human_bytes(e.eval),
                shape.eval_rows,
                human_bytes(e.save),
                human_bytes(e.process),
            ),
        );
        if let Some(warning) = self.memory_warning(&shape, &e) {
            line("warning", warning);
        }
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

    /// Pretraining's masking: done by the trainer at the rate in use (the pipeline's, else the
    /// model family's), or done by the pipeline (the share its manifest measured).
    fn masking(&self) -> Option<String> {
        match &self.train.kind {
            RowKind::Pretrain { mask: Some(spec) } => Some(format!(
                "dynamic (each epoch anew), {:.0}% of tokens, at most {} a row{}",
                spec.masked_lm_prob * 100.0,
                spec.max_predictions_per_seq,
                if spec.whole_word_mask { ", whole words" } else { "" }
            )),
            RowKind::Pretrain { mask: None } => {
                let split = self.train.shards.manifest.splits.get(&self.train.split);
                let share = split.and_then(|s| s.pretraining.as_ref()).map(|p| p.masked_fraction).unwrap_or(0.0);
                Some(format!("static (by the pipeline), {:.1}% of tokens masked", share * 100.0))
            }
            RowKind::Classify { .. } => None,
        }
    }

    /// What [`memory::estimate`] needs: the model, the longest batch (padded to `max_len`
    /// or the shards' longest row), the evaluation batches, the masked positions.
    fn memory_shape(&self, params: u64) -> memory::Shape {
        let manifest = &self.train.shards.manifest;
        let seq = self.train.pad_to.unwrap_or_else(|| manifest.longest_row()) as u64;
        let eval = self.eval.as_ref().map(|e| (e.batch_size as u64, e.max_tokens.unwrap_or(usize::MAX) as u64));
        // A step's activations are a micro-batch's: `per_device_train_batch_size` rows, or under
        // a token budget as many rows of the longest length as the budget holds.
        let mut micro = self.cfg.per_device_train_batch_size as u64;
        if let Some(budget) = self.cfg.max_tokens_per_batch {
            micro = micro.min((budget as u64 / seq.max(1)).max(1));
        }
        let mut shape = memory::Shape::new(&self.model.config, params, micro, seq, eval);
        shape.checkpointing = self.cfg.gradient_checkpointing;
        if self.cfg.task == super::config::Objective::Pretrain {
            let split = manifest.splits.get(&self.train.split);
            let dynamic = match &self.train.kind {
                RowKind::Pretrain { mask: Some(spec) } => Some(spec.masked_lm_prob),
                _ => None,
            };
            let share = dynamic
                .or_else(|| split.and_then(|s| s.pretraining.as_ref()).map(|p| p.masked_fraction))
                .filter(|&f| f > 0.0)
                .unwrap_or(0.15);
            shape.mlm_positions = (share * (shape.batch * seq) as f64).ceil() as u64;
        }
        shape
    }

    /// When the estimate is more than this machine's available memory: by how much, and the
    /// settings that bring it under (each alone, estimated the same way).
    fn memory_warning(&self, shape: &memory::Shape, e: &memory::Estimate) -> Option<String> {
        if !self.device.is_cpu() {
            return None; // device memory is not read here; the estimate is of the same tensors
        }
        let available = memory::available_bytes()?;
        if e.peak <= available {
            return None;
        }
        let fits = |s: &memory::Shape| memory::estimate(s).peak <= available;
        let mut knobs = Vec::new();
        if !shape.checkpointing {
            let s = memory::Shape { checkpointing: true, ..shape.clone() };
            let with = memory::estimate(&s).peak;
            knobs.push(format!(
                "gradient_checkpointing: true (≈ {}{})",
                human_bytes(with),
                if fits(&s) { "" } else { ", not enough alone" }
            ));
        }
        // A divisor of the batch, so the accumulated steps see exactly the rows they did.
        let mut smaller = (1..shape.batch).rev().filter(|b| shape.batch % b == 0);
        if let Some(batch) = smaller.find(|&batch| fits(&memory::Shape { batch, ..shape.clone() })) {
            let accum = self.cfg.gradient_accumulation_steps as u64;
            knobs.push(format!(
                "per_device_train_batch_size: {batch} with gradient_accumulation_steps: {} (the same {} rows per optimiser step)",
                accum * shape.batch / batch,
                shape.batch * accum
            ));
        }
        if let Some(len) =
            [384, 256, 128, 64].into_iter().find(|&l| l < shape.seq && fits(&memory::Shape { seq: l, ..shape.clone() }))
        {
            knobs.push(format!("max_len: {len} in the pipeline (rows cut or windowed there)"));
        }
        Some(format!(
            "the estimate ({}) is more than this machine's available memory ({}); {}",
            human_bytes(e.peak),
            human_bytes(available),
            if knobs.is_empty() {
                "no single setting brings it under: a smaller model, or a machine with more memory".to_string()
            } else {
                format!("any of these brings it under: {}", knobs.join("; "))
            }
        ))
    }

    /// One tab-separated line per row of the asked batches (a batch is an optimiser step's
    /// global batch): epoch, batch, the optimiser step it feeds, the row's position in its
    /// split, its id, label and length, a pretraining row's masked positions — and with more
    /// than one rank, the rank that trains it.
    fn show_batches(&self, r: BatchRange) -> Result<String> {
        let spec: &LoaderSpec = &self.train;
        let in_epoch = spec.batches_in_epoch(r.epoch);
        if r.from >= in_epoch {
            bail!("--show-batches: epoch {} has {in_epoch} batches (0..{in_epoch})", r.epoch);
        }
        let before: u64 = (0..r.epoch).map(|e| spec.batches_in_epoch(e)).sum();
        let ranks = self.world.size;
        // Pretraining rows: the positions masked in the row (the trainer's masks, dynamic or
        // the pipeline's), so another loader's masks can be held to them.
        let masked = matches!(spec.kind, RowKind::Pretrain { .. });
        let mut s = String::from("epoch\tbatch\tstep\trow\tid\tlabel\ttokens");
        s.push_str(if masked { "\tmasked" } else { "" });
        s.push_str(if ranks > 1 { "\trank\n" } else { "\n" });
        let to = r.to.min(in_epoch);
        for (k, batch) in spec.epoch_from(r.epoch, r.from)?.take((to - r.from) as usize).enumerate() {
            let batch = batch?;
            let b = r.from + k as u64;
            let step = before + b + 1;
            let share = super::data::Share { rank: 0, ranks, micro: self.cfg.gradient_accumulation_steps };
            for i in 0..batch.rows {
                let tokens =
                    batch.attention_mask[i * batch.seq..(i + 1) * batch.seq].iter().filter(|&&m| m == 1).count();
                let id = batch.ids.get(i).filter(|x| !x.is_empty()).map_or("-", String::as_str);
                let label = batch.labels.get(i).map_or("-".to_string(), |l| l.to_string());
                let _ = write!(s, "{}\t{b}\t{step}\t{}\t{id}\t{label}\t{tokens}", r.epoch, batch.indices[i]);
                if masked {
                    let row = (i * batch.seq) as u32..((i + 1) * batch.seq) as u32;
                    let at: Vec<String> = batch
                        .mlm_positions
                        .iter()
                        .filter(|p| row.contains(p))
                        .map(|p| (p - row.start).to_string())
                        .collect();
                    let _ = write!(s, "\t{}", if at.is_empty() { "-".to_string() } else { at.join(",") });
                }
                if ranks > 1 {
                    let _ = write!(s, "\t{}", share.rank_of(i, batch.rows));
                }
                s.push('\n');
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
