//! Turning each kind of input into a [`DocTable`]: a streaming pass through a pipeline's cleaning
//! steps (or straight from a source), or a read of finished shards with polars.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;
use serde::Serialize;

use super::table::{Columns, DocTable, Record, TextMeasure};
use super::StatsOptions;
use crate::clean::noise::NoiseScore;
use crate::config::{ConfigErrors, Pipeline, PipelineStep};
use crate::contract::document::NoiseComponents;
use crate::contract::manifest::TokenStats;
use crate::contract::progress::{Progress, Total};
use crate::pipeline::corpus::resolve_noise_quantiles;
use crate::pipeline::parallel::{self, Outcome};
use crate::pipeline::{prepare_steps, threads_or_default};
use crate::shards::ShardSet;
use crate::tokenize::Tokenize;

/// What was read, as the report names it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct InputInfo {
    pub path: String,
    /// `pipeline`, `shards` or `source`.
    pub kind: &'static str,
    /// The source type (`aclimdb`, `jsonl`, …) the documents come from.
    pub source_type: String,
    /// The pipeline's name, for pipelines and shards.
    pub name: Option<String>,
}

/// How label ids are shown: aclImdb's `neg` / `pos` / `unsup`, a `label_map`'s names, or the
/// number itself.
#[derive(Debug, Clone, PartialEq)]
pub struct LabelNames {
    names: BTreeMap<i64, String>,
    none: String,
}

impl LabelNames {
    /// From a source's configuration (as JSON: `type`, `label_map`), else the label names
    /// found in the corpus (`id2label` of a manifest, [`crate::source::Source::id2label`]).
    pub fn from_source(source: &serde_json::Value, found: &BTreeMap<i64, String>) -> LabelNames {
        let mut names = BTreeMap::new();
        let mut none = "none".to_string();
        if source["type"] == "aclimdb" {
            names.insert(0, "neg".to_string());
            names.insert(1, "pos".to_string());
            none = "unsup".into();
        } else if let Some(map) = source["label_map"].as_object() {
            for (name, id) in map {
                if let Some(id) = id.as_i64() {
                    names.entry(id).and_modify(|n: &mut String| *n = format!("{n}/{name}")).or_insert(name.clone());
                }
            }
        } else {
            names = found.clone();
        }
        LabelNames { names, none }
    }

    /// Next-sentence labels of pretraining rows (HF convention).
    pub fn nsp() -> LabelNames {
        let names = BTreeMap::from([(0, "is_next".to_string()), (1, "random".to_string())]);
        LabelNames { names, none: "none".into() }
    }

    pub fn name(&self, label: Option<i64>) -> String {
        match label {
            None => self.none.clone(),
            Some(id) => self.names.get(&id).cloned().unwrap_or_else(|| id.to_string()),
        }
    }
}

/// Everything the aggregation needs from one pass over the input.
pub struct Collected {
    pub table: DocTable,
    pub input: InputInfo,
    /// `document`, or `row` for shards (windows make several rows of one document).
    pub unit: &'static str,
    /// What a token count means: `document` (WordPiece tokens of the whole cleaned document,
    /// no special tokens) or `row` (a shard row's `length`, special tokens included).
    pub token_unit: Option<&'static str>,
    /// Records read (documents, or shard rows) and those the pipeline rejected, by reason.
    pub read: u64,
    pub rejected: BTreeMap<String, u64>,
    /// The first rejected document of each reason: its id and the full reason.
    pub reject_examples: BTreeMap<String, (String, String)>,
    pub labels: LabelNames,
    /// `max_len` of the pipeline's sequence step or the shards' manifest.
    pub max_len: Option<u32>,
    /// `pipeline` when the pipeline (or the shards) scored noise, `default` when stats scored
    /// the text with the default `noise_score` settings.
    pub noise_scored_by: Option<&'static str>,
    /// Shards only: per split, the documents written and the manifest's tokenisation figures
    /// (truncation happened before the rows were written, so only the manifest knows it).
    pub manifest_tokens: BTreeMap<String, (u64, TokenStats)>,
    /// Whether the manifest's truncation figures apply (classification shards; pretraining
    /// splits documents into segments instead of cutting them).
    pub manifest_truncation: bool,
    pub text_bytes: u64,
    pub seconds: f64,
}

