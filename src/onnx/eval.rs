//! `bertpipe eval`: an exported model in ONNX Runtime over one split of a shard folder.
//!
//! Shards are verified against their manifest and the model's vocabulary; rows are read
//! shard by shard on a background thread, sorted by length within each shard and padded per
//! batch (or to a fixed `max_len`), while the runtime works on the previous batch. Results
//! come back in shard order: metrics (the same module as training), per document when rows
//! are windows, sliced by length and noise, the most confident mistakes, throughput and batch
//! latency; `metrics.json`, `predictions.parquet` and pictures in the output folder.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::Serialize;

pub use super::rows::{RowMeta, RowResult};
use super::runtime::{self, Model, Provider};
use crate::contract::columns;
use crate::contract::manifest::DEFAULT_MAX_LEN;
use crate::metrics::{argmax, softmax, ClassificationMetrics, Predictions};
use crate::shards::ShardSet;

/// How a model is evaluated: the flags of `bertpipe eval` and, with the same names and
/// defaults, the keys of an experiment's eval stage. The model, the shards and the baseline
/// (`--model`, `--data`, `--baseline`) the command takes as flags and a stage wires (`model:`,
/// `data:`, `baseline:` name stages or paths).
#[derive(Debug, Clone, PartialEq, clap::Args, Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalSettings {
    /// The split to evaluate (a folder of the shard set).
    #[arg(long, default_value = DEFAULT_SPLIT)]
    pub split: String,
    /// `cpu`, `cuda` or `cuda:N` (CUDA never falls back to the CPU silently).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Rows per ONNX Runtime call.
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE)]
    pub batch_size: usize,
    /// Pad every batch to this length (default: each batch to its longest row, rows sorted
    /// by length).
    #[arg(long, value_name = "N")]
    pub max_len: Option<usize>,
    /// ONNX Runtime intra-op threads (0: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// How many of the most confident mistakes to list.
    #[arg(long, default_value_t = DEFAULT_MISTAKES)]
    pub mistakes: usize,
    /// Fixed upper edges of the length slices in tokens, e.g. 64,128,256,512 (default: the
    /// split's length quartiles, so each slice holds about a quarter of the rows).
    #[arg(long, value_name = "N,N,…", value_delimiter = ',')]
    pub length_edges: Option<Vec<usize>>,
    /// With a baseline: fail when the model loses more than this many accuracy points (on
    /// documents when rows are windows).
    #[arg(long, value_name = "POINTS", default_value_t = super::gate::DEFAULT_MAX_DROP, requires = "baseline")]
    pub max_drop: f64,
    /// Score the documents the pipeline's training splits hold (its manifest's `leakage`)
    /// apart from the clean ones, beside the overall figures (an experiment's eval stage does
    /// so whenever the manifest records leakage).
    #[arg(long)]
    pub exclude_leaked: bool,
}

const DEFAULT_SPLIT: &str = "test";
const DEFAULT_BATCH_SIZE: usize = 32;
const DEFAULT_MISTAKES: usize = 10;

impl Default for EvalSettings {
    fn default() -> EvalSettings {
        EvalSettings {
            split: DEFAULT_SPLIT.into(),
            device: "cpu".into(),
            batch_size: DEFAULT_BATCH_SIZE,
            max_len: None,
            threads: 0,
            mistakes: DEFAULT_MISTAKES,
            length_edges: None,
            max_drop: super::gate::DEFAULT_MAX_DROP,
            exclude_leaked: false,
        }
    }
}

impl EvalSettings {
    /// Values no run can use, by key (`max_drop`, `batch_size`), with what is wanted.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if !(self.max_drop >= 0.0 && self.max_drop.is_finite()) {
            p.push(("max_drop", format!("{}: accuracy points, a number ≥ 0", self.max_drop)));
        }
        if self.batch_size == 0 {
            p.push(("batch_size", "must be at least 1".into()));
        }
        p
    }

    /// The call that evaluates `model` on `data` with these settings.
    pub fn options(
        &self,
        model: PathBuf,
        data: PathBuf,
        baseline: Option<PathBuf>,
        leaked: ScoreLeaked,
    ) -> EvalOptions {
        EvalOptions {
            model,
            data,
            split: self.split.clone(),
            device: self.device.clone(),
            batch_size: self.batch_size,
            pad_to: self.max_len,
            threads: self.threads,
            out: None,
            ort_lib: None,
            quiet: false,
            mistakes: self.mistakes,
            length_edges: self.length_edges.clone(),
            baseline,
            max_drop: self.max_drop,
            exclude_leaked: if self.exclude_leaked { ScoreLeaked::Yes } else { leaked },
        }
    }
}

/// What `eval` was asked to do.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    pub model: PathBuf,
    pub data: PathBuf,
    pub split: String,
    pub device: String,
    pub batch_size: usize,
    /// Pad every batch to this length instead of its longest row.
    pub pad_to: Option<usize>,
    /// Intra-op threads (0: ONNX Runtime's default, one per core).
    pub threads: usize,
    pub out: Option<PathBuf>,
    pub ort_lib: Option<PathBuf>,
    pub quiet: bool,
    /// How many confident mistakes to list.
    pub mistakes: usize,
    /// Fixed upper edges (tokens) of the length slices, e.g. `[64, 128, 256, 512]`; `None`:
    /// the split's own quartiles, so every slice holds about a quarter of the rows on any corpus.
    pub length_edges: Option<Vec<usize>>,
    /// A model to compare with on the same rows (`--baseline`): the report gains a `gate`.
    pub baseline: Option<PathBuf>,
    /// The accuracy points the model may lose against the baseline ([`gate::DEFAULT_MAX_DROP`]).
    pub max_drop: f64,
    /// Whether to score the leaked and the clean documents apart (`--exclude-leaked`).
    pub exclude_leaked: ScoreLeaked,
}

