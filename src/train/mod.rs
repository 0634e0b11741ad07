//! `bertpipe train`: BERT fine-tuning and pretraining on our shards with candle.
//!
//! This file holds the loop (`Trainer::run`, which reads like nanoGPT's: get a batch,
//! forward, backward, clip, step, log, evaluate, checkpoint) and what it calls each step:
//! the loss, evaluation on the eval split, the metrics log, checkpoints and the loss curves.
//! Preparing a run is [`setup`]'s; the rest lives in its own module: [`config`] (the YAML),
//! [`data`] (shards → batches), [`order`] (the epoch's permutation of the whole split), [`optim`] (AdamW and schedules), [`checkpoint`] (HF folders
//! and resume state), [`device`], and [`crate::metrics`] (shared with `eval`).

pub mod checkpoint;
pub mod config;
pub mod data;
pub mod device;
pub mod dist;
pub mod memory;
pub mod optim;
pub mod order;
mod plan;
pub mod rows;
mod setup;
pub mod tensorboard;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::metrics::{ClassificationMetrics, Predictions, PretrainTally};
use crate::model::bert::{ForwardPass, Inputs};
use crate::model::{BertWithHead, Outputs};
use checkpoint::TrainerState;
use config::{AttentionKind, ComputeDtype, EvalStrategy, Objective, TrainConfig};
use data::{Batch, LoaderSpec, Share, Step, StepTotals};
use dist::World;
pub use plan::dry_run;

/// Command-line options beside the YAML.
#[derive(Debug, Clone, Default)]
pub struct TrainOptions {
    /// Continue from the newest complete checkpoint in `output_dir`.
    pub resume: bool,
    /// Replace an `output_dir` that already holds a run.
    pub overwrite: bool,
    pub quiet: bool,
    /// Overrides `device:` from the YAML.
    pub device: Option<String>,
    /// Check everything and print the plan; train nothing, write nothing in `output_dir`.
    pub dry_run: bool,
    /// With `dry_run`: the rows of these batches, as training would draw them.
    pub show_batches: Option<BatchRange>,
}

/// `EPOCH:FROM..TO`: batches `FROM` up to (not including) `TO` of epoch `EPOCH`, counted
/// from 0 as the loop counts them; `FROM..=TO` includes `TO`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRange {
    pub epoch: u64,
    pub from: u64,
    pub to: u64,
}

impl std::str::FromStr for BatchRange {
    type Err = String;
    fn from_str(s: &str) -> Result<BatchRange, String> {
        let bad = || format!("`{s}`: expected EPOCH:FROM..TO, e.g. 0:10..20 (batches 10 to 19 of epoch 0)");
        let (epoch, range) = s.split_once(':').ok_or_else(bad)?;
        let (from, to) = range.split_once("..").ok_or_else(bad)?;
        let (to, inclusive) = match to.strip_prefix('=') {
            Some(t) => (t, true),
            None => (to, false),
        };
        let num = |x: &str| x.trim().parse::<u64>().map_err(|_| bad());
        let (epoch, from, to) = (num(epoch)?, num(from)?, num(to)? + inclusive as u64);
        if to <= from {
            return Err(format!("`{s}`: the range holds no batch"));
        }
        Ok(BatchRange { epoch, from, to })
    }
}

/// What a finished (or interrupted) run reports.
#[derive(Debug, Clone)]
pub struct TrainSummary {
    pub steps: u64,
    pub epochs: f64,
    pub seconds: f64,
    pub samples: u64,
    pub tokens: u64,
    pub final_dir: Option<PathBuf>,
    pub best: Option<(String, f64, PathBuf)>,
    pub last_eval: Option<Value>,
    pub interrupted: bool,
    /// Why training stopped before its last step (early stopping).
    pub stopped_early: Option<String>,
    pub device: String,
    pub notes: Vec<String>,
}

/// Test hook: behave as if Ctrl-C came during optimiser step N (`BERTPIPE_STOP_AT_STEP=N`).
fn stop_at_step() -> Option<u64> {
    crate::contract::test_hook("BERTPIPE_STOP_AT_STEP")
}

/// Test hook: a loss that is NaN from this optimiser step on (`BERTPIPE_NAN_AT_STEP=N`).
fn nan_at_step() -> Option<u64> {
    crate::contract::test_hook("BERTPIPE_NAN_AT_STEP")
}

/// Test hook: rank R dies (SIGKILL) at the start of optimiser step N (`BERTPIPE_KILL_RANK_AT_STEP=R:N`),
/// or fails with an error (`BERTPIPE_FAIL_RANK_AT_STEP=R:N`).
fn rank_fault(var: &str, rank: usize, step: u64) -> bool {
    let Ok(v) = std::env::var(var) else { return false };
    let Some((r, s)) = v.split_once(':') else { return false };
    r.trim().parse() == Ok(rank) && s.trim().parse() == Ok(step)
}

pub fn run(cfg: &TrainConfig, opts: &TrainOptions) -> Result<TrainSummary> {
    // Every training op allocates tensors of the same few sizes; glibc (the wheel's allocator)
    // would serve the large ones with fresh `mmap`s, whose faults cost more than the math.
    crate::contract::keep_freed_memory();
    // Ctrl-C / SIGTERM while training: checkpoint and stop at the next optimiser step. The
    // flag is the process's (one handler for every stage of a chain); a stop handled here is
    // cleared, so later work starts afresh.
    let _graceful = crate::contract::interrupt::graceful();
    let mut t = Trainer::new(cfg, opts)?;
    let summary = t.run();
    crate::contract::interrupt::clear();
    summary
}

