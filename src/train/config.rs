//! The training YAML: one typed struct whose field names follow HF `TrainingArguments`
//! (`learning_rate`, `warmup_ratio`, `per_device_train_batch_size`, `save_total_limit`, …),
//! loaded with the same located errors as pipelines (`file:line:col`, nearest name, exit 78).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::{ConfigErrors, YamlFile};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// `classify` (sequence classification on classification shards) or `pretrain` (MLM + NSP,
    /// or MLM only on packed rows, on pretraining shards).
    pub task: Objective,
    /// A shard folder written by `bertpipe pipeline run`.
    pub data: PathBuf,
    /// The split trained on.
    #[serde(default = "default_train_split")]
    pub train_split: String,
    /// The split evaluated during training; default `test` when the shards have it. `none`
    /// evaluates nothing.
    #[serde(default)]
    pub eval_split: Option<String>,
    /// Where the model comes from: `preset`, `config` or `init_from`, and dropout overrides.
    pub model: ModelSpec,
    /// Checkpoints, `metrics.jsonl`, curves and `final/` go here.
    pub output_dir: PathBuf,
    /// Seeds initialisation, shuffling, dropout and dynamic masking.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// `cpu`, `cuda` or `cuda:N` (CUDA needs a build with `--features cuda`).
    #[serde(default = "default_device")]
    pub device: String,
    /// `f32`, or `bf16`: matrix products in bf16 (CUDA's tensor cores) with f32 master
    /// weights, optimiser and everything else, as PyTorch's autocast. On the CPU bf16 gives
    /// the same rounding but no speed (candle widens it to f32 to multiply).
    #[serde(default)]
    pub dtype: ComputeDtype,
    /// Passes over the training split (fractions allowed); ignored when `max_steps` is set.
    #[serde(default = "default_epochs")]
    pub num_train_epochs: f64,
    /// Stop after this many optimiser steps (overrides `num_train_epochs`).
    #[serde(default)]
    pub max_steps: Option<u64>,
    /// Rows per training micro-batch.
    #[serde(default = "default_batch")]
    pub per_device_train_batch_size: usize,
    /// Rows per evaluation batch.
    #[serde(default = "default_eval_batch")]
    pub per_device_eval_batch_size: usize,
    /// At most this many tokens (rows × padded length) per evaluation batch: fewer rows where
    /// they are long, so evaluating a 512-token split takes the memory of a 128-token one.
    #[serde(default = "default_eval_max_tokens")]
    pub eval_max_tokens: usize,
    /// Micro-batches whose gradients are summed into one optimiser step.
    #[serde(default = "one")]
    pub gradient_accumulation_steps: usize,
    /// Peak learning rate (after warmup).
    #[serde(default = "default_lr")]
    pub learning_rate: f64,
    /// Decoupled (AdamW) weight decay; biases and LayerNorm parameters get none.
    #[serde(default = "default_wd")]
    pub weight_decay: f64,
    /// AdamW's decay rate of the first moment.
    #[serde(default = "default_beta1")]
    pub adam_beta1: f64,
    /// AdamW's decay rate of the second moment.
    #[serde(default = "default_beta2")]
    pub adam_beta2: f64,
    /// Added to the denominator of AdamW's update.
    #[serde(default = "default_adam_eps")]
    pub adam_epsilon: f64,
    /// Global-norm gradient clipping; 0 turns it off.
    #[serde(default = "default_clip")]
    pub max_grad_norm: f64,
    /// `linear` (warmup, then linear decay to 0), `cosine` or `constant` (after warmup).
    #[serde(default)]
    pub lr_scheduler_type: Schedule,
    /// Warmup as a share of all optimiser steps…
    #[serde(default)]
    pub warmup_ratio: f64,
    /// …or as a number of steps (wins over `warmup_ratio`).
    #[serde(default)]
    pub warmup_steps: Option<u64>,
    /// Log the training loss every N optimiser steps.
    #[serde(default = "default_logging")]
    pub logging_steps: u64,
    /// When to evaluate on the eval split: `epoch` (at each epoch's end; the default without
    /// `eval_steps`), `steps` (every `eval_steps`; the default with it) or `no`. The last step
    /// is always evaluated unless `no`.
    #[serde(default)]
    pub eval_strategy: Option<EvalStrategy>,
    /// Evaluate every N optimiser steps.
    #[serde(default)]
    pub eval_steps: Option<u64>,
    /// Stop when `metric_for_best_model` has not improved by more than
    /// `early_stopping_threshold` for this many evaluations in a row (HF's
    /// `EarlyStoppingCallback`). Off when unset.
    #[serde(default)]
    pub early_stopping_patience: Option<u64>,
    #[serde(default)]
    pub early_stopping_threshold: f64,
    /// Classification: weight each class's loss, `balanced` (n_rows / (n_classes · rows of the
    /// class), as scikit-learn's `compute_class_weight`) or one weight per class. Off by default.
    #[serde(default)]
    pub class_weights: Option<ClassWeights>,
    /// `tensorboard`: also write the logged scalars as TensorBoard event files under
    /// `output_dir/runs/`; `none` (default): `metrics.jsonl` only.
    #[serde(default)]
    pub report_to: ReportTo,
    /// Write a checkpoint every N optimiser steps (and always at each epoch end).
    #[serde(default)]
    pub save_steps: Option<u64>,
    /// Keep the newest N `checkpoint-*` folders (`best/` and `final/` are extra).
    #[serde(default = "default_keep")]
    pub save_total_limit: usize,
    /// Metric that picks `best/`: `accuracy`, `f1`, `roc_auc`, `loss`, … (default: `accuracy`
    /// for classify, `loss` for pretrain).
    #[serde(default)]
    pub metric_for_best_model: Option<String>,
    /// Default: true for everything but losses and perplexity.
    #[serde(default)]
    pub greater_is_better: Option<bool>,
    /// No longer used: every epoch is a permutation of the whole split (docs/training.md, "Training
    /// order"). Accepted so older files load; a value set gets a note.
    #[serde(default)]
    pub shuffle_buffer: Option<usize>,
    /// Batch rows of similar length (less padding); shuffled batch order.
    #[serde(default = "yes")]
    pub group_by_length: bool,
    /// Pad every batch to the shards' `max_len` instead of its longest row.
    #[serde(default)]
    pub pad_to_max_length: bool,
    /// Recompute each layer's activations in the backward pass instead of keeping them
    /// (HF's name): activation memory of one layer instead of all, for one more forward pass
    /// of compute (on 2 CPU cores the measured wall moved by a few percent: docs/training.md). Gradients
    /// are the same.
    #[serde(default)]
    pub gradient_checkpointing: bool,
    /// Padding-free batches (TRL's name): a batch's rows run as one stream of real tokens,
    /// attention kept within each row, positions restarting per row; the same losses and
    /// gradients as padded batches (docs/training.md, "Padding-free batches").
    #[serde(default)]
    pub padding_free: bool,
    /// Batches by a token budget as well as by rows: a global batch ends before its tokens
    /// (padded: rows × the longest row; padding-free: the rows' own) would pass this many per
    /// device (× ranks × accumulation steps), so a step's cost is flat across lengths. Unset:
    /// by rows only.
    #[serde(default)]
    pub max_tokens_per_batch: Option<usize>,
    /// Packed MLM rows: `full` attention across the documents of a row, or `block_diagonal`.
    #[serde(default)]
    pub attention: AttentionKind,
    /// Compute threads (default: all cores).
    #[serde(default)]
    pub threads: usize,
}