/// Scoring the documents the training splits hold apart from the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreLeaked {
    No,
    /// When the shards' manifest records the split's leakage (the experiment chain).
    IfRecorded,
    /// Always: an error when the manifest records none (`--exclude-leaked`).
    Yes,
}

/// The evaluated split's test leakage, from its manifest: how many of its documents the
/// pipeline's other splits hold (exactly or nearly), and, when asked, the scores of the clean
/// and the leaked documents apart.
#[derive(Debug, Clone, Serialize)]
pub struct EvalLeakage {
    pub against: Vec<String>,
    pub documents: u64,
    pub leaked: u64,
    pub exact: u64,
    pub near: u64,
    pub share: f64,
    pub threshold: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clean: Option<PartScores>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leaked_only: Option<PartScores>,
}

/// The scores of a part of the split's documents (with all their rows).
#[derive(Debug, Clone, Serialize)]
pub struct PartScores {
    pub documents: usize,
    pub rows: usize,
    pub metrics: Option<ClassificationMetrics>,
    /// Windows averaged per document (only when rows are windows).
    pub document_metrics: Option<ClassificationMetrics>,
}

struct EvalBatch {
    rows: Vec<RowMeta>,
    input_ids: Vec<i64>,
    attention_mask: Vec<i64>,
    token_type_ids: Vec<i64>,
    seq: usize,
}