/// Everything the loop needs, prepared by [`setup`].
pub struct Trainer {
    cfg: TrainConfig,
    opts: TrainOptions,
    device: Device,
    model: BertWithHead,
    optimizer: optim::AdamW,
    train: LoaderSpec,
    eval: Option<LoaderSpec>,
    label_names: Vec<String>,
    /// Files copied into every checkpoint (vocab.txt, tokenizer_config.json).
    extra_files: Vec<(String, Vec<u8>)>,
    state: TrainerState,
    /// Batches in the current epoch (they differ by epoch under a token budget).
    batches_in_epoch: u64,
    total_steps: u64,
    warmup_steps: u64,
    /// `None` in a dry run, which writes nothing.
    metrics_log: Option<std::fs::File>,
    /// `report_to: tensorboard` (never in a dry run).
    tensorboard: Option<tensorboard::EventWriter>,
    /// Classification: the loss weight of each class (`class_weights`).
    class_weights: Option<Vec<f32>>,
    notes: Vec<String>,
    /// This process's rank among the data-parallel ranks (one, without a launcher).
    world: World,
}

impl Trainer {
    /// The loop: get a step's global batch (this rank's micro-batches of it), forward +
    /// backward each, sum the gradients over the micro-batches and the ranks, then an optimiser
    /// step, the same on every rank; then log, evaluate, checkpoint.
    fn run(&mut self) -> Result<TrainSummary> {
        let started = Instant::now();
        let bar = self.progress();
        let share = self.share();
        let mut tally = RunTally::default();
        'epochs: while self.state.global_step < self.total_steps {
            let epoch = self.state.epoch_index;
            self.batches_in_epoch = self.train.batches_in_epoch(epoch);
            let mut consumed = self.state.batch_in_epoch;
            for step in self.train.spawn_steps(epoch, consumed, share) {
                let step = step?;
                consumed += 1;
                let n = self.state.global_step + 1;
                if rank_fault("BERTPIPE_KILL_RANK_AT_STEP", self.world.rank, n) {
                    // SAFETY: raising a signal in our own process.
                    unsafe { libc::raise(libc::SIGKILL) };
                }
                if rank_fault("BERTPIPE_FAIL_RANK_AT_STEP", self.world.rank, n) {
                    bail!("failing at step {n} (BERTPIPE_FAIL_RANK_AT_STEP)");
                }
                let (loss, grads) = self.step_gradients(&step)?;
                let stop_here = crate::contract::interrupt::requested() || stop_at_step() == Some(n);
                let reduce_started = Instant::now();
                // Summed over the ranks: the global loss, and whether any rank was asked to stop.
                let mut scalars = [loss, stop_here as u8 as f64];
                dist::sum_f64(&self.world, &mut scalars)?;
                let grads = self.sum_over_ranks(grads)?;
                tally.window.comm_seconds += reduce_started.elapsed().as_secs_f64();
                let loss = self.check_finite(scalars[0])?;
                tally.add(loss, &step.global, self.cfg.padding_free);
                let lr = self.optimizer_step(&grads, &mut tally)?;
                let epoch_done = consumed == self.batches_in_epoch;
                self.state.batch_in_epoch = consumed;
                if epoch_done {
                    self.state.epoch_index += 1;
                    self.state.batch_in_epoch = 0;
                }
                if self.after_step(epoch_done, lr, scalars[1] > 0.0, &bar, &mut tally)? == Flow::Stop {
                    break 'epochs;
                }
            }
            if self.state.epoch_index == epoch {
                bail!(
                    "epoch {epoch} ended after {consumed} batches, {} were expected: did the shards change during training?",
                    self.batches_in_epoch
                );
            }
        }
        bar.bar.finish_and_clear();
        self.finish(started, tally)
    }

    /// How a global batch is shared: this rank's part, cut into `gradient_accumulation_steps`
    /// micro-batches.
    fn share(&self) -> Share {
        Share { rank: self.world.rank, ranks: self.world.size, micro: self.cfg.gradient_accumulation_steps }
    }

    /// This rank's share of a step: its loss (this rank's part of the global batch's loss) and
    /// the gradients of it, summed over its micro-batches (zeros when it has no rows).
    fn step_gradients(&self, step: &Step) -> Result<(f64, Vec<Tensor>)> {
        let mut summed: Option<Vec<Tensor>> = None;
        let mut loss = 0.0;
        for batch in &step.micro {
            let (l, grads) = self.forward_backward(batch, &step.global)?;
            loss += l;
            summed = Some(match summed.take() {
                None => grads,
                Some(sum) => sum.iter().zip(&grads).map(|(a, b)| a + b).collect::<candle_core::Result<_>>()?,
            });
        }
        let grads = match summed {
            Some(g) => g,
            None => self
                .model
                .params
                .vars
                .iter()
                .map(|(_, v)| v.as_tensor().zeros_like())
                .collect::<candle_core::Result<_>>()?,
        };
        Ok((loss, grads))
    }

    /// The gradients summed over every rank, in buckets of [`dist::bucket_floats`] (PyTorch
    /// DDP's 25 MiB): one all-reduce per bucket, not per tensor. One rank: as they are.
    fn sum_over_ranks(&self, grads: Vec<Tensor>) -> Result<Vec<Tensor>> {
        if self.world.size == 1 {
            return Ok(grads);
        }
        let cap = dist::bucket_floats();
        let mut out = Vec::with_capacity(grads.len());
        let mut i = 0;
        while i < grads.len() {
            let (mut j, mut n) = (i, 0);
            while j < grads.len() && (j == i || n + grads[j].elem_count() <= cap) {
                n += grads[j].elem_count();
                j += 1;
            }
            let mut bucket = Vec::with_capacity(n);
            for g in &grads[i..j] {
                bucket.extend(g.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()?);
            }
            dist::sum_f32(&self.world, &mut bucket)?;
            let mut at = 0;
            for g in &grads[i..j] {
                let k = g.elem_count();
                out.push(Tensor::from_slice(&bucket[at..at + k], g.shape(), g.device())?);
                at += k;
            }
            i = j;
        }
        Ok(out)
    }

    /// Forward and backward of one micro-batch: its part of the step's loss (its sum over the
    /// global batch's denominators, see [`StepTotals`]), and the gradients of that.
    fn forward_backward(&self, batch: &Batch, global: &StepTotals) -> Result<(f64, Vec<Tensor>)> {
        let step = self.state.global_step + 1;
        // Dropout keyed by the step and each row's place in the split: the same masks on any
        // number of ranks and micro-batches.
        let mut pass = ForwardPass::train(self.cfg.seed, self.state.global_step, batch.indices.clone())
            .with_compute(self.cfg.dtype.dtype());
        let (value, grads) = if self.cfg.gradient_checkpointing {
            let (inputs, positions) = self.runner().inputs(batch)?;
            let mut value = 0.0;
            let grads = self.model.backward_checkpointed(&inputs, positions.as_ref(), &mut pass, |out| {
                let loss = self.batch_loss(batch, out, global)?;
                memory::trace(step, "after forward");
                value = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
                Ok(loss)
            })?;
            (value, grads)
        } else {
            let out = self.runner().forward(batch, &mut pass)?;
            let loss = self.batch_loss(batch, &out, global)?;
            memory::trace(step, "after forward");
            let value = loss.to_dtype(DType::F64)?.to_scalar::<f64>()?;
            (value, crate::model::backward(&loss)?)
        };
        memory::trace(step, "after backward");
        Ok((value, self.model.gradients(&grads)?))
    }

    /// Clips the summed gradients and steps AdamW at the scheduled rate; returns the rate.
    fn optimizer_step(&mut self, grads: &[Tensor], tally: &mut RunTally) -> Result<f64> {
        let lr = optim::learning_rate(
            self.cfg.lr_scheduler_type,
            self.cfg.learning_rate,
            self.state.global_step,
            self.warmup_steps,
            self.total_steps,
        );
        let (grad_norm, coef) = optim::clip_coefficient(grads, self.cfg.max_grad_norm)?;
        self.optimizer.step(&self.model.params, grads, lr, coef)?;
        self.state.global_step += 1;
        memory::trace(self.state.global_step, "after optimiser");
        tally.window.grad_norm = grad_norm;
        Ok(lr)
    }

    /// What follows an optimiser step: progress, the log line, evaluation and checkpoints when
    /// due, and whether to stop (the last step, or Ctrl-C on any rank: `stop`).
    fn after_step(
        &mut self,
        epoch_done: bool,
        lr: f64,
        stop: bool,
        bar: &StepProgress,
        tally: &mut RunTally,
    ) -> Result<Flow> {
        let step = self.state.global_step;
        let last = step == self.total_steps;
        bar.bar.set_position(step);
        bar.bar.set_message(tally.window.status(lr));
        if step % self.cfg.logging_steps == 0 || last {
            let mut line = tally.window.take(step, self.epoch_progress(), lr);
            if self.world.size > 1 {
                line["ranks"] = json!(self.world.size);
            }
            bar.step_line(step, &line);
            self.log(line)?;
        }
        let eval_now = match self.cfg.eval_strategy() {
            EvalStrategy::Epoch => epoch_done || last,
            EvalStrategy::Steps => self.cfg.eval_steps.is_some_and(|n| step % n == 0) || last,
            EvalStrategy::No => false,
        };
        if eval_now && self.eval.is_some() {
            let eval_started = Instant::now();
            let metrics = self.evaluate(&bar.bar)?;
            memory::trace(step, "after evaluation");
            bar.eval_line(step, &metrics, &self.cfg.best_metric().0, eval_started.elapsed());
            self.log(metrics.clone())?;
            let improved = self.track_best(&metrics)?;
            tally.last_eval = Some(metrics);
            if let Some(patience) = self.cfg.early_stopping_patience {
                self.state.evals_without_improvement =
                    if improved { 0 } else { self.state.evals_without_improvement + 1 };
                if self.state.evals_without_improvement >= patience && !last {
                    let (metric, _) = self.cfg.best_metric();
                    tally.stopped_early = Some(format!(
                        "stopped early at step {step} of {}: eval {metric} did not improve by more than {} in {patience} evaluation(s)",
                        self.total_steps, self.cfg.early_stopping_threshold
                    ));
                }
            }
        }
        let save_now = self.cfg.save_steps.is_some_and(|n| step % n == 0) || epoch_done || last;
        let early = tally.stopped_early.is_some();
        if save_now || stop || early {
            self.save_checkpoint()?;
            memory::trace(step, "after checkpoint");
        }
        tally.interrupted = stop;
        Ok(if stop || early || step >= self.total_steps { Flow::Stop } else { Flow::Go })
    }

    /// After the loop: the final model (unless interrupted), the curves, the summary.
    fn finish(&mut self, started: Instant, tally: RunTally) -> Result<TrainSummary> {
        let final_dir = if tally.interrupted {
            None
        } else {
            let dir = self.cfg.output_dir.join("final");
            if self.world.is_main() {
                checkpoint::write_atomic(&dir, |tmp| self.write_model(tmp))?;
            }
            Some(dir)
        };
        if self.world.is_main() {
            self.plot_curves()?;
        }
        // The other ranks end when the files are there (a launcher may end the job then).
        dist::barrier(&self.world);
        Ok(TrainSummary {
            steps: self.state.global_step,
            epochs: self.epoch_progress(),
            seconds: started.elapsed().as_secs_f64(),
            samples: tally.samples,
            tokens: tally.tokens,
            final_dir,
            best: self.state.best.as_ref().map(|b| (b.metric.clone(), b.value, self.cfg.output_dir.join("best"))),
            last_eval: tally.last_eval,
            interrupted: tally.interrupted,
            stopped_early: tally.stopped_early,
            device: {
                let mut d = match self.cfg.dtype {
                    ComputeDtype::F32 => device::describe(&self.device),
                    ComputeDtype::Bf16 => format!("{}, bf16 matrix products", device::describe(&self.device)),
                };
                if self.world.size > 1 {
                    d = format!("{} ranks (each {d})", self.world.size);
                }
                d
            },
            notes: self.notes.clone(),
        })
    }

    fn runner(&self) -> Runner<'_> {
        Runner {
            model: &self.model,
            device: &self.device,
            attention: self.cfg.attention,
            compute: self.cfg.dtype.dtype(),
            padding_free: self.cfg.padding_free,
        }
    }

    /// A micro-batch's part of its step's loss: cross-entropy summed over the micro-batch and
    /// divided by the global batch's count (rows, class weights, masked tokens, NSP rows; see
    /// [`StepTotals`]), so the parts of every micro-batch on every rank add up to the mean over
    /// the global batch — one process with the whole batch computes the same loss.
    fn batch_loss(&self, batch: &Batch, out: &Outputs, global: &StepTotals) -> Result<Tensor> {
        let d = &self.device;
        let ce = |logits: &Tensor, labels: &[u32]| -> Result<Tensor> {
            let target = Tensor::from_slice(labels, labels.len(), d)?;
            Ok(candle_nn::loss::cross_entropy(&logits.to_dtype(DType::F32)?, &target)?)
        };
        let part = |mine: f64, all: f64| if all > 0.0 { mine / all } else { 0.0 };
        match self.cfg.task {
            Objective::Classify => {
                let logits = out.logits.as_ref().context("classifier logits")?;
                match &self.class_weights {
                    None => Ok((ce(logits, &batch.labels)? * part(batch.rows as f64, global.rows as f64))?),
                    Some(w) => {
                        let weight = |c: usize| w.get(c).copied().unwrap_or(0.0) as f64;
                        let mine: f64 = batch.labels.iter().map(|&l| weight(l as usize)).sum();
                        let all: f64 = global.class_rows.iter().enumerate().map(|(c, &n)| n as f64 * weight(c)).sum();
                        let loss = weighted_cross_entropy(&logits.to_dtype(DType::F32)?, &batch.labels, w)?;
                        Ok((loss * part(mine, all))?)
                    }
                }
            }
            Objective::Pretrain => {
                let mlm = out.mlm_logits.as_ref().context("MLM logits")?;
                // A micro-batch without a masked token adds nothing (but stays in the graph).
                let mut loss = match batch.mlm_labels.len() {
                    0 => (mlm.to_dtype(DType::F32)?.sum_all()? * 0.0)?,
                    n => (ce(mlm, &batch.mlm_labels)? * part(n as f64, global.mlm_targets as f64))?,
                };
                if let Some(nsp) = &out.logits {
                    if batch.rows > 0 && batch.nsp_labels.len() == batch.rows {
                        let nsp = (ce(nsp, &batch.nsp_labels)? * part(batch.rows as f64, global.nsp_rows as f64))?;
                        loss = (loss + nsp)?;
                    }
                }
                Ok(loss)
            }
        }
    }

    /// The step's global loss, or the error that stops a run whose loss is not finite.
    fn check_finite(&self, loss: f64) -> Result<f64> {
        let mut v = loss;
        if nan_at_step().is_some_and(|s| self.state.global_step + 1 >= s) {
            v = f64::NAN;
        }
        if !v.is_finite() {
            let last = checkpoint::newest(&self.cfg.output_dir)
                .map(|(_, p)| format!("the last good checkpoint is '{}' (intact)", p.display()))
                .unwrap_or_else(|| "no checkpoint was written before it".into());
            bail!(
                "the training loss is {v} at step {} (epoch {:.2}); stopping. {last}. Try a lower learning_rate, more warmup, or max_grad_norm: 1.0",
                self.state.global_step + 1,
                self.epoch_progress()
            );
        }
        Ok(v)
    }

    /// Evaluation on the eval split: metrics as one `metrics.jsonl` record.
    fn evaluate(&self, bar: &ProgressBar) -> Result<Value> {
        let spec = self.eval.as_ref().expect("evaluate is called with an eval split");
        bar.set_message(format!("evaluating on `{}`", spec.split));
        let mut record =
            json!({"step": self.state.global_step, "epoch": round4(self.epoch_progress()), "split": spec.split});
        let ctx = self.runner();
        match self.cfg.task {
            Objective::Classify => {
                let (rows, docs) = evaluate_classify(&ctx, spec, &self.label_names, &self.world)?;
                put_metrics(&mut record, "eval_", &serde_json::to_value(&rows)?);
                if let Some(d) = docs {
                    put_metrics(&mut record, "eval_doc_", &serde_json::to_value(&d)?);
                }
            }
            Objective::Pretrain => {
                put_metrics(&mut record, "eval_", &serde_json::to_value(evaluate_pretrain(&ctx, spec, &self.world)?)?);
            }
        }
        Ok(record)
    }

    /// A better evaluation than any before replaces `best/` with the weights evaluated.
    /// Returns whether it improved on the best by more than `early_stopping_threshold`.
    fn track_best(&mut self, metrics: &Value) -> Result<bool> {
        let (name, greater) = self.cfg.best_metric();
        let Some(value) = metrics.get(format!("eval_{name}")).and_then(Value::as_f64) else { return Ok(false) };
        let (better, improved) = match &self.state.best {
            None => (true, true),
            Some(b) => {
                let better = (greater && value > b.value) || (!greater && value < b.value);
                (better, better && (value - b.value).abs() > self.cfg.early_stopping_threshold)
            }
        };
        if better {
            self.state.best = Some(checkpoint::Best { metric: name, value, step: self.state.global_step });
        }
        if better && self.world.is_main() {
            checkpoint::write_atomic(&self.cfg.output_dir.join("best"), |tmp| {
                self.write_model(tmp)?;
                self.state.write(tmp)
            })?;
        }
        Ok(improved)
    }

    /// `checkpoint-<step>/` (atomic); the oldest beyond `save_total_limit` go.
    fn save_checkpoint(&mut self) -> Result<()> {
        if !self.world.is_main() {
            return Ok(());
        }
        let dir = self.cfg.output_dir.join(format!("checkpoint-{}", self.state.global_step));
        checkpoint::write_atomic(&dir, |tmp| {
            self.write_model(tmp)?;
            let tensors = self.optimizer.state_tensors(&self.model.params);
            crate::model::save_safetensors(&tensors, None, &tmp.join(checkpoint::OPTIMIZER))?;
            self.state.write(tmp)
        })?;
        checkpoint::rotate(&self.cfg.output_dir, self.cfg.save_total_limit)
    }

    /// The HF part of a checkpoint: config.json, model.safetensors, vocab and tokenizer config.
    fn write_model(&self, dir: &std::path::Path) -> Result<()> {
        self.model.save(dir)?;
        for (name, bytes) in &self.extra_files {
            std::fs::write(dir.join(name), bytes)?;
        }
        Ok(())
    }

    fn log(&mut self, record: Value) -> Result<()> {
        if let Some(f) = &mut self.metrics_log {
            writeln!(f, "{record}")?;
        }
        if let Some(tb) = &mut self.tensorboard {
            tb.write(&record)?;
        }
        self.state.log_history.push(record);
        Ok(())
    }

    fn epoch_progress(&self) -> f64 {
        self.state.epoch_index as f64 + self.state.batch_in_epoch as f64 / self.batches_in_epoch.max(1) as f64
    }

    /// The bar on a terminal; in a log, plain lines instead (see [`StepProgress`]).
    fn progress(&self) -> StepProgress {
        let lines = crate::contract::progress::plain_lines(self.opts.quiet);
        let bar = crate::contract::progress::bar(
            self.opts.quiet || lines,
            Some(self.total_steps),
            4,
            "train [{elapsed_precise}] {wide_bar:.cyan/blue} {pos}/{len} steps ETA {eta} {msg}",
        );
        bar.set_position(self.state.global_step);
        StepProgress {
            bar,
            lines,
            started: Instant::now(),
            first_step: self.state.global_step,
            total_steps: self.total_steps,
        }
    }

    /// Loss and metric curves as SVG + PNG next to `metrics.jsonl`.
    fn plot_curves(&self) -> Result<()> {
        let series = |key: &str| -> Vec<(f64, f64)> {
            self.state
                .log_history
                .iter()
                .filter_map(|r| Some((r.get("step")?.as_f64()?, r.get(key)?.as_f64()?)))
                .collect()
        };
        let dir = self.cfg.output_dir.join("plots");
        let losses = vec![("train loss".to_string(), series("loss")), ("eval loss".to_string(), series("eval_loss"))];
        crate::stats::plot::line_chart(&dir, "loss", "Loss", "loss", &losses)?;
        let metrics: Vec<(String, Vec<(f64, f64)>)> = match self.cfg.task {
            Objective::Classify => {
                ["accuracy", "f1", "roc_auc"].iter().map(|m| (m.to_string(), series(&format!("eval_{m}")))).collect()
            }
            Objective::Pretrain => {
                ["mlm_accuracy", "nsp_accuracy"].iter().map(|m| (m.to_string(), series(&format!("eval_{m}")))).collect()
            }
        };
        if metrics.iter().any(|(_, s)| !s.is_empty()) {
            crate::stats::plot::line_chart(&dir, "eval", "Evaluation", "metric", &metrics)?;
        }
        Ok(())
    }
}