/// Where the model comes from: a preset size, an HF `config.json`, or a checkpoint.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// `tiny` (2L/128H), `mini` (4L/256H), `small` (4L/512H), `medium` (8L/512H), `base`
    /// (12L/768H), `large` (24L/1024H); the vocabulary size comes from the shards.
    #[serde(default)]
    pub preset: Option<String>,
    /// An HF BERT `config.json` for a model trained from scratch.
    #[serde(default)]
    pub config: Option<PathBuf>,
    /// An HF checkpoint folder (`config.json`, `model.safetensors`, `vocab.txt`): ours or any
    /// BERT from the Hub, with or without heads.
    #[serde(default)]
    pub init_from: Option<PathBuf>,
    /// Overrides the config's dropout after embeddings and sublayers (ModernBERT's
    /// `embedding_dropout` and `mlp_dropout`).
    #[serde(default)]
    pub hidden_dropout_prob: Option<f64>,
    /// Overrides the config's dropout on attention probabilities (ModernBERT's
    /// `attention_dropout`).
    #[serde(default)]
    pub attention_probs_dropout_prob: Option<f64>,
    /// Overrides the dropout before the classifier (default: `hidden_dropout_prob`; ModernBERT's
    /// `classifier_dropout`, 0 unless its config says otherwise).
    #[serde(default)]
    pub classifier_dropout: Option<f64>,
}