/// Metrics of one slice of the rows.
#[derive(Debug, Clone, Serialize)]
pub struct Slice {
    pub bucket: String,
    pub examples: usize,
    pub accuracy: f64,
    pub f1: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Mistake {
    pub id: String,
    pub label: String,
    pub predicted: String,
    pub confidence: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Throughput {
    pub seconds: f64,
    pub docs_per_second: f64,
    pub rows_per_second: f64,
    pub tokens_per_second: f64,
    /// Tokens including padding, what the model actually computed.
    pub padded_tokens: u64,
    pub tokens: u64,
    pub batches: usize,
    pub batch_latency_ms_p50: f64,
    pub batch_latency_ms_p95: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct EvalReport {
    pub model: String,
    pub data: String,
    pub split: String,
    pub provider: String,
    pub onnxruntime: String,
    /// The model's `precision` metadata (`fp32` for exports that predate it).
    pub precision: String,
    pub rows: usize,
    pub documents: usize,
    /// Rows without a label (predicted, not scored).
    pub unlabelled: usize,
    pub labels: Vec<String>,
    pub metrics: Option<ClassificationMetrics>,
    /// Windows averaged per document (only when rows are windows).
    pub document_metrics: Option<ClassificationMetrics>,
    pub by_length: Vec<Slice>,
    pub by_noise: Vec<Slice>,
    pub mistakes: Vec<Mistake>,
    pub throughput: Throughput,
    pub outputs: Vec<String>,
    /// The experiment and stage keys that made the model (its `bertpipe_chain` metadata, when
    /// `bertpipe run` exported it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chain: Option<serde_json::Value>,
    /// The comparison with `--baseline`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<super::gate::Gate>,
    /// How much of the split the pipeline's training splits hold (when its manifest says).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub leakage: Option<EvalLeakage>,
}

/// A model's `precision` metadata, `fp32` when it has none (exports before int8 and fp16).
pub fn precision_of(model: &Model) -> String {
    model.metadata.get("precision").cloned().unwrap_or_else(|| "fp32".to_string())
}

/// Opens the runtime and the model for `device`.
pub fn open_model(model: &Path, device: &str, threads: usize, ort_lib: Option<&Path>) -> Result<Model> {
    let provider = Provider::parse(device)?;
    let rt = runtime::init(ort_lib)?;
    rt.open(model, provider, threads)
}

/// `bertpipe eval`: open the model and the shards (checked against each other), run every row
/// of the split through the model, score it, and write `metrics.json`, the predictions and the
/// charts.
pub fn run(opts: &EvalOptions) -> Result<EvalReport> {
    if opts.batch_size == 0 {
        bail!("--batch-size must be at least 1");
    }
    if let Some(e) = &opts.length_edges {
        if e.is_empty() || e[0] == 0 || e.windows(2).any(|w| w[0] >= w[1]) {
            bail!("--length-edges must be increasing token counts above 0, e.g. 64,128,256,512 (got {e:?})");
        }
    }
    let mut model = open_model(&opts.model, &opts.device, opts.threads, opts.ort_lib.as_deref())?;
    let names = model.label_names();
    if names.is_empty() {
        bail!("'{}' records no id2label; was it exported by `bertpipe export onnx`?", opts.model.display());
    }
    if opts.max_drop.is_nan() || opts.max_drop < 0.0 {
        bail!("--max-drop must be 0 or more accuracy points (got {})", opts.max_drop);
    }
    // The baseline first: a refused baseline (other vocabulary, other labels) costs no run.
    let mut baseline = match &opts.baseline {
        Some(path) => {
            let b = open_model(path, &opts.device, opts.threads, opts.ort_lib.as_deref())?;
            if b.label_names() != names {
                bail!(
                    "the baseline '{}' has the labels {:?}, the model '{}' {:?}: they cannot be compared",
                    path.display(),
                    b.label_names(),
                    opts.model.display(),
                    names
                );
            }
            Some(b)
        }
        None => None,
    };
    let shards = open_shards(opts, &model)?;
    let recorded = shards.manifest.leakage.get(&opts.split).cloned();
    if opts.exclude_leaked == ScoreLeaked::Yes && recorded.is_none() {
        bail!(
            "--exclude-leaked: the manifest of '{}' records no leakage for `{}` (the pipeline has no other split to compare with, ran with `sink.leakage: off` or as a task array, or predates it); `bertpipe stats --leakage {} --split {} --against TRAIN_SHARDS` measures it",
            opts.data.display(),
            opts.split,
            opts.data.display(),
            opts.split
        );
    }
    let inferred = infer(opts, &mut model, &names, shards)?;
    let results = &inferred.results;
    let scores = score(results, &names, opts.mistakes, opts.length_edges.as_deref());
    let throughput = inferred.throughput(scores.documents);
    let base = match (&mut baseline, &opts.baseline) {
        (Some(b), Some(path)) => {
            let mut o = opts.clone();
            o.model = path.clone();
            let shards = open_shards(&o, b)?;
            Some((infer(&o, b, &names, shards)?, precision_of(b)))
        }
        _ => None,
    };

    let out = opts.out.clone().unwrap_or_else(|| {
        let stem = opts.model.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
        opts.model.with_file_name(format!("{stem}-eval-{}", opts.split))
    });
    std::fs::create_dir_all(&out).with_context(|| format!("could not create '{}'", out.display()))?;
    let mut outputs = vec![out.join("metrics.json").display().to_string()];
    let pred_path = out.join("predictions.parquet");
    write_predictions(&pred_path, results, &names)?;
    outputs.push(pred_path.display().to_string());
    let precision = precision_of(&model);
    let gate = match &base {
        Some((b, base_precision)) => {
            let path = out.join("baseline_predictions.parquet");
            write_predictions(&path, &b.results, &names)?;
            outputs.push(path.display().to_string());
            let edges = scores.length_edges.clone();
            let length_names = length_bucket_names(&edges);
            let length = |r: &RowResult| Some(length_bucket(r.meta.tokens, &edges, &length_names));
            let noise_edges = scores.noise_edges;
            let noise_names = noise_bucket_names(&noise_edges);
            let noise = |r: &RowResult| Some(noise_bucket(r.meta.noise?, noise_edges.as_ref()?, &noise_names));
            let slicing = super::gate::Slicing {
                length: &length,
                length_order: &length_names,
                noise: &noise,
                noise_order: &noise_names,
            };
            let baseline_name = opts.baseline.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
            let sides = super::gate::Sides {
                baseline: &baseline_name,
                baseline_precision: base_precision,
                precision: &precision,
                baseline_docs_per_second: b.throughput(scores.documents).docs_per_second,
                docs_per_second: throughput.docs_per_second,
            };
            Some(super::gate::compare(&b.results, results, &names, &slicing, &sides, opts.max_drop)?)
        }
        None => None,
    };
    if let Some(m) = &scores.metrics {
        outputs.extend(plots(&out, &scores.preds, m, &names)?.into_iter().map(|p| p.display().to_string()));
    }
    let leakage = recorded.map(|l| leakage_of(&l, results, &names, opts));
    let report = EvalReport {
        model: opts.model.display().to_string(),
        data: opts.data.display().to_string(),
        split: opts.split.clone(),
        provider: model.provider.describe(),
        onnxruntime: runtime::init(opts.ort_lib.as_deref())?.version.clone(),
        precision,
        rows: results.len(),
        documents: scores.documents,
        unlabelled: scores.unlabelled,
        labels: names,
        metrics: scores.metrics,
        document_metrics: scores.document_metrics,
        by_length: scores.by_length,
        by_noise: scores.by_noise,
        mistakes: scores.mistakes,
        throughput,
        outputs,
        chain: model.metadata.get("bertpipe_chain").and_then(|c| serde_json::from_str(c).ok()).map(|keys: serde_json::Value| {
            serde_json::json!({"experiment": model.metadata.get("bertpipe_experiment"), "stages": keys})
        }),
        gate,
        leakage,
    };
    let json = serde_json::to_string_pretty(&report)? + "\n";
    crate::contract::write_file_atomic(&out.join("metrics.json"), json.as_bytes())?;
    Ok(report)
}

fn leakage_of(
    l: &crate::contract::manifest::LeakageInfo,
    results: &[RowResult],
    names: &[String],
    opts: &EvalOptions,
) -> EvalLeakage {
    let parts = (opts.exclude_leaked != ScoreLeaked::No).then(|| {
        let leaked: std::collections::HashSet<&str> = l.leaks.iter().map(|d| d.id.as_str()).collect();
        let (dirty, clean): (Vec<RowResult>, Vec<RowResult>) = results
            .iter()
            .cloned()
            .partition(|r| leaked.contains(r.meta.doc_id.as_deref().unwrap_or(r.meta.id.as_str())));
        let part = |rows: Vec<RowResult>| {
            let s = score(&rows, names, 0, opts.length_edges.as_deref());
            PartScores {
                documents: s.documents,
                rows: rows.len(),
                metrics: s.metrics,
                document_metrics: s.document_metrics,
            }
        };
        (part(clean), part(dirty))
    });
    let (clean, leaked_only) = match parts {
        Some((c, d)) => (Some(c), Some(d)),
        None => (None, None),
    };
    EvalLeakage {
        against: l.against.clone(),
        documents: l.documents,
        leaked: l.leaked,
        exact: l.exact,
        near: l.near,
        share: l.share,
        threshold: l.threshold,
        clean,
        leaked_only,
    }
}

/// The shards to evaluate on: classification shards, tokenized with the model's vocabulary,
/// verified against their manifest.
fn open_shards(opts: &EvalOptions, model: &Model) -> Result<ShardSet> {
    let shards = ShardSet::open(&opts.data)?;
    if shards.manifest.task != "classify" {
        bail!(
            "'{}' holds `{}` shards; eval needs classification shards (a pipeline with classify_sequences)",
            opts.data.display(),
            shards.manifest.task
        );
    }
    shards.expect_vocab(&model.vocab(), &format!("the model '{}'", opts.model.display()))?;
    shards.verify()?;
    Ok(shards)
}

/// Every row's probabilities, in the split's order, and what running the model cost.
struct Inferred {
    results: Vec<RowResult>,
    /// Milliseconds per batch.
    latencies: Vec<f64>,
    tokens: u64,
    padded: u64,
    seconds: f64,
}

/// Runs the split through the model: a reader thread reads the shards, sorts each by length
/// and batches it, while the runtime works on the previous batch.
fn infer(opts: &EvalOptions, model: &mut Model, names: &[String], shards: ShardSet) -> Result<Inferred> {
    let max_len: usize = model.metadata.get("max_len").and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_MAX_LEN);
    let pad_id = shards.tokenizer()?.special_ids.pad as i64;
    let total_rows: u64 = shards.shard_rows(&opts.split)?.iter().sum();
    if let Some(p) = opts.pad_to {
        if p > max_len {
            bail!("--max-len {p} is longer than the model's max_len {max_len}");
        }
    }
    let shards = Arc::new(shards);
    let (tx, rx) = crossbeam_channel::bounded::<Result<EvalBatch>>(4);
    let reader = {
        let shards = shards.clone();
        let split = opts.split.clone();
        let (batch_size, pad_to) = (opts.batch_size, opts.pad_to);
        std::thread::spawn(move || {
            if let Err(e) = read_batches(&shards, &split, batch_size, pad_to, max_len, pad_id, &tx) {
                let _ = tx.send(Err(e));
            }
        })
    };

    let progress = crate::contract::progress::bar(
        opts.quiet,
        Some(total_rows),
        4,
        "eval [{elapsed_precise}] {wide_bar:.cyan/blue} {pos}/{len} rows ETA {eta}",
    );
    // The manifest's count is a claim: the capacity is a hint bounded by it, not an allocation.
    let mut results: Vec<RowResult> = Vec::with_capacity(total_rows.min(1 << 20) as usize);
    let mut latencies = Vec::new();
    let (mut tokens, mut padded) = (0u64, 0u64);
    let start = Instant::now();
    for batch in rx {
        let batch = batch?;
        let n = batch.rows.len();
        let t0 = Instant::now();
        let (logits, k) = model.logits(&batch.input_ids, &batch.attention_mask, &batch.token_type_ids, n, batch.seq)?;
        latencies.push(t0.elapsed().as_secs_f64() * 1e3);
        if k != names.len() {
            bail!("the model returned {k} logits per row, but its id2label names {}", names.len());
        }
        tokens += batch.rows.iter().map(|r| r.tokens as u64).sum::<u64>();
        padded += (n * batch.seq) as u64;
        for (i, meta) in batch.rows.into_iter().enumerate() {
            if let Some(l) = meta.label {
                if l < 0 || l as usize >= k {
                    bail!(
                        "row `{}` of split `{}` has label {l}, but the model has {k} classes ({})",
                        meta.id,
                        opts.split,
                        names.join(", ")
                    );
                }
            }
            results.push(RowResult { probs: softmax(&logits[i * k..(i + 1) * k]), meta });
        }
        progress.inc(n as u64);
    }
    reader.join().map_err(|_| anyhow::anyhow!("the shard reader panicked"))?;
    let seconds = start.elapsed().as_secs_f64();
    progress.finish_and_clear();
    results.sort_by_key(|r| r.meta.index);
    Ok(Inferred { results, latencies, tokens, padded, seconds })
}

impl Inferred {
    fn throughput(&self, documents: usize) -> Throughput {
        let mut sorted = self.latencies.clone();
        sorted.sort_by(f64::total_cmp);
        let pct = |q: f64| {
            if sorted.is_empty() {
                0.0
            } else {
                sorted[((sorted.len() - 1) as f64 * q).round() as usize]
            }
        };
        let secs = self.seconds.max(1e-9);
        Throughput {
            seconds: self.seconds,
            docs_per_second: documents as f64 / secs,
            rows_per_second: self.results.len() as f64 / secs,
            tokens_per_second: self.tokens as f64 / secs,
            padded_tokens: self.padded,
            tokens: self.tokens,
            batches: self.latencies.len(),
            batch_latency_ms_p50: pct(0.5),
            batch_latency_ms_p95: pct(0.95),
        }
    }
}

/// What the predictions score: metrics over rows and over documents, per slice, the mistakes.
struct Scores {
    preds: Predictions,
    metrics: Option<ClassificationMetrics>,
    document_metrics: Option<ClassificationMetrics>,
    by_length: Vec<Slice>,
    by_noise: Vec<Slice>,
    mistakes: Vec<Mistake>,
    documents: usize,
    unlabelled: usize,
    /// The length slices' upper edges and the noise quartiles (what the gate slices by too).
    length_edges: Vec<usize>,
    noise_edges: Option<[f32; 3]>,
}

fn score(results: &[RowResult], names: &[String], max_mistakes: usize, length_edges: Option<&[usize]>) -> Scores {
    let labelled: Vec<&RowResult> = results.iter().filter(|r| r.meta.label.is_some()).collect();
    let mut preds = Predictions::new(names.len());
    for r in &labelled {
        preds.push_probs(&r.probs, r.meta.label.unwrap_or(0) as usize);
    }
    let metrics = (!preds.is_empty()).then(|| ClassificationMetrics::compute(&preds, names));
    let windows = results.iter().any(|r| r.meta.doc_id.is_some());
    let doc_ids: Vec<String> =
        labelled.iter().map(|r| r.meta.doc_id.clone().unwrap_or_else(|| r.meta.id.clone())).collect();
    let per_doc = preds.per_document(&doc_ids);
    let document_metrics = (windows && !per_doc.is_empty()).then(|| ClassificationMetrics::compute(&per_doc, names));
    let documents = {
        let mut d: Vec<&str> = results.iter().map(|r| r.meta.doc_id.as_deref().unwrap_or(r.meta.id.as_str())).collect();
        d.sort_unstable();
        d.dedup();
        d.len()
    };

    let edges = match length_edges {
        Some(e) => e.to_vec(),
        None => length_quartiles(labelled.iter().map(|r| r.meta.tokens).collect()),
    };
    let length_names = length_bucket_names(&edges);
    let length_order: Vec<&str> = length_names.iter().map(String::as_str).collect();
    let by_length =
        slices(&labelled, names, |r| Some(length_bucket(r.meta.tokens, &edges, &length_names)), &length_order);
    let noise_edges = quartile_edges(labelled.iter().filter_map(|r| r.meta.noise).collect());
    let noise_labels: Vec<String> = noise_bucket_names(&noise_edges);
    let noise_order: Vec<&str> = noise_labels.iter().map(String::as_str).collect();
    let by_noise = match &noise_edges {
        Some(edges) => {
            slices(&labelled, names, |r| r.meta.noise.map(|x| noise_bucket(x, edges, &noise_labels)), &noise_order)
        }
        None => Vec::new(),
    };

    let mut wrong: Vec<&RowResult> =
        labelled.iter().copied().filter(|r| argmax(&r.probs) != r.meta.label.unwrap_or(0) as usize).collect();
    wrong.sort_by(|a, b| {
        let (ca, cb) = (a.probs[argmax(&a.probs)], b.probs[argmax(&b.probs)]);
        cb.total_cmp(&ca).then(a.meta.index.cmp(&b.meta.index))
    });
    let mistakes = wrong
        .iter()
        .take(max_mistakes)
        .map(|r| {
            let p = argmax(&r.probs);
            Mistake {
                id: r.meta.id.clone(),
                label: names[r.meta.label.unwrap_or(0) as usize].clone(),
                predicted: names[p].clone(),
                confidence: r.probs[p],
                text: r.meta.text.clone(),
            }
        })
        .collect();
    let unlabelled = results.len() - labelled.len();
    Scores {
        preds,
        metrics,
        document_metrics,
        by_length,
        by_noise,
        mistakes,
        documents,
        unlabelled,
        length_edges: edges,
        noise_edges,
    }
}

#[allow(clippy::too_many_arguments)]
fn read_batches(
    shards: &ShardSet,
    split: &str,
    batch_size: usize,
    pad_to: Option<usize>,
    max_len: usize,
    pad_id: i64,
    tx: &crossbeam_channel::Sender<Result<EvalBatch>>,
) -> Result<()> {
    let mut index = 0usize;
    for shard in 0..shards.shard_rows(split)?.len() {
        let mut rows = Vec::new();
        for b in shards.shard_batches(split, shard, None)? {
            let b = b?;
            let shown = || shards.shard_shown(split, shard);
            let noise = b.column_by_name("noise_score").map(|c| columns::floats(c, "noise_score")).transpose();
            let text = b.column_by_name("text").map(|c| columns::strings(c, "text")).transpose();
            let (noise, mut text) = (noise.with_context(shown)?, text.with_context(shown)?);
            let read = crate::shards::classify_rows(&b, shards.vocab_size()).with_context(shown)?;
            for (i, row) in read.into_iter().enumerate() {
                if row.input_ids.len() > max_len || pad_to.is_some_and(|p| row.input_ids.len() > p) {
                    bail!(
                        "row `{}` of split `{split}` has {} tokens, longer than {} {}",
                        row.id,
                        row.input_ids.len(),
                        if pad_to.is_some() { "--max-len" } else { "the model's max_len" },
                        pad_to.unwrap_or(max_len)
                    );
                }
                let meta = RowMeta {
                    index,
                    id: row.id,
                    label: row.label,
                    doc_id: row.doc_id,
                    chunk: row.chunk,
                    tokens: row.input_ids.len(),
                    noise: noise.as_ref().and_then(|c| c[i]),
                    text: text.as_mut().and_then(|c| c[i].take()),
                };
                index += 1;
                rows.push((meta, row.input_ids, row.token_type_ids));
            }
        }
        // Longest first within the shard: similar lengths share a batch, little padding.
        rows.sort_by_key(|r| std::cmp::Reverse(r.0.tokens));
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            let chunk: Vec<_> = rows.by_ref().take(batch_size).collect();
            let seq = pad_to.unwrap_or_else(|| chunk.iter().map(|r| r.1.len()).max().unwrap_or(1)).max(1);
            let mut b = EvalBatch {
                rows: Vec::with_capacity(chunk.len()),
                input_ids: Vec::with_capacity(chunk.len() * seq),
                attention_mask: Vec::with_capacity(chunk.len() * seq),
                token_type_ids: Vec::with_capacity(chunk.len() * seq),
                seq,
            };
            for (meta, ids, types) in chunk {
                for j in 0..seq {
                    let real = j < ids.len();
                    b.input_ids.push(if real { ids[j] as i64 } else { pad_id });
                    b.token_type_ids.push(if real { types[j] as i64 } else { 0 });
                    b.attention_mask.push(real as i64);
                }
                b.rows.push(meta);
            }
            if tx.send(Ok(b)).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The upper edges of the length slices at the rows' token-length quartiles (Q1, median, Q3;
/// the lower of two middle values, so edges are lengths that occur). Equal edges merge: on a
/// corpus where most rows have one length there are fewer, fuller slices, never empty ones.
fn length_quartiles(mut tokens: Vec<usize>) -> Vec<usize> {
    if tokens.is_empty() {
        return Vec::new();
    }
    tokens.sort_unstable();
    let q = |p: f64| tokens[((tokens.len() - 1) as f64 * p).floor() as usize];
    let mut edges = vec![q(0.25), q(0.5), q(0.75)];
    edges.dedup();
    if edges.last() == tokens.last() {
        edges.pop();
    }
    edges
}

/// Slice names for upper edges `e1 < e2 < …`: `1-e1`, `e1+1-e2`, …, `>eN`.
fn length_bucket_names(edges: &[usize]) -> Vec<String> {
    let mut names = Vec::new();
    let mut lo = 1;
    for &e in edges {
        names.push(if lo == e { format!("{e}") } else { format!("{lo}-{e}") });
        lo = e + 1;
    }
    names.push(match edges.last() {
        Some(e) => format!(">{e}"),
        None => "all".to_string(),
    });
    names
}

/// A row's length slice (token count with [CLS]/[SEP]).
fn length_bucket(tokens: usize, edges: &[usize], names: &[String]) -> String {
    let i = edges.iter().position(|&e| tokens <= e).unwrap_or(edges.len());
    names[i].clone()
}

/// The split's noise-score quartiles (Q1, median, Q3), when the shards carry the score.
fn quartile_edges(mut xs: Vec<f32>) -> Option<[f32; 3]> {
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f32::total_cmp);
    let q = |p| crate::clean::filter::quantile_linear(&xs, p);
    Some([q(0.25), q(0.5), q(0.75)])
}

fn noise_bucket_names(edges: &Option<[f32; 3]>) -> Vec<String> {
    match edges {
        Some([a, b, c]) => {
            vec![format!("Q1 <={a:.2}"), format!("Q2 <={b:.2}"), format!("Q3 <={c:.2}"), format!("Q4 >{c:.2}")]
        }
        None => Vec::new(),
    }
}

fn noise_bucket(x: f32, edges: &[f32; 3], names: &[String]) -> String {
    let i = edges.iter().position(|&e| x <= e).unwrap_or(3);
    names[i].clone()
}

fn slices(
    rows: &[&RowResult],
    names: &[String],
    bucket: impl Fn(&RowResult) -> Option<String>,
    order: &[&str],
) -> Vec<Slice> {
    let mut groups: std::collections::BTreeMap<String, Predictions> = Default::default();
    for r in rows {
        if let Some(b) = bucket(r) {
            groups
                .entry(b)
                .or_insert_with(|| Predictions::new(names.len()))
                .push_probs(&r.probs, r.meta.label.unwrap_or(0) as usize);
        }
    }
    order
        .iter()
        .filter_map(|b| {
            let p = groups.get(*b)?;
            let m = ClassificationMetrics::compute(p, names);
            Some(Slice { bucket: b.to_string(), examples: p.len(), accuracy: m.accuracy, f1: m.f1 })
        })
        .collect()
}

/// `predictions.parquet`: `id`, `label`, `prediction`, `predicted_label`, `confidence`,
/// `probabilities` (list<float32>, in label order), and `doc_id` / `chunk` for windows.
fn write_predictions(path: &Path, results: &[RowResult], names: &[String]) -> Result<()> {
    use arrow_array::builder::{Float32Builder, Int32Builder, Int64Builder, ListBuilder, StringBuilder};
    use arrow_array::{ArrayRef, RecordBatch};
    let mut id = StringBuilder::new();
    let mut label = Int64Builder::new();
    let mut pred = Int64Builder::new();
    let mut pred_name = StringBuilder::new();
    let mut conf = Float32Builder::new();
    let mut probs = ListBuilder::new(Float32Builder::new());
    let mut doc = StringBuilder::new();
    let mut chunk = Int32Builder::new();
    let windows = results.iter().any(|r| r.meta.doc_id.is_some());
    for r in results {
        let p = argmax(&r.probs);
        id.append_value(&r.meta.id);
        label.append_option(r.meta.label);
        pred.append_value(p as i64);
        pred_name.append_value(&names[p]);
        conf.append_value(r.probs[p] as f32);
        for &x in &r.probs {
            probs.values().append_value(x as f32);
        }
        probs.append(true);
        doc.append_option(r.meta.doc_id.as_deref());
        chunk.append_option(r.meta.chunk);
    }
    let mut cols: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(id.finish())),
        ("label", Arc::new(label.finish())),
        ("prediction", Arc::new(pred.finish())),
        ("predicted_label", Arc::new(pred_name.finish())),
        ("confidence", Arc::new(conf.finish())),
        ("probabilities", Arc::new(probs.finish())),
    ];
    if windows {
        cols.push(("doc_id", Arc::new(doc.finish())));
        cols.push(("chunk", Arc::new(chunk.finish())));
    }
    let batch = RecordBatch::try_from_iter(cols)?;
    let mut buf = Vec::new();
    {
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
                "id2label".to_string(),
                serde_json::to_string(names)?,
            )]))
            .build();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), Some(props))?;
        w.write(&batch)?;
        w.close()?;
    }
    crate::contract::write_file_atomic(path, &buf)
}