/// A model on a device, ready to run batches.
pub struct Runner<'a> {
    pub model: &'a BertWithHead,
    pub device: &'a Device,
    pub attention: AttentionKind,
    /// The dtype of the matrix products (f32, or bf16 with f32 master weights).
    pub compute: DType,
    /// Run batches padding-free ([`crate::model::bert::Packed`]).
    pub padding_free: bool,
}

impl Runner<'_> {
    /// An evaluation-mode forward pass in the runner's compute dtype.
    pub fn eval_mode(&self) -> ForwardPass {
        ForwardPass::eval().with_compute(self.compute)
    }

    pub fn forward(&self, batch: &Batch, mode: &mut ForwardPass) -> Result<Outputs> {
        let (inputs, positions) = self.inputs(batch)?;
        self.model.forward(&inputs, positions.as_ref(), mode)
    }

    /// A batch's inputs on the device, and its MLM positions (pretraining heads).
    pub fn inputs(&self, batch: &Batch) -> Result<(Inputs, Option<Tensor>)> {
        let d = self.device;
        let mut inputs =
            Inputs::new(&batch.input_ids, &batch.token_type_ids, &batch.attention_mask, batch.rows, batch.seq, d)?;
        if self.attention == AttentionKind::BlockDiagonal && batch.doc_boundaries.iter().any(|b| !b.is_empty()) {
            inputs = inputs.with_block_diagonal(&batch.doc_boundaries, &batch.attention_mask, batch.rows, batch.seq)?;
        }
        if self.padding_free {
            inputs = inputs.into_packed(&batch.input_ids, &batch.token_type_ids, &batch.attention_mask)?;
        }
        let positions = match self.model.kind {
            crate::model::ModelKind::SequenceClassification => None,
            _ => {
                let at: Vec<u32> = batch.mlm_positions.iter().map(|&p| inputs.token_index(p)).collect();
                Some(Tensor::from_vec(at, batch.mlm_positions.len(), d)?)
            }
        };
        Ok((inputs, positions))
    }
}

