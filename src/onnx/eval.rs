//! `bertpipe eval`: an exported model in ONNX Runtime over one split of a shard folder, at any
//! size, in one process or as a task array.
//!
//! Inference ([`super::infer`]) writes `predictions.parquet` shard by shard; the report is then
//! computed from that file ([`super::score`]): metrics (the same tallies as training), per
//! document when rows are windows, sliced by length and noise, calibration, the most confident
//! mistakes, rows whose logits are not finite, throughput and batch latency, and with a baseline
//! the gate ([`super::gate`]). The rows' labels are scored as the model's classes matched by
//! name (its `id2label` and the shards' label names, [`crate::shards::match_labels`]), and
//! label names the model has no class for are refused before any inference. A task array
//! (`--task-index I --task-count N`) writes each task's part under `OUT/tasks/NNNNN/`;
//! `bertpipe eval merge OUT` joins the parts' predictions in the split's order and scores them
//! exactly as one process would.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::infer::{flip_order, index_order, mistake_order, Listed, Part, RunStats, Session, NONFINITE_LISTED};
pub use super::infer::{open_model, precision_of};
use super::predictions::{row_groups, PredictionsWriter, BASELINE_PREDICTIONS, PREDICTIONS};
pub use super::score::{PartScores, Slice};
use crate::contract::manifest::TASKS_DIR;
pub use crate::metrics::CalibrationBin;
use crate::metrics::ClassificationMetrics;
use crate::pipeline::tasks::TaskSpec;