/// Confusion matrix, ROC curve(s) and the reliability diagram, as SVG + PNG.
fn plots(dir: &Path, preds: &Predictions, m: &ClassificationMetrics, names: &[String]) -> Result<Vec<PathBuf>> {
    use crate::stats::plot;
    let mut files = plot::confusion_chart(dir, "confusion", "Confusion matrix", names, &m.confusion)?;
    let k = preds.num_labels;
    let classes: Vec<usize> = if k == 2 { vec![1] } else { (0..k).collect() };
    let mut roc = Vec::new();
    for c in classes {
        let scores: Vec<f64> = (0..preds.len()).map(|i| preds.probs(i)[c]).collect();
        let positive: Vec<bool> = preds.labels.iter().map(|&l| l == c).collect();
        if positive.iter().all(|&p| p) || !positive.iter().any(|&p| p) {
            continue;
        }
        let auc = crate::metrics::roc_auc_binary(&scores, &positive).unwrap_or(f64::NAN);
        let name = if k == 2 { format!("AUC {auc:.4}") } else { format!("{} AUC {auc:.4}", names[c]) };
        roc.push((name, crate::metrics::roc_curve(&scores, &positive)));
    }
    roc.push(("chance".to_string(), vec![(0.0, 0.0), (1.0, 1.0)]));
    files.extend(plot::xy_chart(dir, "roc", "ROC curve", "false positive rate", "true positive rate", &roc, true)?);
    let cal = calibration(preds, 10);
    let pts: Vec<(f64, f64)> = cal.iter().map(|b| (b.confidence, b.accuracy)).collect();
    let series = vec![("model".to_string(), pts), ("perfectly calibrated".to_string(), vec![(0.0, 0.0), (1.0, 1.0)])];
    files.extend(plot::xy_chart(
        dir,
        "calibration",
        "Reliability diagram (10 confidence bins)",
        "mean confidence",
        "accuracy",
        &series,
        true,
    )?);
    Ok(files)
}