/// One evaluated batch, as ranks exchange them: its index, logits (row-major), labels and
/// document ids.
type EvalBatch = (usize, Vec<f32>, Vec<u32>, Vec<String>);

/// Classification metrics over a split, per row and (when rows are windows) per document.
/// With more than one rank, rank `r` runs batches `r, r + ranks, …` and every rank gathers the
/// logits, so each computes the metrics of the whole split, in the split's order.
pub fn evaluate_classify(
    ctx: &Runner,
    spec: &LoaderSpec,
    names: &[String],
    world: &World,
) -> Result<(ClassificationMetrics, Option<ClassificationMetrics>)> {
    // Inference only: no graph for a backward pass, each activation freed after its use.
    let frozen = ctx.model.frozen()?;
    let ctx = &Runner { model: &frozen, ..*ctx };
    let mut mode = ctx.eval_mode();
    let mut mine: Vec<EvalBatch> = Vec::new();
    for (i, batch) in spec.epoch(0)?.enumerate() {
        if i % world.size != world.rank {
            continue;
        }
        let batch = batch?;
        let out = ctx.forward(&batch, &mut mode)?;
        let logits = out.logits.context("classifier logits")?.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
        mine.push((i, logits, batch.labels, batch.doc_ids));
    }
    let mut all = mine;
    if world.size > 1 {
        let gathered = dist::gather_bytes(world, &serde_json::to_vec(&all)?)?;
        all = Vec::new();
        for bytes in gathered {
            all.extend(serde_json::from_slice::<Vec<EvalBatch>>(&bytes)?);
        }
        all.sort_by_key(|b| b.0);
    }
    let k = ctx.model.config.num_labels();
    let mut preds = Predictions::new(k);
    let mut docs = Vec::new();
    for (_, logits, labels, doc_ids) in all {
        for (row, &label) in logits.chunks(k).zip(&labels) {
            preds.push_logits(row, label as usize);
        }
        docs.extend(doc_ids);
    }
    let rows = ClassificationMetrics::compute(&preds, names);
    let per_doc = preds.per_document(&docs);
    let docs = (per_doc.len() < preds.len()).then(|| ClassificationMetrics::compute(&per_doc, names));
    Ok((rows, docs))
}