/// What `stats` was pointed at.
#[derive(Debug, Clone, PartialEq)]
pub enum InputKind {
    Pipeline,
    Shards,
    /// A source given by its path, with the source type inferred.
    Source(&'static str),
}

/// What a file is by its name alone: a source type (or a pipeline), if its extension says.
pub fn source_kind_by_name(path: &Path) -> Option<InputKind> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let kind = if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        "aclimdb"
    } else if name.ends_with(".jsonl") || name.ends_with(".ndjson") || name.ends_with(".json") {
        "jsonl"
    } else if name.ends_with(".csv") || name.ends_with(".tsv") {
        "csv"
    } else if name.ends_with(".parquet") {
        "parquet"
    } else if name.ends_with(".txt") {
        "text"
    } else {
        return None;
    };
    Some(InputKind::Source(kind))
}

/// What `path` is, as [`detect`] decides; in a bucket, a source file is known by its name and
/// anything else is a shard folder, fetched into the local cache first (the path to read is
/// returned with the kind).
pub fn locate(path: &Path, quiet: bool) -> Result<(PathBuf, InputKind)> {
    if !crate::storage::is_remote(path) {
        return Ok((path.to_path_buf(), detect(path)?));
    }
    Ok(match source_kind_by_name(path) {
        Some(kind) => (path.to_path_buf(), kind),
        None => (crate::sink::remote::fetch_shards_with(path, quiet)?, InputKind::Shards),
    })
}

/// A pipeline's steps without its sequence building: the documents as they are cleaned.
pub fn document_steps(pipeline: &Pipeline) -> Vec<PipelineStep> {
    pipeline
        .steps
        .iter()
        .filter(|s| !matches!(s, PipelineStep::ClassifySequences(_) | PipelineStep::PretrainSequences(_)))
        .cloned()
        .collect()
}

/// Decides what `path` is: a pipeline YAML, a finished shard folder, or a source.
pub fn detect(path: &Path) -> Result<InputKind> {
    if !path.exists() {
        bail!("'{}' does not exist", path.display());
    }
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    if path.is_file() {
        if name.ends_with(".yaml") || name.ends_with(".yml") {
            return Ok(InputKind::Pipeline);
        }
        return source_kind_by_name(path).with_context(|| {
            format!(
                "don't know what '{}' is: give a pipeline (.yaml), a shard folder, an aclImdb folder or .tar.gz, or a .jsonl/.json/.csv/.tsv/.parquet/.txt file",
                path.display()
            )
        });
    }
    // A task array's output is a shard folder too; reading it before `shards merge` is refused
    // by `Manifest::read`, which says so.
    if path.join(crate::contract::manifest::MANIFEST).is_file()
        || path.join(crate::contract::manifest::TASKS_DIR).is_dir()
    {
        return Ok(InputKind::Shards);
    }
    if path.join(crate::contract::manifest::JOURNAL).is_file() {
        bail!(
            "'{}' holds an unfinished pipeline run (a journal, no manifest.json); finish it with `bertpipe pipeline run PIPELINE.yaml --resume`",
            path.display()
        );
    }
    if ["train", "test", "aclImdb"].iter().any(|d| path.join(d).is_dir()) {
        return Ok(InputKind::Source("aclimdb"));
    }
    let mut found: Vec<&'static str> = Vec::new();
    for entry in std::fs::read_dir(path).with_context(|| format!("could not list '{}'", path.display()))? {
        let p = entry?.path();
        let ext = p.extension().map(|e| e.to_string_lossy().to_lowercase()).unwrap_or_default();
        let kind = match ext.as_str() {
            "jsonl" | "ndjson" | "json" => "jsonl",
            "csv" | "tsv" => "csv",
            "parquet" => "parquet",
            "txt" | "text" => "text",
            _ => continue,
        };
        if !found.contains(&kind) {
            found.push(kind);
        }
    }
    match found.as_slice() {
        [one] => Ok(InputKind::Source(one)),
        [] => bail!(
            "'{}' is not a shard folder (no manifest.json), not an aclImdb folder (no train/ or test/), and holds no .jsonl/.csv/.parquet/.txt files",
            path.display()
        ),
        many => bail!(
            "'{}' mixes {} files; point stats at one file, or write a pipeline YAML for the source",
            path.display(),
            many.join(" and ")
        ),
    }
}

