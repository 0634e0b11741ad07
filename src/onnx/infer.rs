//! The inference half of `eval`: a split (or one task's part of it) through the model — and the
//! baseline, batch for batch — written to `predictions.parquet` shard by shard as it finishes.
//!
//! A reader thread reads one shard at a time, sorts its rows by length and sends padded batches
//! while the runtime works on the previous one; when a shard's batches are done its rows go to
//! the file in the split's order. What is held: the shard being read and the one being written
//! (the pipeline's `sink.shard_rows`, 10,000 rows by default), the four batches in flight, and
//! the lists a report shows (the most confident mistakes and flipped rows with their texts, the
//! first non-finite rows), each cut to its length as rows go by.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::eval::{EvalOptions, Mistake, ScoreLeaked};
use super::gate::{self, Flip, GateRule};
use super::predictions::{Layout, PredRow, PredictionsWriter, BASELINE_PREDICTIONS, PREDICTIONS};
use super::runtime::{self, Model, Provider};
use super::score::{first, keep_first};
use crate::contract::columns;
use crate::contract::manifest::{LeakageInfo, DEFAULT_MAX_LEN};
use crate::metrics::{all_finite, argmax, softmax};
use crate::pipeline::tasks::TaskSpec;
use crate::shards::{LabelMatch, ShardSet};

/// How many non-finite rows are listed by id (all are counted).
pub const NONFINITE_LISTED: usize = 100;

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

/// What every task of one evaluation shares, recorded in each task's `part.json` and checked
/// equal before a merge: the report is made from it and the predictions alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Header {
    /// SHA-256 of what decides the predictions and the report: the model's, the baseline's and the
    /// manifest's bytes, the split, batching and the scoring settings.
    pub fingerprint: String,
    pub model: String,
    pub data: String,
    pub split: String,
    /// The model's class names: the report's, and the class ids of the predictions' `label`.
    pub labels: Vec<String>,
    /// How the shards' labels were matched to the model's classes, when not plainly (by name in
    /// another order, or by number where a side has no names): see [`crate::shards::match_labels`].
    #[serde(default)]
    pub label_match: Option<String>,
    pub precision: String,
    pub onnxruntime: String,
    pub baseline: Option<String>,
    pub baseline_precision: Option<String>,
    pub mistakes: usize,
    pub length_edges: Option<Vec<usize>>,
    pub max_drop: f64,
    pub rule: GateRule,
    pub allow_nonfinite: bool,
    /// The split's leakage from the manifest, and whether to score its parts apart.
    pub leakage: Option<LeakageInfo>,
    pub score_parts: bool,
    pub layout: Layout,
    pub chain: Option<serde_json::Value>,
    /// Rows and shards of the whole split.
    pub rows: u64,
    pub shards: usize,
}

/// Inference of one side (the model or the baseline): what it cost.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunStats {
    /// Milliseconds per batch.
    pub latencies_ms: Vec<f64>,
    pub tokens: u64,
    pub padded: u64,
    /// The inference loop's wall time, less the time spent in the other side's calls.
    pub seconds: f64,
}

/// A row listed in a report, with its place in the split (the order lists are merged in).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Listed<T> {
    pub index: u64,
    pub item: T,
}

/// One process's inference: the whole split, or one task's contiguous shards (`part.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Part {
    pub version: String,
    pub header: Header,
    pub task: TaskSpec,
    /// The shards `[first, end)` of the split this part read.
    pub shards: [usize; 2],
    pub provider: String,
    pub rows: u64,
    pub model: RunStats,
    pub baseline: Option<RunStats>,
    /// Rows whose logits (the model's) are not all finite: the count and the first ids.
    pub nonfinite: u64,
    pub nonfinite_ids: Vec<Listed<String>>,
    /// The most confident mistakes and flipped rows of this part, with their texts.
    pub mistakes: Vec<Listed<Mistake>>,
    pub flips: Vec<Listed<Flip>>,
}