/// MLM (and NSP) metrics over a split; with more than one rank, each runs every `ranks`-th
/// batch and the tallies are summed.
pub fn evaluate_pretrain(ctx: &Runner, spec: &LoaderSpec, world: &World) -> Result<crate::metrics::PretrainMetrics> {
    let frozen = ctx.model.frozen()?;
    let ctx = &Runner { model: &frozen, ..*ctx };
    let mut mode = ctx.eval_mode();
    let mut tally = PretrainTally::default();
    for (i, batch) in spec.epoch(0)?.enumerate() {
        if i % world.size != world.rank {
            continue;
        }
        let batch = batch?;
        let out = ctx.forward(&batch, &mut mode)?;
        tally.examples += batch.rows;
        let mlm = out.mlm_logits.context("MLM logits")?.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        for (row, &label) in mlm.iter().zip(&batch.mlm_labels) {
            tally.add_mlm(row, label as usize);
        }
        if let Some(nsp) = out.logits {
            if batch.nsp_labels.len() == batch.rows {
                for (row, &label) in nsp.to_dtype(DType::F32)?.to_vec2::<f32>()?.iter().zip(&batch.nsp_labels) {
                    tally.add_nsp(row, label as usize);
                }
            }
        }
    }
    if world.size > 1 {
        let t = &mut tally;
        let mut sums = [
            t.examples as f64,
            t.mlm_tokens as f64,
            t.mlm_loss_sum,
            t.mlm_correct as f64,
            t.nsp_examples as f64,
            t.nsp_loss_sum,
            t.nsp_correct as f64,
        ];
        dist::sum_f64(world, &mut sums)?;
        let count = |x: f64| x.round() as usize;
        *t = PretrainTally {
            examples: count(sums[0]),
            mlm_tokens: count(sums[1]),
            mlm_loss_sum: sums[2],
            mlm_correct: count(sums[3]),
            nsp_examples: count(sums[4]),
            nsp_loss_sum: sums[5],
            nsp_correct: count(sums[6]),
        };
    }
    Ok(tally.finish())
}