/// A pipeline for a bare source path: the source with its defaults (aclImdb with `unsup` too,
/// the label and id fields the source finds), no steps. `--set source.…` applies.
pub fn source_pipeline(path: &Path, kind: &str, overrides: &[String]) -> Result<Pipeline, ConfigErrors> {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut source = serde_json::json!({ "type": kind, "path": abs.to_string_lossy() });
    // A jsonl, csv or parquet source finds its `label` / `id` field itself.
    if kind == "aclimdb" {
        // Reviews without a label too, when the corpus has them (a tarball is read as a
        // stream: whatever `unsup` it holds is read).
        let unsup = abs.is_file() || abs.join("train/unsup").is_dir() || abs.join("aclImdb/train/unsup").is_dir();
        source["labels"] =
            if unsup { serde_json::json!(["neg", "pos", "unsup"]) } else { serde_json::json!(["neg", "pos"]) };
    }
    // JSON is YAML; the sink is required by the format and never written.
    let yaml = serde_json::json!({
        "name": "stats",
        "source": source,
        "sink": { "type": "parquet", "path": "unused" },
    })
    .to_string();
    let label = format!("{} (read as a {kind} source)", path.display());
    Pipeline::from_yaml(&yaml, &label, Path::new("."), overrides)
}

/// The streaming pass: the source through the pipeline's steps up to tokenisation (sequence
/// building is skipped: it changes no document), with a default noise score when the pipeline
/// has none and `--vocab` tokenisation when asked. Memory stays bounded: the text of a document
/// is dropped as soon as its numbers are taken.
///
/// `is_pipeline` says whether the user gave a pipeline file (rather than a bare source).
pub fn from_pipeline(pipeline: &Pipeline, is_pipeline: bool, path: &Path, opts: &StatsOptions) -> Result<Collected> {
    let started = Instant::now();
    let pipeline = &*pipeline.with_labels_found()?;
    let threads = threads_or_default(opts.threads);
    let max_len = pipeline.steps.iter().find_map(PipelineStep::max_len).map(|n| n as u32);
    let mut steps = document_steps(pipeline);
    let scored = steps.iter().any(|s| matches!(s, PipelineStep::NoiseScore(_)));
    if !scored {
        steps.push(PipelineStep::NoiseScore(NoiseScore::default()));
    }
    if let Some(vocab) = &opts.vocab {
        if steps.iter().any(|s| matches!(s, PipelineStep::Tokenize(_))) {
            bail!("--vocab: the pipeline already has a tokenize step");
        }
        let tokenize: Tokenize = serde_json::from_value(serde_json::json!({
            "vocab": std::path::absolute(vocab).unwrap_or_else(|_| vocab.clone()),
            "lowercase": !opts.cased,
        }))
        .expect("a valid tokenize step");
        if !vocab.is_file() {
            bail!("--vocab: '{}' does not exist", vocab.display());
        }
        steps.push(PipelineStep::Tokenize(tokenize));
    }
    let tokenized = prepare_steps(&mut steps)?.is_some();
    resolve_noise_quantiles(&pipeline.source, pipeline.seed, &mut steps, threads, opts.quiet)?;

    let columns = Columns { text: true, tokens: tokenized, unk: tokenized, noise: true };
    let mut table = DocTable::new(columns, opts.top);
    let mut read = 0u64;
    let mut rejected: BTreeMap<String, u64> = BTreeMap::new();
    let mut reject_examples = BTreeMap::new();
    let progress = Progress::new(opts.quiet, "stats");
    let set_total = |t: Total| progress.set_total(t);
    let measure = |doc: &crate::contract::document::Document| TextMeasure::of(&doc.text);
    let text_bytes = parallel::process_with(
        parallel::CorpusPart::whole(&pipeline.source, pipeline.seed, &steps),
        &steps,
        threads,
        &set_total,
        &measure,
        |outcome, m| {
            progress.advance(outcome.input_bytes(), 1);
            read += 1;
            match outcome {
                Outcome::Kept(doc) => table.push(Record {
                    id: &doc.id,
                    split: &doc.split,
                    label: doc.label,
                    text: Some(&doc.text),
                    measured: m,
                    tokens: tokenized.then_some(doc.tokens.len() as u32),
                    unk: tokenized.then_some(doc.unk_tokens),
                    noise: Some(doc.noise.unwrap_or_default().values()),
                }),
                Outcome::Rejected(r) => {
                    let key = r.reason_key().to_string();
                    *rejected.entry(key.clone()).or_default() += 1;
                    reject_examples.entry(key).or_insert_with(|| (r.id.clone(), r.reason.clone()));
                }
            }
            Ok(())
        },
    )?;
    progress.finish();
    let source_json = serde_json::to_value(&pipeline.source)?;
    Ok(Collected {
        table,
        input: InputInfo {
            path: path.display().to_string(),
            kind: if is_pipeline { "pipeline" } else { "source" },
            source_type: pipeline.source.type_name().to_string(),
            name: is_pipeline.then(|| pipeline.name.clone()),
        },
        unit: "document",
        token_unit: tokenized.then_some("document"),
        read,
        rejected,
        reject_examples,
        labels: LabelNames::from_source(&source_json, &pipeline.source.id2label()),
        max_len,
        noise_scored_by: Some(if scored { "pipeline" } else { "default" }),
        manifest_tokens: BTreeMap::new(),
        manifest_truncation: false,
        text_bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Reads a finished shard folder with the parquet crate, shard by shard (memory: one shard at a time),
/// after checking every shard against the manifest (presence, size, SHA-256).
pub fn from_shards(root: &Path, opts: &StatsOptions) -> Result<Collected> {
    let started = Instant::now();
    let set = ShardSet::open(root)?;
    if !opts.verified {
        set.verify()?;
    }
    let m = &set.manifest;
    // Splits in the source's order (as a streaming pass sees them), the rest by name.
    let source_order: Vec<&str> = m.config["source"]["splits"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str()).collect())
        .unwrap_or_default();
    let mut splits: Vec<(&String, &crate::contract::manifest::SplitStats)> = m.splits.iter().collect();
    splits.sort_by_key(|(name, _)| source_order.iter().position(|s| s == name).unwrap_or(usize::MAX));
    let files: Vec<(String, PathBuf, u64)> = splits
        .iter()
        .flat_map(|(split, s)| s.shards.iter().map(move |sh| ((*split).clone(), root.join(&sh.file), sh.bytes)))
        .collect();
    let pretrain = m.task == "pretrain";
    // The columns are chosen from the first shard's schema (a pipeline writes one schema).
    let names: Vec<String> = match files.first() {
        Some((_, file, _)) => open_shard(file)?.schema().fields().iter().map(|f| f.name().clone()).collect(),
        None => Vec::new(),
    };
    let has = |c: &str| names.iter().any(|n| n == c);
    let columns = Columns { text: has("text"), tokens: has("length"), unk: false, noise: has("noise_score") };
    let wanted = Wanted {
        id: if has("id") { "id" } else { "doc_id" },
        label: Some(if pretrain { "next_sentence_label" } else { "label" }).filter(|c| has(c)),
        columns,
    };

    let mut table = DocTable::new(columns, opts.top);
    let progress = Progress::new(opts.quiet, "stats");
    progress.set_total(Total::Bytes(files.iter().map(|f| f.2).sum()));
    let mut text_bytes = 0u64;
    for (split, file, bytes) in &files {
        let rows = read_shard(file, &wanted, &mut table, split, &mut text_bytes)
            .with_context(|| format!("could not read '{}'", file.display()))?;
        progress.advance(*bytes, rows);
    }
    progress.finish();

    let source_json = &m.config["source"];
    let mut rejected: BTreeMap<String, u64> = BTreeMap::new();
    let mut manifest_tokens = BTreeMap::new();
    for (split, s) in &m.splits {
        for (reason, n) in &s.rejected {
            *rejected.entry(reason.clone()).or_default() += n;
        }
        if let Some(t) = &s.tokenization {
            manifest_tokens.insert(split.clone(), (s.docs_out, t.clone()));
        }
    }
    Ok(Collected {
        read: table.len() as u64,
        table,
        input: InputInfo {
            path: root.display().to_string(),
            kind: "shards",
            source_type: source_json["type"].as_str().unwrap_or("unknown").to_string(),
            name: Some(m.name.clone()),
        },
        unit: "row",
        token_unit: columns.tokens.then_some("row"),
        rejected,
        reject_examples: BTreeMap::new(),
        labels: if pretrain { LabelNames::nsp() } else { LabelNames::from_source(source_json, &m.id2label) },
        max_len: m.max_len,
        noise_scored_by: columns.noise.then_some("pipeline"),
        manifest_tokens,
        manifest_truncation: m.task == "classify",
        text_bytes,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The columns [`from_shards`] reads from every shard.
struct Wanted {
    id: &'static str,
    label: Option<&'static str>,
    columns: Columns,
}

fn open_shard(file: &Path) -> Result<ParquetRecordBatchReaderBuilder<std::fs::File>> {
    let f = std::fs::File::open(file).with_context(|| format!("could not open '{}'", file.display()))?;
    ParquetRecordBatchReaderBuilder::try_new(f).with_context(|| format!("'{}' is not a Parquet file", file.display()))
}

/// Adds one shard's rows (the columns in `w`) to the table, batch by batch; returns the rows.
/// Columns are read from any Arrow type that means the same — what pyarrow, pandas, polars or
/// Spark write when a user rewrites a shard ([`crate::contract::columns::texts`], [`crate::contract::columns::numbers`]);
/// a class id or a length that is not a whole number in range is an error naming the row.
fn read_shard(file: &Path, w: &Wanted, table: &mut DocTable, split: &str, text_bytes: &mut u64) -> Result<u64> {
    use crate::contract::columns::{numbers, required, texts};
    let builder = open_shard(file)?;
    let c = w.columns;
    let mut names = vec![w.id];
    names.extend(w.label);
    if c.tokens {
        names.push("length");
    }
    if c.noise {
        names.extend(NoiseComponents::COLUMNS);
    }
    if c.text {
        names.push("text");
    }
    let fields = builder.parquet_schema().root_schema().get_fields();
    let roots: Vec<usize> = (0..fields.len()).filter(|&i| names.contains(&fields[i].name())).collect();
    let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
    let mut rows = 0u64;
    for batch in builder.with_projection(mask).build()? {
        let batch = batch?;
        // A class id (any whole number) or a length (`Some(max)`: a whole number in 0..=max).
        let whole = |name: &str, max: Option<u32>| -> Result<Vec<Option<i64>>> {
            let values = numbers(required(&batch, name)?, name, rows)?;
            values
                .into_iter()
                .enumerate()
                .map(|(i, v)| {
                    let row = rows + i as u64;
                    match (v, max) {
                        (Some(x), _) if x.fract() != 0.0 || !x.is_finite() || x.abs() >= 9.0e15 => {
                            bail!("row {row}: column `{name}` holds {x}, not a whole number")
                        }
                        (Some(x), Some(max)) if x < 0.0 || x > max as f64 => {
                            bail!("row {row}: column `{name}` holds {x:.0}, outside 0..={max}")
                        }
                        (v, _) => Ok(v.map(|x| x as i64)),
                    }
                })
                .collect()
        };
        let ids = texts(required(&batch, w.id)?, w.id, rows)?;
        let labels = w.label.map(|l| whole(l, None)).transpose()?;
        let lengths = if c.tokens { Some(whole("length", Some(u32::MAX))?) } else { None };
        let noise: Vec<Vec<Option<f64>>> = if c.noise {
            NoiseComponents::COLUMNS.iter().map(|n| numbers(required(&batch, n)?, n, rows)).collect::<Result<_>>()?
        } else {
            Vec::new()
        };
        let text = if c.text { Some(texts(required(&batch, "text")?, "text", rows)?) } else { None };
        for i in 0..batch.num_rows() {
            let text = text.as_ref().map(|t| t[i].as_deref().unwrap_or(""));
            *text_bytes += text.map_or(0, |t| t.len() as u64);
            let mut values = [0f32; 6];
            for (v, n) in values.iter_mut().zip(&noise) {
                *v = n[i].map_or(f32::NAN, |x| x as f32);
            }
            table.push(Record {
                id: ids[i].as_deref().unwrap_or(""),
                split,
                label: labels.as_ref().and_then(|l| l[i]),
                text,
                measured: None,
                tokens: lengths.as_ref().map(|l| l[i].map_or(0, |n| n as u32)),
                unk: None,
                noise: c.noise.then_some(values),
            });
        }
        rows += batch.num_rows() as u64;
    }
    Ok(rows)
}