/// The models and shards of one evaluation, checked against one another.
pub struct Session {
    pub opts: EvalOptions,
    model: Model,
    baseline: Option<Model>,
    shards: Arc<ShardSet>,
    /// The shards' labels as the model's classes.
    labels: LabelMatch,
    pub header: Header,
    shard_rows: Vec<u64>,
}

impl Session {
    pub fn open(opts: &EvalOptions) -> Result<Session> {
        if opts.batch_size == 0 {
            bail!("--batch-size must be at least 1");
        }
        if let Some(e) = &opts.length_edges {
            if e.is_empty() || e[0] == 0 || e.windows(2).any(|w| w[0] >= w[1]) {
                bail!("--length-edges must be increasing token counts above 0, e.g. 64,128,256,512 (got {e:?})");
            }
        }
        if opts.max_drop.is_nan() || opts.max_drop < 0.0 {
            bail!("--max-drop must be 0 or more accuracy points (got {})", opts.max_drop);
        }
        if !(opts.rule.alpha > 0.0 && opts.rule.alpha < 1.0) {
            bail!("--gate-alpha must lie between 0 and 1 (got {})", opts.rule.alpha);
        }
        let model = open_model(&opts.model, &opts.device, opts.threads, opts.ort_lib.as_deref())?;
        let names = model.label_names();
        if names.is_empty() {
            bail!("'{}' records no id2label; was it exported by `bertpipe export onnx`?", opts.model.display());
        }
        // The baseline first: a refused baseline (other vocabulary, other labels) costs no run.
        let baseline = match &opts.baseline {
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
        if let Some(b) = &baseline {
            shards.expect_vocab(&b.vocab(), &format!("the baseline '{}'", path_of(&opts.baseline)))?;
        }
        // The rows' labels are scored as the model's classes by name, never by a number that
        // means another class to the model.
        let labels = crate::shards::match_labels(
            &shards.class_names(),
            &names,
            &format!("the shards in '{}'", opts.data.display()),
            &format!("the model '{}'", opts.model.display()),
            "evaluate a model trained on these labels, or name the corpus's labels as the model does with the source's `label_map`",
        )?;
        let shard_rows = shards.shard_rows(&opts.split)?;
        let rows: u64 = shard_rows.iter().sum();
        if rows == 0 {
            bail!(
                "split `{}` of '{}' has no rows: nothing to evaluate (its manifest lists {} shards)",
                opts.split,
                opts.data.display(),
                shard_rows.len()
            );
        }
        let leakage = shards.manifest.leakage.get(&opts.split).cloned();
        if opts.exclude_leaked == ScoreLeaked::Yes && leakage.is_none() {
            bail!(
                "--exclude-leaked: the manifest of '{}' records no leakage for `{}` (the pipeline has no other split to compare with, ran with `sink.leakage: off` or as a task array, or predates it); `bertpipe stats --leakage {} --split {} --against TRAIN_SHARDS` measures it",
                opts.data.display(),
                opts.split,
                opts.data.display(),
                opts.split
            );
        }
        let layout = layout_of(&shards, &opts.split)?;
        let header = Header {
            fingerprint: fingerprint(opts, &shards)?,
            model: opts.model.display().to_string(),
            data: opts.data.display().to_string(),
            split: opts.split.clone(),
            labels: names,
            label_match: labels.note.clone(),
            precision: precision_of(&model),
            onnxruntime: runtime::init(opts.ort_lib.as_deref())?.version.clone(),
            baseline: opts.baseline.as_ref().map(|p| p.display().to_string()),
            baseline_precision: baseline.as_ref().map(precision_of),
            mistakes: opts.mistakes,
            length_edges: opts.length_edges.clone(),
            max_drop: opts.max_drop,
            rule: opts.rule,
            allow_nonfinite: opts.allow_nonfinite,
            score_parts: leakage.is_some() && opts.exclude_leaked != ScoreLeaked::No,
            leakage,
            layout,
            chain: model.metadata.get("bertpipe_chain").and_then(|c| serde_json::from_str(c).ok()).map(
                |keys: serde_json::Value| {
                    serde_json::json!({"experiment": model.metadata.get("bertpipe_experiment"), "stages": keys})
                },
            ),
            rows,
            shards: shard_rows.len(),
        };
        Ok(Session { opts: opts.clone(), model, baseline, shards: Arc::new(shards), labels, header, shard_rows })
    }

    /// The shards a task reads: a contiguous run, balanced by rows (the manifest's counts), so
    /// the tasks' parts in task order are the split in its order.
    pub fn task_shards(&self, task: TaskSpec) -> std::ops::Range<usize> {
        task_shards(&self.shard_rows, task)
    }

    /// Runs the task's shards through the model (and the baseline) into `dir`'s predictions
    /// files.
    pub fn infer(&mut self, dir: &Path, task: TaskSpec) -> Result<Part> {
        let range = self.task_shards(task);
        let offset: u64 = self.shard_rows[..range.start].iter().sum();
        let task_rows: u64 = self.shard_rows[range.clone()].iter().sum();
        let max_len: usize = self.model.metadata.get("max_len").and_then(|s| s.parse().ok()).unwrap_or(DEFAULT_MAX_LEN);
        if let Some(p) = self.opts.pad_to {
            if p > max_len {
                bail!("--max-len {p} is longer than the model's max_len {max_len}");
            }
        }
        let names = self.header.labels.clone();
        let k = names.len();
        let layout = self.header.layout;
        std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
        let mut writer = PredictionsWriter::create(&dir.join(PREDICTIONS), &names, layout)?;
        let mut base_writer = match &self.baseline {
            Some(_) => Some(PredictionsWriter::create(&dir.join(BASELINE_PREDICTIONS), &names, layout)?),
            None => None,
        };
        let reader = Reader {
            shards: self.shards.clone(),
            split: self.opts.split.clone(),
            range: range.clone(),
            offset,
            batch_size: self.opts.batch_size,
            pad_to: self.opts.pad_to,
            max_len,
            pad_id: self.shards.tokenizer()?.special_ids.pad as i64,
        };
        let (tx, rx) = crossbeam_channel::bounded::<Result<Msg>>(4);
        let thread = std::thread::spawn(move || {
            if let Err(e) = reader.run(&tx) {
                let _ = tx.send(Err(e));
            }
        });
        let progress = crate::contract::progress::Counter::new(
            self.opts.quiet,
            task_rows,
            4,
            "eval [{elapsed_precise}] {wide_bar:.cyan/blue} {pos}/{len} rows ETA {eta}",
            "eval",
            "rows",
        );
        let mut part = Part {
            version: env!("CARGO_PKG_VERSION").to_string(),
            header: self.header.clone(),
            task,
            shards: [range.start, range.end],
            provider: self.model.provider.describe(),
            rows: 0,
            model: RunStats::default(),
            baseline: self.baseline.as_ref().map(|_| RunStats::default()),
            nonfinite: 0,
            nonfinite_ids: Vec::new(),
            mistakes: Vec::new(),
            flips: Vec::new(),
        };
        let (mut rows, mut base_rows): (Vec<PredRow>, Vec<PredRow>) = (Vec::new(), Vec::new());
        let (mut model_secs, mut base_secs) = (0.0f64, 0.0f64);
        let start = Instant::now();
        for msg in rx {
            let batch = match msg? {
                Msg::ShardEnd => {
                    rows.sort_by_key(|r| r.index);
                    writer.write_shard(&rows)?;
                    rows.clear();
                    if let Some(w) = &mut base_writer {
                        base_rows.sort_by_key(|r| r.index);
                        w.write_shard(&base_rows)?;
                        base_rows.clear();
                    }
                    continue;
                }
                Msg::Batch(b) => b,
            };
            let n = batch.rows.len();
            let (logits, secs) = run_model(&mut self.model, &batch, k, &names)?;
            model_secs += secs;
            part.model.latencies_ms.push(secs * 1e3);
            let base_logits = match (&mut self.baseline, &mut part.baseline) {
                (Some(b), Some(stats)) => {
                    let (l, secs) = run_model(b, &batch, k, &names)?;
                    base_secs += secs;
                    stats.latencies_ms.push(secs * 1e3);
                    Some(l)
                }
                _ => None,
            };
            let tokens = batch.rows.iter().map(|r| r.tokens as u64).sum::<u64>();
            for stats in std::iter::once(&mut part.model).chain(part.baseline.as_mut()) {
                stats.tokens += tokens;
                stats.padded += (n * batch.seq) as u64;
            }
            for (i, meta) in batch.rows.into_iter().enumerate() {
                // The row's label as the model's class (the predictions' `label` column).
                let label = match meta.label {
                    Some(l) => match self.labels.class_of(l) {
                        Ok(c) => Some(c as i64),
                        Err(why) => bail!("row `{}` of split `{}` has {why}", meta.id, self.opts.split),
                    },
                    None => None,
                };
                let row = PredRow {
                    index: meta.index,
                    id: meta.id,
                    label,
                    logits: logits[i * k..(i + 1) * k].to_vec(),
                    doc_id: meta.doc_id,
                    chunk: meta.chunk,
                    tokens: meta.tokens as u32,
                    noise: meta.noise,
                };
                let base =
                    base_logits.as_ref().map(|l| PredRow { logits: l[i * k..(i + 1) * k].to_vec(), ..row.clone() });
                part.list(&row, base.as_ref(), meta.text, &names);
                rows.push(row);
                base_rows.extend(base);
            }
            part.rows += n as u64;
            progress.inc(n as u64);
        }
        thread.join().map_err(|_| anyhow::anyhow!("the shard reader panicked"))?;
        let wall = start.elapsed().as_secs_f64();
        progress.finish();
        writer.finish()?;
        if let Some(w) = base_writer {
            w.finish()?;
        }
        part.model.seconds = wall - base_secs;
        if let Some(b) = &mut part.baseline {
            b.seconds = wall - model_secs;
        }
        part.close(self.opts.mistakes);
        Ok(part)
    }
}

fn path_of(p: &Option<PathBuf>) -> String {
    p.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
}

/// The order of the lists: most confident first, then the split's order.
fn by_confidence<T>(conf: impl Fn(&T) -> f64) -> impl Fn(&Listed<T>, &Listed<T>) -> std::cmp::Ordering {
    move |a, b| conf(&b.item).total_cmp(&conf(&a.item)).then(a.index.cmp(&b.index))
}

pub fn mistake_order(a: &Listed<Mistake>, b: &Listed<Mistake>) -> std::cmp::Ordering {
    by_confidence(|m: &Mistake| m.confidence)(a, b)
}

pub fn index_order<T>(a: &Listed<T>, b: &Listed<T>) -> std::cmp::Ordering {
    a.index.cmp(&b.index)
}

pub fn flip_order(a: &Listed<Flip>, b: &Listed<Flip>) -> std::cmp::Ordering {
    by_confidence(|f: &Flip| f.confidence)(a, b)
}

impl Part {
    /// Lists a row where the report may show it: a non-finite row by id, a confident mistake,
    /// a flipped prediction.
    fn list(&mut self, row: &PredRow, base: Option<&PredRow>, text: Option<String>, names: &[String]) {
        if !all_finite(&row.logits) {
            self.nonfinite += 1;
            // Rows come length-sorted within a shard: the first in the split's order are kept.
            self.nonfinite_ids.push(Listed { index: row.index, item: row.id.clone() });
            keep_first(&mut self.nonfinite_ids, NONFINITE_LISTED, index_order);
            return;
        }
        let p = softmax(&row.logits);
        let c = argmax(&p);
        if let Some(label) = row.label.map(|l| l as usize).filter(|&l| l != c) {
            if self.header.mistakes > 0 {
                let item = Mistake {
                    id: row.id.clone(),
                    label: names[label].clone(),
                    predicted: names[c].clone(),
                    confidence: p[c],
                    text: text.clone(),
                };
                self.mistakes.push(Listed { index: row.index, item });
                keep_first(&mut self.mistakes, self.header.mistakes, mistake_order);
            }
        }
        let Some(base) = base.filter(|b| all_finite(&b.logits)) else { return };
        let pb = softmax(&base.logits);
        let cb = argmax(&pb);
        if cb != c {
            let item = Flip {
                id: row.id.clone(),
                label: row.label.map(|l| names[l as usize].clone()),
                baseline_prediction: names[cb].clone(),
                prediction: names[c].clone(),
                baseline_confidence: pb[cb],
                confidence: p[c],
                text,
            };
            self.flips.push(Listed { index: row.index, item });
            keep_first(&mut self.flips, gate::LISTED, flip_order);
        }
    }