/// Cross-entropy with a weight per class, as PyTorch's `CrossEntropyLoss(weight=w)`: the
/// weighted mean `Σ w[yᵢ]·(−log pᵢ[yᵢ]) / Σ w[yᵢ]`.
pub fn weighted_cross_entropy(logits: &Tensor, labels: &[u32], weights: &[f32]) -> Result<Tensor> {
    let d = logits.device();
    let logp = candle_nn::ops::log_softmax(logits, candle_core::D::Minus1)?;
    let target = Tensor::from_slice(labels, (labels.len(), 1), d)?;
    let picked = logp.gather(&target, 1)?.squeeze(1)?;
    let w: Vec<f32> = labels.iter().map(|&l| weights[l as usize]).collect();
    let total: f64 = w.iter().map(|&x| x as f64).sum();
    let w = Tensor::from_slice(&w, labels.len(), d)?;
    Ok((picked.mul(&w)?.sum_all()? * (-1.0 / total))?)
}

/// scikit-learn's `compute_class_weight("balanced")`: `n_rows / (n_classes · rows of class c)`.
pub fn balanced_class_weights(counts: &[u64]) -> Result<Vec<f32>> {
    let n: u64 = counts.iter().sum();
    if let Some(c) = counts.iter().position(|&c| c == 0) {
        bail!("class_weights: balanced: class {c} has no rows in the training split");
    }
    Ok(counts.iter().map(|&c| (n as f64 / (counts.len() as f64 * c as f64)) as f32).collect())
}

