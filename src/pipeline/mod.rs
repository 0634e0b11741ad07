//! `pipeline run`: source → steps → ordered sink, with resume and a manifest written last.
//! The run's phases, in [`run`]: find the output, prepare the steps (vocabulary, corpus-level
//! first passes in [`corpus`]), make the output ready (fresh, overwritten or resumed), stream
//! the documents into shards ([`parallel`] keeps input order), write the manifest.

pub mod corpus;
pub mod leakage;
pub mod parallel;
pub mod seen;
pub mod tasks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};

use crate::config::{Pipeline, PipelineStep};
use crate::contract::document::Document;
use crate::contract::manifest::{
    self, Manifest, RejectsInfo, ShardInfo, SpecialIds, SplitStats, TokenizerInfo, REJECTS,
};
use crate::contract::partition::Partition;
use crate::contract::progress::{self, Progress, Total};
use crate::sequence::pretrain::{Masking, PretrainBuilder, PretrainSequences};
use crate::sequence::words::Words;
use crate::sequence::{ClassifySequences, Truncation};
use crate::sink::journal::{self, Journal};
use crate::sink::remote::RemoteOut;
use crate::sink::rows::{DocRows, PretrainRows, RejectRows, RowBuffer, RowLayout};
use crate::sink::shard::{OnShard, ShardWriter};
use crate::sink::{ParquetSink, Sink};
use parallel::{CorpusPart, Outcome};

/// How to run a pipeline (the command-line flags).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Worker threads; 0 means all cores.
    pub threads: usize,
    pub resume: bool,
    pub overwrite: bool,
    pub quiet: bool,
    /// This process's place in a task array: it reads its part of the input and writes
    /// under `<out>/tasks/NNNNN/`.
    pub task: Option<tasks::TaskSpec>,
}

/// What a run did, for the closing summary.
#[derive(Debug)]
pub struct RunSummary {
    pub manifest: Manifest,
    pub elapsed: Duration,
    /// Bytes of document text read (uncompressed, whatever the input format).
    pub text_bytes: u64,
    pub peak_rss: Option<u64>,
    pub kept_shards: usize,
    /// The folder written (a task's own folder in a task array).
    pub out: std::path::PathBuf,
    /// What the source found without being told (`label from field `label``).
    pub found: Vec<String>,
}