/// What a run trains for (`task:` in the YAML, the word HF examples use): a classifier on
/// labelled rows, or MLM (+ NSP) pretraining. In code it is the objective, so that "task"
/// keeps one meaning there, a task of an array.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Objective {
    Classify,
    Pretrain,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EvalStrategy {
    Epoch,
    Steps,
    No,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ClassWeights {
    /// `balanced`.
    Named(String),
    Weights(Vec<f64>),
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ReportTo {
    #[default]
    None,
    Tensorboard,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    #[default]
    Linear,
    Cosine,
    Constant,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ComputeDtype {
    #[default]
    F32,
    Bf16,
}

impl ComputeDtype {
    pub fn dtype(self) -> candle_core::DType {
        match self {
            ComputeDtype::F32 => candle_core::DType::F32,
            ComputeDtype::Bf16 => candle_core::DType::BF16,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKind {
    #[default]
    Full,
    BlockDiagonal,
}

fn default_train_split() -> String {
    "train".into()
}
fn default_seed() -> u64 {
    42
}
fn default_device() -> String {
    "cpu".into()
}
fn default_epochs() -> f64 {
    3.0
}
fn default_batch() -> usize {
    32
}
fn default_eval_batch() -> usize {
    64
}
/// 64 rows of 128 tokens.
pub fn default_eval_max_tokens() -> usize {
    8192
}
fn one() -> usize {
    1
}
fn default_lr() -> f64 {
    5e-5
}
fn default_wd() -> f64 {
    0.01
}
fn default_beta1() -> f64 {
    0.9
}
fn default_beta2() -> f64 {
    0.999
}
fn default_adam_eps() -> f64 {
    1e-8
}
fn default_clip() -> f64 {
    1.0
}
fn default_logging() -> u64 {
    10
}
fn default_keep() -> usize {
    2
}
fn yes() -> bool {
    true
}

impl TrainConfig {
    /// Reads, overrides, validates and resolves a training file; every problem at once.
    pub fn load(path: &Path, overrides: &[String]) -> Result<TrainConfig, ConfigErrors> {
        Self::from_yaml(YamlFile::load(path, overrides)?, true)
    }

    /// As [`TrainConfig::load`], from a document already read (an experiment's stage);
    /// `inputs_exist: false` leaves out the checks that `data` and `model.init_from` exist
    /// (stages that run before this one write them).
    pub fn from_yaml(mut y: YamlFile, inputs_exist: bool) -> Result<TrainConfig, ConfigErrors> {
        let Some(mut c) = y.deserialize::<TrainConfig>("train config") else {
            return Err(y.finish().expect_err("deserialisation failed"));
        };
        y.resolve("data", &mut c.data);
        y.resolve("output_dir", &mut c.output_dir);
        if let Some(p) = &mut c.model.config {
            y.resolve("model.config", p);
        }
        if let Some(p) = &mut c.model.init_from {
            y.resolve("model.init_from", p);
        }
        c.check(&mut y, inputs_exist);
        y.finish().map(|_| c)
    }

    fn check(&self, y: &mut YamlFile, inputs_exist: bool) {
        if inputs_exist
            && !crate::storage::is_remote(&self.data)
            && !self.data.join(crate::contract::manifest::MANIFEST).exists()
        {
            y.error(
                "data",
                format!(
                    "'{}' is not a finished shard folder (no manifest.json); run `bertpipe pipeline run` first",
                    self.data.display()
                ),
            );
        }
        let m = &self.model;
        let sources = [m.preset.is_some(), m.config.is_some(), m.init_from.is_some()];
        if sources.iter().filter(|&&s| s).count() != 1 {
            y.error(
                "model",
                "give exactly one of `preset`, `config` (a config.json) or `init_from` (a checkpoint)".into(),
            );
        }
        if let Some(p) = &m.preset {
            if !crate::model::config::PRESETS.iter().any(|(n, _, _)| n == p) {
                let names: Vec<&str> = crate::model::config::PRESETS.iter().map(|p| p.0).collect();
                let hint =
                    crate::config::suggest(p, &names).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
                y.error("model.preset", format!("unknown preset `{p}`{hint} (valid: {})", names.join(", ")));
            }
        }
        for (key, path) in [("model.config", &m.config), ("model.init_from", &m.init_from)] {
            if let Some(p) = path {
                if inputs_exist && !p.exists() {
                    y.error(key, format!("'{}' does not exist", p.display()));
                }
            }
        }
        for (key, p) in [
            ("model.hidden_dropout_prob", m.hidden_dropout_prob),
            ("model.attention_probs_dropout_prob", m.attention_probs_dropout_prob),
            ("model.classifier_dropout", m.classifier_dropout),
        ] {
            if let Some(p) = p {
                if !(0.0..1.0).contains(&p) {
                    y.error(key, format!("must be in [0, 1), got {p}"));
                }
            }
        }
        for (key, v) in [
            ("per_device_train_batch_size", self.per_device_train_batch_size),
            ("per_device_eval_batch_size", self.per_device_eval_batch_size),
            ("eval_max_tokens", self.eval_max_tokens),
            ("gradient_accumulation_steps", self.gradient_accumulation_steps),
        ] {
            if v == 0 {
                y.error(key, "must be at least 1".into());
            }
        }
        if self.max_tokens_per_batch == Some(0) {
            y.error("max_tokens_per_batch", "must be at least 1".into());
        }
        if self.padding_free && self.pad_to_max_length {
            y.error(
                "padding_free",
                "padding-free batches have no padding, and `pad_to_max_length: true` pads every batch to max_len: set one of them".into(),
            );
        }
        if self.learning_rate.is_nan() || self.learning_rate <= 0.0 {
            y.error("learning_rate", format!("must be positive, got {}", self.learning_rate));
        }
        if !(0.0..=1.0).contains(&self.warmup_ratio) {
            y.error("warmup_ratio", format!("must be in [0, 1], got {}", self.warmup_ratio));
        }
        for (key, v) in [("weight_decay", self.weight_decay), ("max_grad_norm", self.max_grad_norm)] {
            if v.is_nan() || v < 0.0 {
                y.error(key, format!("must not be negative, got {v}"));
            }
        }
        for (key, v) in [("adam_beta1", self.adam_beta1), ("adam_beta2", self.adam_beta2)] {
            if !(0.0..1.0).contains(&v) {
                y.error(key, format!("must be in [0, 1), got {v}"));
            }
        }
        if self.max_steps.is_none() && (self.num_train_epochs.is_nan() || self.num_train_epochs <= 0.0) {
            y.error("num_train_epochs", format!("must be positive, got {}", self.num_train_epochs));
        }
        if self.max_steps == Some(0) {
            y.error("max_steps", "must be at least 1".into());
        }
        for (key, v) in [
            ("logging_steps", Some(self.logging_steps)),
            ("eval_steps", self.eval_steps),
            ("save_steps", self.save_steps),
        ] {
            if v == Some(0) {
                y.error(key, "must be at least 1".into());
            }
        }
        match (self.eval_strategy, self.eval_steps) {
            (Some(EvalStrategy::Steps), None) => {
                y.error("eval_strategy", "`steps` needs `eval_steps: N` (evaluate every N steps)".into())
            }
            (Some(EvalStrategy::Epoch | EvalStrategy::No), Some(_)) => {
                y.error("eval_steps", "is used only with `eval_strategy: steps`; remove one of the two".into())
            }
            _ => {}
        }
        if self.early_stopping_patience == Some(0) {
            y.error("early_stopping_patience", "must be at least 1 (leave it out to never stop early)".into());
        }
        if self.early_stopping_patience.is_some() && self.eval_strategy() == EvalStrategy::No {
            y.error("early_stopping_patience", "needs evaluations to watch; `eval_strategy` is `no`".into());
        }
        if self.early_stopping_threshold.is_nan() || self.early_stopping_threshold < 0.0 {
            y.error("early_stopping_threshold", format!("must not be negative, got {}", self.early_stopping_threshold));
        }
        match &self.class_weights {
            Some(_) if self.task == Objective::Pretrain => {
                y.error("class_weights", "applies to `task: classify` only".into())
            }
            Some(ClassWeights::Named(n)) if n != "balanced" => {
                y.error("class_weights", format!("`{n}`: give `balanced` or a list of one weight per class"))
            }
            Some(ClassWeights::Weights(w)) if w.is_empty() || w.iter().any(|x| !x.is_finite() || *x <= 0.0) => {
                y.error("class_weights", format!("weights must be positive numbers, got {w:?}"))
            }
            _ => {}
        }
        if let Err(e) = crate::device::DeviceSpec::parse(&self.device) {
            y.error("device", e.to_string());
        }
        if let Some(name) = &self.metric_for_best_model {
            let valid = match self.task {
                Objective::Classify => crate::metrics::CLASSIFY_METRICS,
                Objective::Pretrain => crate::metrics::PRETRAIN_METRICS,
            };
            let bare = name.strip_prefix("eval_").unwrap_or(name);
            if !valid.contains(&bare) {
                let hint =
                    crate::config::suggest(bare, valid).map(|s| format!(", did you mean `{s}`?")).unwrap_or_default();
                y.error(
                    "metric_for_best_model",
                    format!("unknown metric `{name}`{hint} (valid: {})", valid.join(", ")),
                );
            }
        }
    }

    /// `eval_strategy`, or its default: `steps` with `eval_steps`, else `epoch`.
    pub fn eval_strategy(&self) -> EvalStrategy {
        self.eval_strategy.unwrap_or(if self.eval_steps.is_some() { EvalStrategy::Steps } else { EvalStrategy::Epoch })
    }

    /// The metric that picks `best/`, and whether larger is better.
    pub fn best_metric(&self) -> (String, bool) {
        let name = self.metric_for_best_model.clone().unwrap_or_else(|| {
            match self.task {
                Objective::Classify => "accuracy",
                Objective::Pretrain => "loss",
            }
            .to_string()
        });
        let bare = name.strip_prefix("eval_").unwrap_or(&name).to_string();
        let greater =
            self.greater_is_better.unwrap_or(!matches!(bare.as_str(), "loss" | "mlm_loss" | "nsp_loss" | "perplexity"));
        (bare, greater)
    }
}