/// Copies metric fields into `record` with a prefix (`eval_accuracy`, …).
fn put_metrics(record: &mut Value, prefix: &str, metrics: &Value) {
    let Some(obj) = metrics.as_object() else { return };
    for (k, v) in obj {
        record[format!("{prefix}{k}")] = v.clone();
    }
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// The loop's progress: the bar on a terminal; when stderr is not one (a log under a scheduler
/// or `nohup`, where the bar is hidden) and not `--quiet`, a plain line at every `logging_steps`
/// record instead, with the figures of that `metrics.jsonl` record,
///
/// `[train] step 120/500 (24%)  loss 0.4312  lr 2.00e-3  3.1 steps/s  24.8 samples/s  3,174 tokens/s  elapsed 0:40  eta 2:02`
///
/// (loss, samples/s and tokens/s over the steps since the last line; steps/s, elapsed and eta
/// over this process's run, evaluations included), and one after each evaluation,
///
/// `[train] eval at step 120/500  split test  eval_loss 0.3912  eval_accuracy 0.8750  took 0:12`.
struct StepProgress {
    bar: ProgressBar,
    /// Plain lines instead of the (hidden) bar.
    lines: bool,
    started: Instant,
    /// The step this process started from (a resumed run's checkpoint).
    first_step: u64,
    total_steps: u64,
}

impl StepProgress {
    /// The line of a `logging_steps` record (`step`, `loss`, `learning_rate`, rates).
    fn step_line(&self, step: u64, record: &Value) {
        use crate::contract::progress::{clock, emit, eta, percent, rate, thousands};
        if !self.lines {
            return;
        }
        let field = |k: &str| record.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let elapsed = self.started.elapsed();
        let done = step.saturating_sub(self.first_step);
        let left = self.total_steps.saturating_sub(self.first_step);
        emit(&format!(
            "[train] step {step}/{total} ({pct}%)  loss {loss:.4}  lr {lr:.2e}  {steps} steps/s  {samples} samples/s  {tokens} tokens/s  elapsed {elapsed}  eta {eta}",
            total = self.total_steps,
            pct = percent(step, self.total_steps),
            loss = field("loss"),
            lr = field("learning_rate"),
            steps = rate(done as f64 / elapsed.as_secs_f64().max(1e-3)),
            samples = rate(field("samples_per_second")),
            tokens = thousands(field("tokens_per_second").max(0.0).round() as u64),
            elapsed = clock(elapsed),
            eta = eta(done, left, elapsed),
        ));
    }

    /// The line after an evaluation: its split, `eval_loss`, the metric that picks the best
    /// model (`metric`, without `eval_`), and how long it took.
    fn eval_line(&self, step: u64, metrics: &Value, metric: &str, took: std::time::Duration) {
        if !self.lines {
            return;
        }
        let mut line = format!("[train] eval at step {step}/{}", self.total_steps);
        if let Some(split) = metrics.get("split").and_then(Value::as_str) {
            line.push_str(&format!("  split {split}"));
        }
        let mut keys = vec!["eval_loss".to_string()];
        if metric != "loss" {
            keys.push(format!("eval_{metric}"));
        }
        for key in keys {
            if let Some(v) = metrics.get(&key).and_then(Value::as_f64) {
                line.push_str(&format!("  {key} {v:.4}"));
            }
        }
        line.push_str(&format!("  took {}", crate::contract::progress::clock(took)));
        crate::contract::progress::emit(&line);
    }
}

/// Whether the loop goes on after an optimiser step.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Go,
    Stop,
}

/// What the loop adds up for the summary.
#[derive(Default)]
struct RunTally {
    samples: u64,
    tokens: u64,
    window: LogWindow,
    last_eval: Option<Value>,
    interrupted: bool,
    stopped_early: Option<String>,
}

impl RunTally {
    /// One optimiser step: its global loss and global batch.
    fn add(&mut self, loss: f64, global: &StepTotals, padding_free: bool) {
        let slots = if padding_free { global.tokens } else { global.slots };
        self.window.add(loss, global.rows, global.tokens, slots);
        self.samples += global.rows as u64;
        self.tokens += global.tokens as u64;
    }
}

/// Training figures between two log lines.
#[derive(Default)]
struct LogWindow {
    loss_sum: f64,
    batches: u64,
    rows: u64,
    tokens: u64,
    /// Token positions the batches computed (padding included).
    slots: u64,
    since: Option<Instant>,
    grad_norm: f64,
    last_loss: f64,
    /// Seconds in collectives (more than one rank).
    comm_seconds: f64,
}

impl LogWindow {
    fn add(&mut self, loss: f64, rows: usize, tokens: usize, slots: usize) {
        self.since.get_or_insert_with(Instant::now);
        self.loss_sum += loss;
        self.batches += 1;
        self.rows += rows as u64;
        self.tokens += tokens as u64;
        self.slots += slots as u64;
        self.last_loss = loss;
    }

    fn rates(&self) -> (f64, f64) {
        let secs = self.since.map(|s| s.elapsed().as_secs_f64()).unwrap_or(0.0).max(1e-9);
        (self.rows as f64 / secs, self.tokens as f64 / secs)
    }

    fn status(&self, lr: f64) -> String {
        let (sps, tps) = self.rates();
        format!("loss {:.4} lr {lr:.2e} {sps:.1} samples/s {tps:.0} tokens/s", self.last_loss)
    }

    fn take(&mut self, step: u64, epoch: f64, lr: f64) -> Value {
        let (sps, tps) = self.rates();
        let mut v = json!({
            "step": step,
            "epoch": round4(epoch),
            "loss": self.loss_sum / self.batches.max(1) as f64,
            "learning_rate": lr,
            "grad_norm": self.grad_norm,
            "samples_per_second": (sps * 100.0).round() / 100.0,
            "tokens_per_second": tps.round(),
            // The share of computed token positions that were padding (0 padding-free).
            "padding": round4(1.0 - self.tokens as f64 / self.slots.max(1) as f64),
        });
        if self.comm_seconds > 0.0 {
            // Data-parallel: the time in the all-reduce of the gradients and the step's scalars.
            v["allreduce_seconds_per_step"] =
                json!((self.comm_seconds / self.batches.max(1) as f64 * 1e5).round() / 1e5);
        }
        *self = LogWindow::default();
        v
    }
}