pub fn threads_or_default(threads: usize) -> usize {
    if threads > 0 {
        threads
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

pub fn run(pipeline: &Pipeline, opts: &RunOptions) -> Result<RunSummary> {
    let pipeline = &*pipeline.with_labels_found()?;
    let Sink::Parquet(sink) = &pipeline.sink;
    let threads = threads_or_default(opts.threads);
    let config_json = pipeline.canonical_json();
    let config_sha256 = crate::contract::checksum::sha256_bytes(config_json.as_bytes());
    let output = Output::locate(&sink.path, opts.task)?;

    // Load the vocabulary and run any first pass before the output folder is touched, so a
    // bad vocabulary or source leaves no half-made output behind. A task of an array takes
    // what needs the whole corpus (the documents dedup and near_dedup kept, noise quantiles) from the
    // scan phase's files instead.
    // The folders are listed meanwhile (aclImdb's 20,000 names take as long as the vocabulary).
    let _listing = pipeline.source.list_early();
    let mut steps = pipeline.steps.clone();
    let tokenizer = prepare_steps(&mut steps)?;
    let seen = match opts.task {
        Some(task) if task.count > 1 => tasks::resolve_from_scans(&sink.path, &config_sha256, task, &mut steps)?,
        _ => {
            corpus::resolve_noise_quantiles(&pipeline.source, pipeline.seed, &mut steps, threads, opts.quiet)?;
            seen::Seen::for_steps(&steps)
        }
    };
    let input = CorpusPart {
        source: &pipeline.source,
        seed: pipeline.seed,
        part: opts.task.map_or(Partition::WHOLE, |t| t.part()),
        seen,
    };

    let kept = output.prepare(opts, &config_sha256)?;
    let kept_shards = kept.values().map(Vec::len).sum();
    let journal =
        if opts.resume { Journal::append(&output.out)? } else { Journal::create(&output.out, &config_sha256)? };
    let progress = Progress::new(opts.quiet, "run").log_as("pipeline");
    let plan = RowPlan::of(&steps, sink, tokenizer.as_ref());
    // Pretraining rows are built within a task (NSP partners and packed rows never cross a
    // task's boundary); later tasks draw their choices from their own stream, so task k's row
    // n is not masked as task 0's row n is. Task 0 draws what a single run draws.
    let seed = opts.task.map_or(pipeline.seed, |t| tasks::task_seed(pipeline.seed, t.index));
    // Test leakage: only when there is an evaluation split and something to compare it with.
    // A task of an array sees only its part of each split: it leaves its signatures for
    // `shards merge`, which measures the whole.
    let splits = pipeline.source.split_names();
    let in_array = opts.task.is_some_and(|t| t.count > 1);
    let measure_leakage = sink.leakage == crate::sink::LeakageCheck::Auto
        && splits.iter().any(|s| leakage::is_eval_split(s))
        && splits.iter().any(|s| !leakage::is_eval_split(s));
    let leakage_mode = match (measure_leakage, in_array) {
        (false, _) => LeakageMode::Off,
        (true, false) => LeakageMode::Measure,
        (true, true) => LeakageMode::Part,
    };
    let setup = SplitSetup { out: &output.out, sink, kept: &kept, plan: &plan, seed, leakage: leakage_mode };
    let mut written = write_rows(input, &steps, threads, &progress, &setup, output.remote.as_ref(), journal)?;
    progress.finish();
    let leakage_part = match (written.leakage_part.take(), opts.task) {
        (Some(part), Some(task)) => Some(tasks::write_leakage_part(&sink.path, task, &part, &config_sha256)?),
        _ => None,
    };

    let manifest = Manifest {
        format: manifest::FORMAT.into(),
        created_by: format!("bertpipe {}", env!("CARGO_PKG_VERSION")),
        task: plan.shard_kind().into(),
        name: pipeline.name.clone(),
        config: serde_json::from_str(&config_json)?,
        config_sha256,
        tokenizer,
        max_len: plan.max_len().map(|m| m as u32),
        seed: pipeline.seed,
        splits: written.splits,
        rejects: written.rejects,
        tasks: opts.task.map(|t| manifest::TasksInfo { index: Some(t.index), count: t.count }),
        leakage: written.leakage,
        leakage_part,
        warnings: Vec::new(),
        source_files: pipeline.source.files_by_split()?,
        id2label: pipeline.source.id2label(),
    };
    let mut manifest = manifest;
    manifest.warnings = manifest.label_warnings();
    manifest.write(&output.out)?;
    output.finish()?;
    Ok(RunSummary {
        manifest,
        elapsed: progress.elapsed(),
        text_bytes: written.text_bytes,
        peak_rss: progress::peak_rss_bytes(),
        kept_shards,
        out: output.target,
        found: pipeline.detected.clone(),
    })
}

/// Where a run writes: the folder or bucket prefix the user named (a task's own folder in a
/// task array), and the local folder the shards are written in (in a bucket, a staging folder
/// whose shards are uploaded one by one).
struct Output {
    target: PathBuf,
    remote: Option<RemoteOut>,
    out: PathBuf,
}

impl Output {
    fn locate(sink_path: &Path, task: Option<tasks::TaskSpec>) -> Result<Output> {
        let target = match task {
            Some(task) => {
                tasks::prepare_root(sink_path)?;
                task.dir(sink_path)
            }
            None => sink_path.to_path_buf(),
        };
        let remote = if crate::storage::is_remote(sink_path) { Some(RemoteOut::new(&target)?) } else { None };
        let out = remote.as_ref().map_or_else(|| target.clone(), |r| r.staging.clone());
        Ok(Output { target, remote, out })
    }

    /// Makes the output ready; returns the shards of an interrupted run that `--resume` keeps.
    fn prepare(&self, opts: &RunOptions, config_sha256: &str) -> Result<BTreeMap<String, Vec<ShardInfo>>> {
        match &self.remote {
            Some(r) => r.prepare(opts.resume, opts.overwrite, config_sha256),
            None => prepare_output(&self.out, opts, config_sha256),
        }
    }

    /// After the manifest: uploads it (a bucket), or drops the journal (a folder).
    fn finish(&self) -> Result<()> {
        match &self.remote {
            Some(r) => r.finish(),
            None => {
                std::fs::remove_file(self.out.join(manifest::JOURNAL)).ok();
                Ok(())
            }
        }
    }
}

/// What the steps make of a kept document, and so which rows and columns the shards get.
struct RowPlan {
    layout: RowLayout,
    sequencer: Option<ClassifySequences>,
    pretrainer: Option<PretrainSequences>,
    /// The tokenizer's special ids; `None` when the pipeline does not tokenize.
    specials: Option<SpecialIds>,
}

impl RowPlan {
    fn of(steps: &[PipelineStep], sink: &ParquetSink, tokenizer: Option<&TokenizerInfo>) -> RowPlan {
        let sequencer = steps.iter().find_map(PipelineStep::as_classify).cloned();
        let layout = RowLayout {
            scored: steps.iter().any(|s| matches!(s, PipelineStep::NoiseScore(_))),
            keep_text: sink.keep_text,
            sequences: sequencer.is_some(),
            windows: sequencer.as_ref().is_some_and(|c| c.truncation == Truncation::Window),
        };
        RowPlan {
            layout,
            pretrainer: steps.iter().find_map(PipelineStep::as_pretrain).cloned(),
            sequencer,
            specials: tokenizer.map(|t| t.special_ids),
        }
    }

    fn tokenized(&self) -> bool {
        self.specials.is_some()
    }

    /// The manifest's `task`: what the shards hold.
    fn shard_kind(&self) -> &'static str {
        if self.layout.sequences {
            "classify"
        } else if self.pretrainer.is_some() {
            "pretrain"
        } else if self.tokenized() {
            "tokenize"
        } else {
            "clean"
        }
    }

    fn max_len(&self) -> Option<usize> {
        self.sequencer.as_ref().map(|c| c.max_len).or(self.pretrainer.as_ref().map(|p| p.max_len))
    }
}

/// What the writing phase produced.
struct Written {
    splits: BTreeMap<String, SplitStats>,
    rejects: RejectsInfo,
    /// Bytes of document text read.
    text_bytes: u64,
    leakage: BTreeMap<String, manifest::LeakageInfo>,
    /// A task's documents for the merged leakage measure.
    leakage_part: Option<leakage::Part>,
}

/// Runs `finish` with a shard callback that only collects, so the shards can be reported later,
/// in order, from the thread that holds the journal.
fn collecting_shards(finish: impl FnOnce(&mut OnShard) -> Result<()>) -> (Vec<(String, ShardInfo)>, Result<()>) {
    let mut done = Vec::new();
    let result = finish(&mut |folder: &str, info: &ShardInfo| {
        done.push((folder.to_string(), info.clone()));
        Ok(())
    });
    (done, result)
}

/// The streaming phase: every document of `input` through the steps, in input order, into
/// its split's shards or the rejects; each completed shard journaled (and uploaded).
fn write_rows(
    input: CorpusPart,
    steps: &[PipelineStep],
    threads: usize,
    progress: &Progress,
    setup: &SplitSetup,
    remote: Option<&RemoteOut>,
    mut journal: Journal,
) -> Result<Written> {
    // Test hook: the process aborts after this many shards are complete (a simulated crash).
    let crash_after = crate::contract::test_hook("BERTPIPE_CRASH_AFTER_SHARDS").map(|n| n as usize);
    // Test hook: the run waits after this many shards until it is stopped from outside (a
    // scheduler's cancel), so a test can kill it mid-run at a known point.
    let pause_after = crate::contract::test_hook("BERTPIPE_PAUSE_AFTER_SHARDS").map(|n| n as usize);
    let mut shards_done = 0usize;
    let mut on_shard = |folder: &str, info: &ShardInfo| -> Result<()> {
        journal.record(folder, info)?;
        if let Some(r) = remote {
            r.shard_done(info)?;
        }
        shards_done += 1;
        if crash_after == Some(shards_done) {
            std::process::abort();
        }
        if pause_after == Some(shards_done) {
            eprintln!("paused after {shards_done} shards (BERTPIPE_PAUSE_AFTER_SHARDS)");
            while !crate::contract::interrupt::requested() {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            anyhow::bail!("interrupted while paused after {shards_done} shards");
        }
        Ok(())
    };
    let (sink, plan) = (setup.sink, setup.plan);
    let mut splits: BTreeMap<String, SplitOutput> = BTreeMap::new();
    let mut rejects = RejectRows::default();
    let mut reject_writer = ShardWriter::new(
        setup.out,
        REJECTS,
        rejects.schema(),
        sink,
        setup.kept.get(REJECTS).cloned().unwrap_or_default(),
    );
    let set_total = |t: Total| progress.set_total(t);
    let signer = leakage::Signer::new();
    let sign = |doc: &Document| (setup.leakage != LeakageMode::Off).then(|| signer.sign(doc));
    let mut seen = leakage::Leakage::default();
    let mut part = (setup.leakage == LeakageMode::Part).then(leakage::Part::default);
    let text_bytes = parallel::process_with(input, steps, threads, &set_total, &sign, |outcome, signature| {
        progress.advance(outcome.input_bytes(), 1);
        match outcome {
            Outcome::Kept(doc) => {
                let split = splits.entry(doc.split.clone()).or_insert_with(|| SplitOutput::new(&doc.split, setup));
                split.add(&doc, plan, &mut on_shard)?;
                if let Some(Some(sig)) = signature {
                    match &mut part {
                        Some(part) => part.add(&doc, sig),
                        None => seen.add(&doc, sig),
                    }
                }
            }
            Outcome::Rejected(r) => {
                let split = splits.entry(r.split.clone()).or_insert_with(|| SplitOutput::new(&r.split, setup));
                split.stats.docs_in += 1;
                *split.stats.rejected.entry(r.reason_key().to_string()).or_default() += 1;
                rejects.push(&r);
                reject_writer.take(&mut rejects, false, &mut on_shard)?;
            }
        }
        Ok(())
    })?;
    // The last row group of every split (and of the rejects) is encoded, compressed and synced
    // at once, each on its own thread, while this one measures leakage: one after another they
    // were the run's serial tail (a tenth of an IMDb run's wall on two cores). The shards are
    // then reported in the order a sequential finish reports them, so the journal is the same.
    let (finished, leakage) = std::thread::scope(|scope| {
        let mut jobs = Vec::new();
        for split in splits.values_mut() {
            jobs.push(scope.spawn(move || collecting_shards(|on| split.finish(on))));
        }
        let (reject_writer, rejects) = (&mut reject_writer, &mut rejects);
        jobs.push(scope.spawn(move || {
            collecting_shards(|on| reject_writer.take(rejects, true, on).and_then(|()| reject_writer.finish(on)))
        }));
        let leakage = seen.finish();
        let finished: Vec<_> =
            jobs.into_iter().map(|j| j.join().unwrap_or_else(|p| std::panic::resume_unwind(p))).collect();
        (finished, leakage)
    });
    for (done, result) in finished {
        for (folder, info) in &done {
            on_shard(folder, info)?;
        }
        result?;
    }
    let splits = splits.into_iter().map(|(name, split)| (name, split.into_stats(plan))).collect();
    Ok(Written {
        splits,
        rejects: RejectsInfo { rows: reject_writer.rows_written(), shards: reject_writer.shards },
        text_bytes,
        leakage,
        leakage_part: part,
    })
}
struct SplitOutput {
    rows: SplitRows,
    writer: ShardWriter,
    stats: SplitStats,
    /// Tokens in the written rows, specials included.
    row_tokens: u64,
}

/// How a split turns documents into rows.
enum SplitRows {
    /// One row per document, or per sequence. (Both variants are boxed: a few builders, once
    /// per split.)
    Docs(Box<DocRows>),
    /// Pretraining rows, built across documents.
    Pretrain(Box<(PretrainBuilder, PretrainRows)>),
}

/// What every split of a run shares when it starts writing.
struct SplitSetup<'a> {
    out: &'a Path,
    sink: &'a ParquetSink,
    kept: &'a BTreeMap<String, Vec<ShardInfo>>,
    plan: &'a RowPlan,
    seed: u64,
    /// Whether and how the run measures test leakage (the manifest's `leakage`).
    leakage: LeakageMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeakageMode {
    Off,
    /// A single run: measured, into the manifest.
    Measure,
    /// A task of an array: its documents' signatures, for `shards merge` to measure.
    Part,
}

impl SplitOutput {
    fn new(split: &str, setup: &SplitSetup) -> Self {
        let rows = match &setup.plan.pretrainer {
            Some(p) => {
                let s = setup.plan.specials.expect("pretraining has a tokenizer");
                SplitRows::Pretrain(Box::new((
                    PretrainBuilder::new(p, setup.seed, s),
                    PretrainRows::new(p.nsp, p.masking == Masking::Static),
                )))
            }
            None => SplitRows::Docs(Box::new(DocRows::new(setup.plan.layout))),
        };
        let schema = match &rows {
            SplitRows::Docs(r) => r.schema(),
            SplitRows::Pretrain(p) => p.1.schema(),
        };
        let writer =
            ShardWriter::new(setup.out, split, schema, setup.sink, setup.kept.get(split).cloned().unwrap_or_default());
        SplitOutput { rows, writer, stats: SplitStats::default(), row_tokens: 0 }
    }

    /// Counts a kept document and writes its rows.
    fn add(&mut self, doc: &Document, plan: &RowPlan, on_shard: &mut OnShard) -> Result<()> {
        self.stats.docs_in += 1;
        self.stats.docs_out += 1;
        self.stats.unlabelled += doc.label.is_none() as u64;
        self.stats.utf8_replaced += doc.utf8_replaced as u64;
        let rows = self.push(doc, on_shard)?;
        if plan.tokenized() {
            let t = self.stats.tokenization.get_or_insert_with(Default::default);
            t.document_tokens += doc.tokens.len() as u64;
            t.unk_tokens += doc.unk_tokens as u64;
            t.tokens_dropped += doc.dropped_tokens as u64;
            t.rows_per_doc_max = t.rows_per_doc_max.max(rows);
            if let Some(c) = &plan.sequencer {
                t.docs_over_max_len += (doc.tokens.len() > c.content_len()) as u64;
                self.row_tokens += doc.sequences.iter().map(|s| s.len() as u64).sum::<u64>();
            }
        }
        Ok(())
    }

    /// The split's figures for the manifest, once its last shard is written.
    fn into_stats(self, plan: &RowPlan) -> SplitStats {
        let mut stats = self.stats;
        stats.rows = self.writer.rows_written();
        stats.shards = self.writer.shards;
        stats.finish();
        if plan.layout.sequences {
            stats.tokens = Some(self.row_tokens);
        }
        if let Some(p) = &stats.pretraining {
            stats.tokens = Some(p.tokens);
        }
        debug_assert_eq!(stats.docs_in, stats.docs_out + stats.rejected_total());
        stats
    }

    /// Buffers the document's rows, handing full batches to the shard writer; returns how many
    /// rows the document completed.
    fn push(&mut self, doc: &Document, on_shard: &mut OnShard) -> Result<u64> {
        match &mut self.rows {
            SplitRows::Docs(rows) => {
                let n = rows.push(doc) as u64;
                self.writer.take(&mut **rows, false, on_shard)?;
                Ok(n)
            }
            SplitRows::Pretrain(pretrain) => {
                let (builder, rows) = &mut **pretrain;
                let built = builder.add(doc);
                for row in &built {
                    rows.push(row);
                    self.writer.take(rows, false, on_shard)?;
                }
                Ok(built.len() as u64)
            }
        }
    }

    /// Writes what is still buffered and completes the last shard.
    fn finish(&mut self, on_shard: &mut OnShard) -> Result<()> {
        match &mut self.rows {
            SplitRows::Docs(rows) => self.writer.take(&mut **rows, true, on_shard)?,
            SplitRows::Pretrain(pretrain) => {
                let (builder, rows) = &mut **pretrain;
                for row in builder.finish() {
                    rows.push(&row);
                    self.writer.take(rows, false, on_shard)?;
                }
                self.writer.take(rows, true, on_shard)?;
                self.stats.pretraining = Some(builder.stats.clone());
            }
        }
        self.writer.finish(on_shard)
    }
}

/// Loads what steps need before the first document (the vocabulary) and hands the tokenizer's
/// special ids to the sequence step. Returns the tokenizer's description for the manifest.
pub fn prepare_steps(steps: &mut [PipelineStep]) -> Result<Option<TokenizerInfo>> {
    let wants_sentences = steps.iter().any(|s| matches!(s, PipelineStep::PretrainSequences(_)));
    let mut info: Option<TokenizerInfo> = None;
    let mut words = Words::default();
    for step in steps.iter_mut() {
        match step {
            PipelineStep::Tokenize(t) => {
                t.sentences = wants_sentences;
                info = Some(t.prepare()?);
                if wants_sentences {
                    words = t.encoder.as_ref().expect("just prepared").words();
                }
            }
            PipelineStep::ClassifySequences(c) => {
                c.specials =
                    Some(info.as_ref().context("classify_sequences needs a tokenize step before it")?.special_ids);
            }
            PipelineStep::PretrainSequences(p) => {
                let t = info.as_ref().context("pretrain_sequences needs a tokenize step before it")?;
                // Static masking happens before a model is chosen: BERT's rate unless set.
                let rate = crate::sequence::pretrain::DEFAULT_MASKED_LM_PROB;
                p.mask_spec = Some(p.mask_spec(t, std::mem::take(&mut words), rate)?);
            }
            _ => {}
        }
    }
    Ok(info)
}

/// Makes the output folder ready: fresh, overwritten, or — with `--resume` — cleaned of
/// everything but the shards an interrupted run finished and that still verify.
fn prepare_output(out: &Path, opts: &RunOptions, config_sha256: &str) -> Result<BTreeMap<String, Vec<ShardInfo>>> {
    let exists_nonempty = out.is_dir() && std::fs::read_dir(out)?.next().is_some();
    let ours = out.join(manifest::MANIFEST).exists() || out.join(manifest::JOURNAL).exists();
    if opts.resume {
        if out.join(manifest::MANIFEST).exists() {
            bail!("'{}' is already complete (manifest.json exists); nothing to resume", out.display());
        }
        if !exists_nonempty {
            bail!("'{}' holds no interrupted run to resume; run without --resume", out.display());
        }
        let kept = Journal::verified_shards(out, config_sha256)?;
        for stale in journal::stale_files(out, &kept)? {
            std::fs::remove_file(&stale).with_context(|| format!("could not remove '{}'", stale.display()))?;
        }
        return Ok(kept);
    }
    if exists_nonempty {
        if !opts.overwrite {
            bail!(
                "output '{}' is not empty; pass --overwrite to replace it{}",
                out.display(),
                if out.join(manifest::JOURNAL).exists() { ", or --resume to finish the interrupted run" } else { "" }
            );
        }
        if !ours {
            bail!("refusing to overwrite '{}': it has no manifest.json or journal, so it does not look like bertpipe output", out.display());
        }
        let entries = own_entries(out)?;
        // The manifest first, so a reader never sees it next to missing shards.
        let manifest = out.join(manifest::MANIFEST);
        if manifest.exists() {
            std::fs::remove_file(&manifest).with_context(|| format!("could not remove '{}'", manifest.display()))?;
        }
        for entry in entries.iter().filter(|p| **p != manifest) {
            let removed = if entry.is_dir() { std::fs::remove_dir_all(entry) } else { std::fs::remove_file(entry) };
            removed.with_context(|| format!("could not remove '{}'", entry.display()))?;
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("could not create '{}'", out.display()))?;
    Ok(BTreeMap::new())
}

/// The top-level entries of an output folder that `--overwrite` removes, after checking that
/// everything under it is of the shard layout ([`manifest::is_layout_file`]): a folder that
/// holds anything else (a user's file, a link) is refused, naming it.
fn own_entries(out: &Path) -> Result<Vec<PathBuf>> {
    fn walk(out: &Path, dir: &Path, rel: &str) -> Result<()> {
        let entries = std::fs::read_dir(dir).with_context(|| format!("could not list '{}'", dir.display()))?;
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() { name } else { format!("{rel}/{name}") };
            let kind = entry.file_type()?;
            let ours = if kind.is_dir() {
                manifest::is_layout_dir(&rel)
            } else {
                kind.is_file() && manifest::is_layout_file(&rel)
            };
            if !ours {
                bail!(
                    "refusing to overwrite '{}': it holds '{}', which is not part of bertpipe's output (move it away, or choose another sink.path)",
                    out.display(),
                    entry.path().display()
                );
            }
            if kind.is_dir() {
                walk(out, &entry.path(), &rel)?;
            }
        }
        Ok(())
    }
    walk(out, out, "")?;
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(out)? {
        entries.push(entry?.path());
    }
    Ok(entries)
}

/// The closing summary printed after a run.
pub fn format_summary(s: &RunSummary) -> String {
    let m = &s.manifest;
    let mut lines = Vec::new();
    let (mut docs_in, mut docs_out, mut shards) = (0u64, 0u64, 0usize);
    for (name, st) in &m.splits {
        docs_in += st.docs_in;
        docs_out += st.docs_out;
        shards += st.shards.len();
        let mut line = format!(
            "  {name:<8} {:>9} in {:>9} out {:>8} rejected  {:>3} shards",
            st.docs_in,
            st.docs_out,
            st.rejected_total(),
            st.shards.len()
        );
        if !st.rejected.is_empty() {
            let reasons: Vec<String> = st.rejected.iter().map(|(k, v)| format!("{k} {v}")).collect();
            line.push_str(&format!("  ({})", reasons.join(", ")));
        }
        if let Some(p) = &st.pretraining {
            line.push_str(&format!(
                "  {} rows, {} tokens, masked {:.2}%, NSP random {:.1}%, packing {:.1}%",
                p.rows,
                p.tokens,
                100.0 * p.masked_fraction,
                100.0 * p.nsp_random_share,
                100.0 * p.packing_efficiency
            ));
        } else if let (Some(tokens), Some(t)) = (st.tokens, &st.tokenization) {
            line.push_str(&format!(
                "  {} rows, {tokens} tokens, {} docs over max_len, [UNK] {:.3}%",
                st.rows,
                t.docs_over_max_len,
                100.0 * t.unk_rate
            ));
        }
        if st.utf8_replaced > 0 {
            line.push_str(&format!("  [{} with invalid UTF-8 replaced]", st.utf8_replaced));
        }
        lines.push(line);
    }
    let secs = s.elapsed.as_secs_f64().max(1e-6);
    let mut head = format!(
        "{}: {docs_in} docs in, {docs_out} out, {} rejected, {shards} shards in {:.2}s ({:.0} docs/s, {:.1} MB/s of text",
        m.name,
        docs_in - docs_out,
        secs,
        docs_in as f64 / secs,
        s.text_bytes as f64 / 1e6 / secs
    );
    if let Some(rss) = s.peak_rss {
        head.push_str(&format!(", peak RSS {}", progress::human_bytes(rss)));
    }
    head.push(')');
    if s.kept_shards > 0 {
        head.push_str(&format!("; resumed, {} verified shards kept", s.kept_shards));
    }
    lines.insert(0, head);
    if !s.found.is_empty() {
        lines.insert(1, format!("  found: {}", s.found.join(", ")));
    }
    for w in &m.warnings {
        lines.push(format!("  warning: {w}"));
    }
    if m.rejects.rows > 0 {
        lines.push(format!("  rejects: {} rows in {}/{}/", m.rejects.rows, s.out.display(), REJECTS));
    }
    lines.join("\n")
}