    fn close(&mut self, mistakes: usize) {
        self.nonfinite_ids = first(std::mem::take(&mut self.nonfinite_ids), NONFINITE_LISTED, index_order);
        self.mistakes = first(std::mem::take(&mut self.mistakes), mistakes, mistake_order);
        self.flips = first(std::mem::take(&mut self.flips), gate::LISTED, flip_order);
    }
}

/// Runs one batch; its logits and seconds.
fn run_model(model: &mut Model, b: &EvalBatch, k: usize, names: &[String]) -> Result<(Vec<f32>, f64)> {
    let t0 = Instant::now();
    let (logits, got) = model.logits(&b.input_ids, &b.attention_mask, &b.token_type_ids, b.rows.len(), b.seq)?;
    let secs = t0.elapsed().as_secs_f64();
    if got != k {
        bail!("the model returned {got} logits per row, but its id2label names {}", names.len());
    }
    Ok((logits, secs))
}

/// The shards a task reads (see [`Session::task_shards`]): task `i` of `N` starts at the first
/// shard whose preceding rows reach `i/N` of the split's.
pub fn task_shards(rows: &[u64], task: TaskSpec) -> std::ops::Range<usize> {
    if task.count <= 1 {
        return 0..rows.len();
    }
    let total: u128 = rows.iter().map(|&r| r as u128).sum();
    let start_of = |i: u32| -> usize {
        if i == 0 {
            return 0;
        }
        if i >= task.count {
            return rows.len();
        }
        let want = total * i as u128;
        let mut before = 0u128;
        for (s, &r) in rows.iter().enumerate() {
            if before * task.count as u128 >= want {
                return s;
            }
            before += r as u128;
        }
        rows.len()
    };
    start_of(task.index)..start_of(task.index + 1)
}

/// The shards to evaluate on: classification shards, tokenized with the model's vocabulary,
/// verified against their manifest (a bucket's download silent with `--quiet`).
fn open_shards(opts: &EvalOptions, model: &Model) -> Result<ShardSet> {
    let shards = ShardSet::open_with(&opts.data, opts.quiet)?;
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

/// The optional columns of the predictions, from the split's first shard's schema.
fn layout_of(shards: &ShardSet, split: &str) -> Result<Layout> {
    let stats = shards.split_stats(split)?;
    let path = shards.root().join(&stats.shards[0].file);
    let f = std::fs::File::open(&path).with_context(|| format!("could not open '{}'", path.display()))?;
    let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .with_context(|| format!("'{}' is not a Parquet file", path.display()))?;
    let has = |c: &str| b.schema().column_with_name(c).is_some();
    Ok(Layout { windows: has("doc_id"), noise: has("noise_score") })
}

/// See [`Header::fingerprint`]. Device and threads are left out: tasks on several GPUs are one
/// evaluation.
pub fn fingerprint(opts: &EvalOptions, shards: &ShardSet) -> Result<String> {
    use crate::contract::checksum::sha256_file;
    let manifest = shards.root().join(crate::contract::manifest::MANIFEST);
    // A model is its file and its external data: both are what was evaluated.
    let model_digest = |m: &std::path::Path| -> Result<Vec<String>> {
        super::proto::model_files(m)?.iter().map(|f| sha256_file(f)).collect()
    };
    let v = serde_json::json!({
        "model": model_digest(&opts.model)?,
        "baseline": opts.baseline.as_deref().map(model_digest).transpose()?,
        "manifest": sha256_file(&manifest)?,
        "split": opts.split,
        "batch_size": opts.batch_size,
        "max_len": opts.pad_to,
        "mistakes": opts.mistakes,
        "length_edges": opts.length_edges,
        "max_drop": opts.max_drop,
        "rule": opts.rule,
        "allow_nonfinite": opts.allow_nonfinite,
        "exclude_leaked": format!("{:?}", opts.exclude_leaked),
    });
    Ok(crate::contract::checksum::sha256_bytes(&serde_json::to_vec(&v)?))
}

/// One row's place and what is known about it before inference.
struct RowMeta {
    index: u64,
    id: String,
    label: Option<i64>,
    doc_id: Option<String>,
    chunk: Option<i32>,
    tokens: usize,
    noise: Option<f32>,
    text: Option<String>,
}

struct EvalBatch {
    rows: Vec<RowMeta>,
    input_ids: Vec<i64>,
    attention_mask: Vec<i64>,
    token_type_ids: Vec<i64>,
    seq: usize,
}

enum Msg {
    Batch(EvalBatch),
    /// Every batch of the current shard has been sent.
    ShardEnd,
}

struct Reader {
    shards: Arc<ShardSet>,
    split: String,
    range: std::ops::Range<usize>,
    /// The split's rows before the first shard.
    offset: u64,
    batch_size: usize,
    pad_to: Option<usize>,
    max_len: usize,
    pad_id: i64,
}

impl Reader {
    fn run(&self, tx: &crossbeam_channel::Sender<Result<Msg>>) -> Result<()> {
        let mut index = self.offset;
        let split = self.split.as_str();
        for shard in self.range.clone() {
            let mut rows = Vec::new();
            for b in self.shards.shard_batches(split, shard, None)? {
                let b = b?;
                let shown = || self.shards.shard_shown(split, shard);
                let noise = b.column_by_name("noise_score").map(|c| columns::floats(c, "noise_score")).transpose();
                let text = b.column_by_name("text").map(|c| columns::strings(c, "text")).transpose();
                let (noise, mut text) = (noise.with_context(shown)?, text.with_context(shown)?);
                let read = crate::shards::classify_rows(&b, self.shards.vocab_size()).with_context(shown)?;
                for (i, row) in read.into_iter().enumerate() {
                    let limit = self.pad_to.unwrap_or(self.max_len).min(self.max_len);
                    if row.input_ids.len() > limit {
                        bail!(
                            "row `{}` of split `{split}` has {} tokens, longer than {} {limit}",
                            row.id,
                            row.input_ids.len(),
                            if self.pad_to.is_some() { "--max-len" } else { "the model's max_len" },
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
                let chunk: Vec<_> = rows.by_ref().take(self.batch_size).collect();
                if tx.send(Ok(Msg::Batch(self.batch(chunk)))).is_err() {
                    return Ok(());
                }
            }
            if tx.send(Ok(Msg::ShardEnd)).is_err() {
                return Ok(());
            }
        }
        Ok(())
    }

    fn batch(&self, chunk: Vec<(RowMeta, Vec<i32>, Vec<i8>)>) -> EvalBatch {
        let seq = self.pad_to.unwrap_or_else(|| chunk.iter().map(|r| r.1.len()).max().unwrap_or(1)).max(1);
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
                b.input_ids.push(if real { ids[j] as i64 } else { self.pad_id });
                b.token_type_ids.push(if real { types[j] as i64 } else { 0 });
                b.attention_mask.push(real as i64);
            }
            b.rows.push(meta);
        }
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_take_contiguous_shards_balanced_by_rows() {
        let rows = [100, 100, 30, 70, 100, 5, 95];
        for count in 1..=9u32 {
            let parts: Vec<_> = (0..count).map(|index| task_shards(&rows, TaskSpec { index, count })).collect();
            // Contiguous, in order, covering every shard once.
            assert_eq!(parts[0].start, 0);
            assert_eq!(parts.last().unwrap().end, rows.len());
            assert!(parts.windows(2).all(|w| w[0].end == w[1].start), "{count}: {parts:?}");
        }
        let three: Vec<u64> =
            (0..3).map(|index| rows[task_shards(&rows, TaskSpec { index, count: 3 })].iter().sum()).collect();
        assert_eq!(three, [200, 200, 100]);
    }
}