/// One confidence bin of the reliability diagram.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CalibrationBin {
    pub confidence: f64,
    pub accuracy: f64,
    pub examples: usize,
}

/// Predictions binned by the predicted class's probability (`bins` equal-width bins over
/// [0, 1]); empty bins left out.
pub fn calibration(p: &Predictions, bins: usize) -> Vec<CalibrationBin> {
    let mut acc = vec![(0.0f64, 0usize, 0usize); bins];
    for i in 0..p.len() {
        let pred = p.predicted(i);
        let c = p.probs(i)[pred];
        let b = ((c * bins as f64) as usize).min(bins - 1);
        acc[b].0 += c;
        acc[b].1 += (pred == p.labels[i]) as usize;
        acc[b].2 += 1;
    }
    acc.into_iter()
        .filter(|a| a.2 > 0)
        .map(|(c, right, n)| CalibrationBin {
            confidence: c / n as f64,
            accuracy: right as f64 / n as f64,
            examples: n,
        })
        .collect()
}

/// The report as a table for the terminal.
/// `leakage  0.52% of test (13 of 2,500 documents) repeat train, unsup: 3 exact, 10 near (Jaccard ≥ 0.8)`.
pub fn leakage_line(l: &EvalLeakage) -> String {
    format!(
        "leakage    {:.2}% of the documents ({} of {}) repeat {}: {} exact, {} near (Jaccard ≥ {})",
        100.0 * l.share,
        l.leaked,
        l.documents,
        l.against.join(", "),
        l.exact,
        l.near,
        l.threshold
    )
}