/// A task's record of its part, written last: a task folder without it did not finish.
pub const PART: &str = "part.json";

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
    /// With a baseline: fail on a loss above --max-drop whatever its p-value (by default only
    /// when McNemar's exact test gives p < --gate-alpha: a loss the sample cannot tell from noise
    /// passes).
    #[arg(long, requires = "baseline")]
    pub strict_gate: bool,
    /// With a baseline: the p-value below which a loss above --max-drop fails the gate.
    #[arg(long, value_name = "P", default_value_t = super::gate::DEFAULT_ALPHA, requires = "baseline")]
    pub gate_alpha: f64,
    /// Finish with exit 0 even when some rows' logits are NaN or infinite (they are counted,
    /// listed and left out of the metrics either way).
    #[arg(long)]
    pub allow_nonfinite: bool,
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
            strict_gate: false,
            gate_alpha: super::gate::DEFAULT_ALPHA,
            allow_nonfinite: false,
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
        if !(self.gate_alpha > 0.0 && self.gate_alpha < 1.0) {
            p.push(("gate_alpha", format!("{}: a p-value between 0 and 1", self.gate_alpha)));
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
            rule: super::gate::GateRule { strict: self.strict_gate, alpha: self.gate_alpha },
            allow_nonfinite: self.allow_nonfinite,
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
    /// The accuracy points the model may lose against the baseline ([`super::gate::DEFAULT_MAX_DROP`]).
    pub max_drop: f64,
    /// When a loss above `max_drop` fails the gate.
    pub rule: super::gate::GateRule,
    /// Rows with non-finite logits do not fail the run.
    pub allow_nonfinite: bool,
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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
    /// Inference seconds (summed over a task array's tasks): docs/s is per process.
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

/// Rows whose logits are not all finite: left out of every metric, counted, the first listed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NonFinite {
    pub rows: usize,
    /// The first (in the split's order), at most 100; all have `finite = false` in the
    /// predictions file.
    pub ids: Vec<String>,
    /// `--allow-nonfinite`: they do not fail the run.
    pub allowed: bool,
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
    pub nonfinite: NonFinite,
    /// The model's class names: the rows' labels are scored as these classes, matched by name
    /// ([`crate::shards::match_labels`]).
    pub labels: Vec<String>,
    /// How the shards' labels were matched to the model's classes when not plainly (by name in
    /// another order, or by number where a side has no names).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_match: Option<String>,
    pub metrics: Option<ClassificationMetrics>,
    /// Windows averaged per document (only when rows are windows).
    pub document_metrics: Option<ClassificationMetrics>,
    pub by_length: Vec<Slice>,
    pub by_noise: Vec<Slice>,
    /// The reliability diagram's bins (10 equal-width bins of the predicted class's probability).
    pub calibration: Vec<CalibrationBin>,
    pub mistakes: Vec<Mistake>,
    pub throughput: Throughput,
    /// The processes that ran inference (a task array's tasks; 1 otherwise).
    pub tasks: u32,
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

impl EvalReport {
    /// Why the run should end with a failure: rows with non-finite logits (unless allowed), a
    /// failed gate. `None` when it passed.
    pub fn failure(&self) -> Option<String> {
        let mut why = Vec::new();
        if self.nonfinite.rows > 0 && !self.nonfinite.allowed {
            why.push(format!(
                "{} of {} rows have NaN or infinite logits (first: {}); they are left out of the metrics and marked `finite = false` in predictions.parquet (--allow-nonfinite accepts them)",
                self.nonfinite.rows,
                self.rows,
                self.nonfinite.ids.iter().take(5).map(|s| format!("`{s}`")).collect::<Vec<_>>().join(", ")
            ));
        }
        if let Some(g) = self.gate.as_ref().filter(|g| !g.passed) {
            why.push(format!(
                "the model loses {:.2} accuracy points on {} against the baseline {} (--max-drop {}, McNemar p = {:.3}{}): agreement {:.2}%, {} flipped",
                g.drop,
                g.level,
                g.baseline,
                g.max_drop,
                g.mcnemar_p,
                if g.rule == "strict" { ", --strict-gate".to_string() } else { format!(" < {}", g.alpha) },
                100.0 * g.agreement,
                g.flipped
            ));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

/// `bertpipe eval` in one process: the split through the model into `OUT/predictions.parquet`,
/// then scored into `OUT/metrics.json` and the charts.
pub fn run(opts: &EvalOptions) -> Result<EvalReport> {
    let mut session = Session::open(opts)?;
    let out = out_dir(opts);
    std::fs::create_dir_all(&out).with_context(|| format!("could not create '{}'", out.display()))?;
    let part = session.infer(&out, TaskSpec { index: 0, count: 1 })?;
    finish(&out, &[part])
}

/// The output folder: `--out`, else `MODEL-eval-SPLIT` beside the model.
pub fn out_dir(opts: &EvalOptions) -> PathBuf {
    opts.out.clone().unwrap_or_else(|| {
        let stem = opts.model.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
        opts.model.with_file_name(format!("{stem}-eval-{}", opts.split))
    })
}

/// A task's folder: `OUT/tasks/NNNNN`.
pub fn task_dir(out: &Path, index: u32) -> PathBuf {
    out.join(TASKS_DIR).join(format!("{index:05}"))
}

/// One task of an array: its contiguous shards into `OUT/tasks/NNNNN/`, with `part.json` last.
pub fn run_task(opts: &EvalOptions, task: TaskSpec) -> Result<Part> {
    let mut session = Session::open(opts)?;
    let out = out_dir(opts);
    let dir = task_dir(&out, task.index);
    // A task run again starts its folder over; a part.json left there would vouch for files
    // this run is about to replace.
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("could not clear '{}'", dir.display()))?;
    }
    // A merged report no longer holds once a task runs again: merge again.
    let merged = out.join("metrics.json");
    if merged.exists() {
        std::fs::remove_file(&merged).with_context(|| format!("could not remove '{}'", merged.display()))?;
    }
    let part = session.infer(&dir, task)?;
    crate::contract::write_file_atomic(&dir.join(PART), (serde_json::to_string_pretty(&part)? + "\n").as_bytes())?;
    Ok(part)
}

/// The fingerprints the task parts in `OUT/tasks/` recorded (to tell a stale array from today's).
pub fn recorded_fingerprints(out: &Path) -> std::collections::BTreeSet<String> {
    let mut seen = std::collections::BTreeSet::new();
    for e in std::fs::read_dir(out.join(TASKS_DIR)).into_iter().flatten().flatten() {
        if let Some(p) = std::fs::read(e.path().join(PART)).ok().and_then(|b| serde_json::from_slice::<Part>(&b).ok()) {
            seen.insert(p.header.fingerprint);
        }
    }
    seen
}

/// The fingerprint an evaluation with `opts` records (see [`super::infer::Header`]).
pub fn fingerprint(opts: &EvalOptions) -> Result<String> {
    super::infer::fingerprint(opts, &crate::shards::ShardSet::open_with(&opts.data, opts.quiet)?)
}

/// `bertpipe eval merge OUT`: every task's part, checked to be one evaluation and complete,
/// joined in the split's order into `OUT/predictions.parquet` and scored.
pub fn merge(out: &Path) -> Result<EvalReport> {
    let parts = read_parts(out)?;
    for (name, have_baseline) in [(PREDICTIONS, true), (BASELINE_PREDICTIONS, parts[0].header.baseline.is_some())] {
        if !have_baseline {
            continue;
        }
        let h = &parts[0].header;
        let mut w = PredictionsWriter::create(&out.join(name), &h.labels, h.layout)?;
        for p in &parts {
            for g in row_groups(&task_dir(out, p.task.index).join(name))? {
                w.write_group(&g?)?;
            }
        }
        let rows = w.finish()?;
        if rows != h.rows {
            bail!("the tasks' {name} hold {rows} rows, the split {}", h.rows);
        }
    }
    finish(out, &parts)
}

fn read_parts(out: &Path) -> Result<Vec<Part>> {
    let tasks = out.join(TASKS_DIR);
    let mut parts: Vec<Part> = Vec::new();
    let mut unfinished = Vec::new();
    let entries = std::fs::read_dir(&tasks)
        .with_context(|| format!("'{}' holds no eval task outputs (expected {TASKS_DIR}/00000, …)", out.display()))?;
    for e in entries {
        let e = e?;
        let name = e.file_name().to_string_lossy().to_string();
        if !crate::contract::manifest::is_task_name(&name) {
            bail!("'{}' is not a task folder (tasks/NNNNN, five digits); move it away", e.path().display());
        }
        let path = e.path().join(PART);
        match std::fs::read(&path) {
            Ok(b) => parts
                .push(serde_json::from_slice(&b).with_context(|| format!("'{}' is not a task part", path.display()))?),
            Err(_) => unfinished.push(name),
        }
    }
    parts.sort_by_key(|p| p.task.index);
    let Some(first) = parts.first() else {
        bail!("'{}' holds no finished eval task (no {TASKS_DIR}/NNNNN/{PART})", out.display());
    };
    let count = first.task.count;
    // Paths may differ between machines; what they hold is in the fingerprint.
    let shared = |h: &super::infer::Header| -> Result<serde_json::Value> {
        let mut v = serde_json::to_value(h)?;
        for path in ["model", "data", "baseline"] {
            v[path] = serde_json::Value::Null;
        }
        Ok(v)
    };
    let want = shared(&first.header)?;
    for p in &parts {
        if p.task.count != count {
            bail!(
                "task {} ran as one of {} tasks, task {} as one of {count}: not one array",
                p.task.index,
                p.task.count,
                first.task.index
            );
        }
        if shared(&p.header)? != want {
            bail!(
                "task {} evaluated another model, data or settings than task {} (fingerprint {} vs {}): not one evaluation",
                p.task.index,
                first.task.index,
                &p.header.fingerprint[..12],
                &first.header.fingerprint[..12]
            );
        }
    }
    let have: HashSet<u32> = parts.iter().map(|p| p.task.index).collect();
    let missing: Vec<String> = (0..count).filter(|i| !have.contains(i)).map(|i| i.to_string()).collect();
    if !missing.is_empty() {
        bail!(
            "{} of {count} eval tasks have not finished: {} (run them with --task-index I --task-count {count}){}",
            missing.len(),
            missing.join(", "),
            if unfinished.is_empty() {
                String::new()
            } else {
                format!("; started but not finished: {}", unfinished.join(", "))
            }
        );
    }
    Ok(parts)
}

/// Scores `OUT/predictions.parquet` (and the baseline's) with what the parts recorded, and
/// writes `metrics.json` and the charts.
fn finish(out: &Path, parts: &[Part]) -> Result<EvalReport> {
    let h = &parts[0].header;
    let names = &h.labels;
    let pred = out.join(PREDICTIONS);
    let edges = super::score::edges(&pred, h.length_edges.as_deref())?;
    let leaked: Option<HashSet<String>> =
        h.leakage.as_ref().filter(|_| h.score_parts).map(|l| l.leaks.iter().map(|d| d.id.clone()).collect());
    let scores = super::score::score(&pred, names, &edges, h.layout.windows, leaked.as_ref())?;
    let throughput = throughput_of(parts.iter().map(|p| &p.model), scores.documents, scores.rows);
    let mut outputs = vec![out.join("metrics.json").display().to_string(), pred.display().to_string()];
    let gate = match (&h.baseline, &h.baseline_precision) {
        (Some(baseline), Some(base_precision)) => {
            let base_pred = out.join(BASELINE_PREDICTIONS);
            outputs.push(base_pred.display().to_string());
            let counts = super::score::compare(&super::score::GateInput {
                model: &pred,
                baseline: &base_pred,
                names,
                edges: &edges,
                windows: h.layout.windows,
            })?;
            let base_runs = parts.iter().filter_map(|p| p.baseline.as_ref());
            let sides = super::gate::Sides {
                baseline,
                baseline_precision: base_precision,
                precision: &h.precision,
                baseline_docs_per_second: throughput_of(base_runs, scores.documents, scores.rows).docs_per_second,
                docs_per_second: throughput.docs_per_second,
            };
            let flips = merged(parts, |p| &p.flips, super::gate::LISTED, flip_order);
            Some(super::gate::finish(counts, &sides, flips, h.max_drop, h.rule))
        }
        _ => None,
    };
    if let Some(m) = &scores.metrics {
        outputs.extend(plots(out, m, &scores, names)?.into_iter().map(|p| p.display().to_string()));
    }
    outputs.push(out.join(crate::page::REPORT_PAGE).display().to_string());
    let leakage = h.leakage.as_ref().map(|l| {
        let (clean, leaked_only) = match scores.parts.clone() {
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
    });
    let mut providers: Vec<String> = parts.iter().map(|p| p.provider.clone()).collect();
    providers.dedup();
    let report = EvalReport {
        model: h.model.clone(),
        data: h.data.clone(),
        split: h.split.clone(),
        provider: providers.join(", "),
        onnxruntime: h.onnxruntime.clone(),
        precision: h.precision.clone(),
        rows: scores.rows,
        documents: scores.documents,
        unlabelled: scores.unlabelled,
        nonfinite: NonFinite {
            rows: scores.nonfinite,
            ids: merged(parts, |p| &p.nonfinite_ids, NONFINITE_LISTED, index_order),
            allowed: h.allow_nonfinite,
        },
        labels: names.clone(),
        label_match: h.label_match.clone(),
        metrics: scores.metrics,
        document_metrics: scores.document_metrics,
        by_length: scores.by_length,
        by_noise: scores.by_noise,
        calibration: scores.calibration,
        mistakes: merged(parts, |p| &p.mistakes, h.mistakes, mistake_order),
        throughput,
        tasks: parts[0].task.count,
        outputs,
        chain: h.chain.clone(),
        gate,
        leakage,
    };
    let json = serde_json::to_string_pretty(&report)? + "\n";
    crate::contract::write_file_atomic(&out.join("metrics.json"), json.as_bytes())?;
    // The page is a view of metrics.json: one that cannot be written is said, and the
    // evaluation stands.
    if let Err(e) = write_page(out, &report) {
        eprintln!("warning: {e:#}");
    }
    Ok(report)
}

/// Writes `OUT/report.html` from the report as `metrics.json` holds it and the charts in `OUT`.
fn write_page(out: &Path, r: &EvalReport) -> Result<()> {
    let mut page = crate::page::Page::new(format!("Evaluation: split `{}`", r.split));
    page.meta(format!("model {}", r.model));
    page.meta(format!("written to {}", out.display()));
    crate::page::eval_section(&mut page, &serde_json::to_value(r)?, out)?;
    page.write(&out.join(crate::page::REPORT_PAGE))
}

/// The parts' lists joined and cut as one process would have cut them.
fn merged<T: Clone>(
    parts: &[Part],
    list: impl Fn(&Part) -> &Vec<Listed<T>>,
    n: usize,
    order: impl Fn(&Listed<T>, &Listed<T>) -> std::cmp::Ordering,
) -> Vec<T> {
    let all: Vec<Listed<T>> = parts.iter().flat_map(|p| list(p).iter().cloned()).collect();
    super::score::first(all, n, order).into_iter().map(|l| l.item).collect()
}

fn throughput_of<'a>(runs: impl Iterator<Item = &'a RunStats>, documents: usize, rows: usize) -> Throughput {
    let (mut latencies, mut seconds, mut tokens, mut padded) = (Vec::new(), 0.0, 0u64, 0u64);
    for r in runs {
        latencies.extend_from_slice(&r.latencies_ms);
        seconds += r.seconds;
        tokens += r.tokens;
        padded += r.padded;
    }
    let batches = latencies.len();
    latencies.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        if latencies.is_empty() {
            0.0
        } else {
            latencies[((latencies.len() - 1) as f64 * q).round() as usize]
        }
    };
    let secs = f64::max(seconds, 1e-9);
    Throughput {
        seconds,
        docs_per_second: documents as f64 / secs,
        rows_per_second: rows as f64 / secs,
        tokens_per_second: tokens as f64 / secs,
        padded_tokens: padded,
        tokens,
        batches,
        batch_latency_ms_p50: pct(0.5),
        batch_latency_ms_p95: pct(0.95),
    }
}

/// At most this many points of a ROC curve are drawn (a million-row split has a million).
const CURVE_POINTS: usize = 2000;

/// Every `step`-th point of a curve, its ends kept.
fn thin(points: Vec<(f64, f64)>, max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max {
        return points;
    }
    let step = points.len().div_ceil(max);
    let last = *points.last().expect("a curve");
    let mut out: Vec<(f64, f64)> = points.into_iter().step_by(step).collect();
    if out.last() != Some(&last) {
        out.push(last);
    }
    out
}

/// Confusion matrix, ROC curve(s) and the reliability diagram, as SVG + PNG.
fn plots(dir: &Path, m: &ClassificationMetrics, s: &super::score::Scores, names: &[String]) -> Result<Vec<PathBuf>> {
    use crate::stats::plot;
    let mut files = plot::confusion_chart(dir, "confusion", "Confusion matrix", names, &m.confusion)?;
    let mut roc = Vec::new();
    for r in &s.roc {
        let auc = r.auc.unwrap_or(f64::NAN);
        let name = if names.len() == 2 { format!("AUC {auc:.4}") } else { format!("{} AUC {auc:.4}", names[r.class]) };
        roc.push((name, thin(r.points.clone(), CURVE_POINTS)));
    }
    roc.push(("chance".to_string(), vec![(0.0, 0.0), (1.0, 1.0)]));
    files.extend(plot::xy_chart(dir, "roc", "ROC curve", "false positive rate", "true positive rate", &roc, true)?);
    let pts: Vec<(f64, f64)> = s.calibration.iter().map(|b| (b.confidence, b.accuracy)).collect();
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

/// The report as a table for the terminal.
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
    if let Some(how) = &r.label_match {
        out.push(format!("labels     {how}"));
    }
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
    if r.nonfinite.rows > 0 {
        out.push(format!(
            "non-finite {} rows with NaN or infinite logits, left out of every figure below (first: {})",
            r.nonfinite.rows,
            r.nonfinite.ids.iter().take(5).map(String::as_str).collect::<Vec<_>>().join(", ")
        ));
    }
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
    if let Some(page) = r.outputs.iter().find(|o| o.ends_with(crate::page::REPORT_PAGE) && Path::new(o).is_file()) {
        out.push(format!("the report as a page: {page}"));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_curves_are_thinned_to_their_ends() {
        let curve: Vec<(f64, f64)> = (0..=10_000).map(|i| (i as f64 / 1e4, i as f64 / 1e4)).collect();
        let t = thin(curve.clone(), 2000);
        assert!(t.len() <= 2001 && t.len() > 1000, "{}", t.len());
        assert_eq!((t[0], *t.last().unwrap()), (curve[0], *curve.last().unwrap()));
        assert_eq!(thin(curve[..10].to_vec(), 2000), curve[..10].to_vec());
    }
}