/// The closing lines of a run; `to_continue` says how to continue a run stopped early (the
/// command that started it decides: `--resume` for `train`, the same command for a chain).
pub fn format_summary(s: &TrainSummary, to_continue: &str) -> String {
    let mut out = Vec::new();
    for n in &s.notes {
        out.push(format!("note: {n}"));
    }
    let secs = s.seconds.max(1e-9);
    out.push(format!(
        "{} {} steps ({:.2} epochs) in {:.1}s on {}: {:.1} samples/s, {:.0} tokens/s",
        if s.interrupted { "interrupted after" } else { "trained" },
        s.steps,
        s.epochs,
        s.seconds,
        s.device,
        s.samples as f64 / secs,
        s.tokens as f64 / secs
    ));
    if let Some(e) = &s.last_eval {
        let mut parts = Vec::new();
        if let Some(obj) = e.as_object() {
            for (k, v) in obj {
                if let (Some(name), Some(x)) = (k.strip_prefix("eval_"), v.as_f64()) {
                    if name.ends_with("examples") || name.ends_with("tokens") {
                        continue;
                    }
                    if !name.starts_with("doc_") || name.ends_with("accuracy") || name.ends_with("f1") {
                        parts.push(format!("{name} {x:.4}"));
                    }
                }
            }
        }
        out.push(format!("eval on `{}`: {}", e["split"].as_str().unwrap_or("?"), parts.join(", ")));
    }
    if let Some(rows) = s.last_eval.as_ref().and_then(|e| e.get("eval_per_class")).and_then(Value::as_array) {
        out.push(format!("{:<16} {:>9} {:>9} {:>9} {:>9}", "class", "precision", "recall", "f1", "support"));
        for r in rows {
            let num = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(f64::NAN);
            out.push(format!(
                "{:<16} {:>9.4} {:>9.4} {:>9.4} {:>9}",
                r.get("label").and_then(Value::as_str).unwrap_or("?"),
                num("precision"),
                num("recall"),
                num("f1"),
                r.get("support").and_then(Value::as_u64).unwrap_or(0)
            ));
        }
    }
    if let Some(why) = &s.stopped_early {
        out.push(why.clone());
    }
    if let Some((metric, value, dir)) = &s.best {
        out.push(format!("best {metric} {value:.4}: {}", dir.display()));
    }
    match &s.final_dir {
        Some(d) => out.push(format!("final model: {}", d.display())),
        None => out.push(format!("checkpoint written; {to_continue}")),
    }
    out.join("\n")
}

/// Classification metrics of a checkpoint folder on one split of a shard folder (per row,
/// and per document when rows are windows), on the CPU.
pub fn evaluate_checkpoint(
    checkpoint: &std::path::Path,
    data: &std::path::Path,
    split: &str,
    batch_size: usize,
) -> Result<(ClassificationMetrics, Option<ClassificationMetrics>)> {
    let device = Device::Cpu;
    let model =
        BertWithHead::from_checkpoint(crate::model::ModelKind::SequenceClassification, checkpoint, None, &device, 0)?;
    let shards = crate::shards::ShardSet::open(data)?;
    let pad_id = shards.tokenizer()?.special_ids.pad;
    // The rows' labels as the checkpoint's classes, by name.
    let labels = crate::shards::match_labels(
        &shards.class_names(),
        &model.config.label_names(),
        &format!("the shards in '{}'", data.display()),
        &format!("the checkpoint '{}'", checkpoint.display()),
        "evaluate a checkpoint trained on these labels",
    )?;
    let spec = LoaderSpec {
        shards: Arc::new(shards),
        split: split.to_string(),
        kind: data::RowKind::Classify { num_labels: model.config.num_labels(), remap: labels.remap().map(Arc::new) },
        batch_size,
        order: data::Order::InFileOrder,
        group_by_length: true,
        pad_to: None,
        pad_id,
        seed: 0,
        max_tokens: Some(config::default_eval_max_tokens()),
        packed: false,
        lengths: None,
    };
    let names = model.config.label_names();
    let ctx = Runner {
        model: &model,
        device: &device,
        attention: AttentionKind::Full,
        compute: DType::F32,
        padding_free: false,
    };
    evaluate_classify(&ctx, &spec, &names, &World::SINGLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_cross_entropy_is_the_weighted_mean_of_each_rows_loss() {
        let logits = [[2.0f32, -1.0, 0.5], [0.1, 0.2, 0.3], [-3.0, 4.0, 1.0], [1.0, 1.0, 1.0]];
        let labels = [0u32, 2, 1, 0];
        let weights = [0.5f32, 2.0, 3.0];
        let t = Tensor::new(&logits, &Device::Cpu).unwrap();
        let got = weighted_cross_entropy(&t, &labels, &weights).unwrap().to_scalar::<f32>().unwrap() as f64;
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for (row, &y) in logits.iter().zip(&labels) {
            let lse = row.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
            let w = weights[y as usize] as f64;
            num += w * (lse - row[y as usize] as f64);
            den += w;
        }
        assert!((got - num / den).abs() < 1e-6, "{got} vs {}", num / den);
        // Equal weights give the plain mean.
        let plain = candle_nn::loss::cross_entropy(&t, &Tensor::new(&labels, &Device::Cpu).unwrap()).unwrap();
        let equal = weighted_cross_entropy(&t, &labels, &[1.0; 3]).unwrap();
        let d = (plain.to_scalar::<f32>().unwrap() - equal.to_scalar::<f32>().unwrap()).abs();
        assert!(d < 1e-6, "{d}");
    }

    #[test]
    fn balanced_weights_are_scikit_learns() {
        // compute_class_weight("balanced", classes=[0, 1, 2], y) for counts 30, 10, 20.
        let w = balanced_class_weights(&[30, 10, 20]).unwrap();
        let want = [60.0 / 90.0, 60.0 / 30.0, 60.0 / 60.0];
        assert!(w.iter().zip(want).all(|(a, b)| (*a as f64 - b).abs() < 1e-6), "{w:?}");
        assert!(balanced_class_weights(&[5, 0]).unwrap_err().to_string().contains("class 1 has no rows"));
    }
}