pub fn format_report(r: &EvalReport) -> String {
    let mut out = Vec::new();
    out.push(format!(
        "eval `{}` of {}: {} rows, {} documents{}; {} model on {} (ONNX Runtime {})",
        r.split,
        r.data,
        r.rows,
        r.documents,
        if r.unlabelled > 0 { format!(" ({} unlabelled, not scored)", r.unlabelled) } else { String::new() },
        r.precision,
        r.provider,
        r.onnxruntime
    ));
    let line = |name: &str, m: &ClassificationMetrics| {
        format!(
            "{name:<10} accuracy {:.4}  precision {:.4}  recall {:.4}  f1 {:.4}  roc_auc {}  loss {:.4}  ({} examples)",
            m.accuracy,
            m.precision,
            m.recall,
            m.f1,
            m.roc_auc.map(|x| format!("{x:.4}")).unwrap_or("-".into()),
            m.loss,
            m.examples
        )
    };
    if let Some(m) = &r.metrics {
        out.push(line("rows", m));
        if let Some(d) = &r.document_metrics {
            out.push(line("documents", d));
        }
        if let Some(l) = &r.leakage {
            out.push(leakage_line(l));
            for (name, part) in [("clean", &l.clean), ("leaked", &l.leaked_only)] {
                if let Some(p) = part {
                    // Documents when rows are windows, as the headline's second line.
                    match p.document_metrics.as_ref().or(p.metrics.as_ref()) {
                        Some(m) => out.push(line(name, m)),
                        None => out.push(format!("{name:<10} no labelled rows ({} documents)", p.documents)),
                    }
                }
            }
        }
        out.push(String::new());
        let corner = "true \\ predicted";
        let w0 = r.labels.iter().map(|n| n.chars().count()).max().unwrap_or(0).max(corner.len());
        let w = r.labels.iter().map(|n| n.chars().count()).max().unwrap_or(0).max(6) + 2;
        let mut header = format!("{corner:<w0$}");
        for n in &r.labels {
            header.push_str(&format!("{n:>w$}"));
        }
        out.push(header);
        for (i, row) in m.confusion.iter().enumerate() {
            let mut s = format!("{:<w0$}", r.labels[i]);
            for v in row {
                s.push_str(&format!("{v:>w$}"));
            }
            out.push(s);
        }
        if r.labels.len() > 2 {
            for c in &m.per_class {
                out.push(format!(
                    "  {:<12} precision {:.4}  recall {:.4}  f1 {:.4}  support {}",
                    c.label, c.precision, c.recall, c.f1, c.support
                ));
            }
        }
        for (title, slices) in [("by length (tokens)", &r.by_length), ("by noise score", &r.by_noise)] {
            if slices.is_empty() {
                continue;
            }
            out.push(String::new());
            out.push(format!("{title:<20} {:>8} {:>9} {:>7}", "examples", "accuracy", "f1"));
            for s in slices.iter() {
                out.push(format!("  {:<18} {:>8} {:>9.4} {:>7.4}", s.bucket, s.examples, s.accuracy, s.f1));
            }
        }
        if !r.mistakes.is_empty() {
            out.push(String::new());
            out.push("most confident mistakes:".to_string());
            for m in &r.mistakes {
                let text = m
                    .text
                    .as_ref()
                    .map(|t| {
                        let t: String = t.chars().take(90).collect();
                        format!("  \"{t}…\"")
                    })
                    .unwrap_or_default();
                out.push(format!("  {} ({} → {}, {:.3}){text}", m.id, m.label, m.predicted, m.confidence));
            }
        }
    }
    let t = &r.throughput;
    out.push(String::new());
    out.push(format!(
        "{:.1} docs/s, {:.0} tokens/s ({:.0}% padding), {} batches: latency p50 {:.1} ms, p95 {:.1} ms, {:.1}s in all",
        t.docs_per_second,
        t.tokens_per_second,
        100.0 * (1.0 - t.tokens as f64 / t.padded_tokens.max(1) as f64),
        t.batches,
        t.batch_latency_ms_p50,
        t.batch_latency_ms_p95,
        t.seconds
    ));
    if let Some(g) = &r.gate {
        out.extend(super::gate::format(g));
    }
    out.push(format!("wrote {}", r.outputs.first().map(|s| s.as_str()).unwrap_or("")));
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calibration_bins_by_confidence_and_counts_hits() {
        let mut p = Predictions::new(2);
        p.push_probs(&[0.95, 0.05], 0); // right, 0.95
        p.push_probs(&[0.05, 0.95], 0); // wrong, 0.95
        p.push_probs(&[0.4, 0.6], 1); // right, 0.6
        let bins = calibration(&p, 10);
        assert_eq!(bins.len(), 2);
        assert_eq!((bins[0].examples, bins[0].accuracy), (1, 1.0));
        assert!((bins[0].confidence - 0.6).abs() < 1e-12);
        assert_eq!((bins[1].examples, bins[1].accuracy), (2, 0.5));
    }

    #[test]
    fn length_and_noise_buckets() {
        // Fixed edges, as `--length-edges 64,128,256,512`.
        let fixed = [64, 128, 256, 512];
        let names = length_bucket_names(&fixed);
        assert_eq!(names, ["1-64", "65-128", "129-256", "257-512", ">512"]);
        let b = |t| length_bucket(t, &fixed, &names);
        assert_eq!((b(64), b(65), b(512), b(513)), ("1-64".into(), "65-128".into(), "257-512".into(), ">512".into()));
        // Quartiles of the data: short texts get slices of their own, each about a quarter.
        let tokens: Vec<usize> = (0..100).map(|i| 5 + i % 20).collect();
        let edges = length_quartiles(tokens.clone());
        assert_eq!(edges, [9, 14, 19]);
        let names = length_bucket_names(&edges);
        for name in &names {
            let n = tokens.iter().filter(|&&t| &length_bucket(t, &edges, &names) == name).count();
            assert!((20..=30).contains(&n), "{name}: {n} of 100");
        }
        // One length everywhere: one slice, not four (three of them empty).
        assert_eq!(length_bucket_names(&length_quartiles(vec![7; 10])), ["all"]);
        assert_eq!(length_bucket_names(&length_quartiles(vec![7, 7, 7, 9])), ["1-7", ">7"]);
        let edges = quartile_edges(vec![4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(edges, [1.75, 2.5, 3.25]);
        let names = noise_bucket_names(&Some(edges));
        assert_eq!(noise_bucket(1.0, &edges, &names), names[0]);
        assert_eq!(noise_bucket(3.25, &edges, &names), names[2]);
        assert_eq!(noise_bucket(9.0, &edges, &names), names[3]);
        assert!(quartile_edges(Vec::new()).is_none());
    }
}
