//! `bertpipe stats --leakage EVAL --against TRAIN…`: how many documents of an evaluated split
//! the training corpora already hold, exactly or nearly (MinHash, [`crate::clean::minhash`]).
//!
//! A document of the evaluated split is *leaked* when a training document has the same words
//! (up to case and punctuation: `exact`) or an estimated Jaccard similarity of its 5-word
//! shingles at or above the threshold (`near`, 0.8 by default). Each document is counted once,
//! with its best match. Either side is a shard folder that kept its text
//! (`sink.keep_text: true`; windows of one document count as that document), a pipeline (its
//! cleaned documents, as it would write them: every step but the sequence building runs), or a
//! source (an aclImdb folder or .tar.gz, a .jsonl / .csv / … file, read as it is). An input
//! named on both sides is read once.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rayon::prelude::*;
use serde::Serialize;

use crate::clean::dedup::IdArena;
use crate::clean::minhash::{LshIndex, MinHashParams, MinHasher};
use crate::config::Pipeline;
use crate::contract::columns;
use crate::contract::document::Sketch;
use crate::contract::progress::{Progress, Total};
use crate::pipeline::parallel::{self, CorpusPart, Outcome};
use crate::shards::ShardSet;
use crate::stats::collect::{self, InputKind};

/// What to compare.
#[derive(Debug, Clone)]
pub struct LeakageOptions {
    /// The shard folder, pipeline or source holding the evaluated split.
    pub eval: PathBuf,
    pub split: String,
    /// Training corpora, each with the splits to read (`None`: all of them; the evaluated split
    /// itself is never read from its own input).
    pub against: Vec<(PathBuf, Option<String>)>,
    pub params: MinHashParams,
    /// How many leaked documents to list.
    pub listed: usize,
    /// `--set key=value` overrides for every pipeline or source read.
    pub set: Vec<String>,
    pub threads: usize,
    pub quiet: bool,
}

/// One leaked document and its best match.
#[derive(Debug, Clone, Serialize)]
pub struct Leak {
    pub id: String,
    /// `INPUT:SPLIT/ID` of the training document.
    pub matches: String,
    pub similarity: f64,
    pub kind: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeakageReport {
    pub eval: String,
    pub split: String,
    /// The training corpora read, as `INPUT:SPLIT (N documents)`.
    pub against: Vec<String>,
    pub training_documents: usize,
    pub documents: usize,
    pub exact: usize,
    pub near: usize,
    /// exact + near.
    pub leaked: usize,
    /// leaked / documents.
    pub share: f64,
    pub ngram: usize,
    pub bands: usize,
    pub rows: usize,
    pub threshold: f64,
    /// The leaked documents (at most `listed`), in the split's order.
    pub leaks: Vec<Leak>,
}

/// One input of the comparison, opened.
enum Corpus {
    Shards(Box<ShardSet>),
    /// A pipeline, or a source read through an empty one.
    Pipeline(Box<Pipeline>),
}

impl Corpus {
    fn open(path: &Path, set: &[String], quiet: bool) -> Result<Corpus> {
        let (located, kind) = collect::locate(path, quiet)?;
        let path = located.as_path();
        let config = |e: crate::config::ConfigErrors| anyhow::anyhow!("{e}");
        Ok(match kind {
            InputKind::Shards => {
                if !set.is_empty() {
                    bail!("--set applies to pipelines and sources, not to the shard folder '{}'", path.display());
                }
                Corpus::Shards(Box::new(ShardSet::open_with(path, quiet)?))
            }
            InputKind::Pipeline => Corpus::Pipeline(Box::new(Pipeline::load(path, set).map_err(config)?)),
            InputKind::Source(kind) => {
                Corpus::Pipeline(Box::new(collect::source_pipeline(path, kind, set).map_err(config)?))
            }
        })
    }

    /// The splits this input can hold, in its order.
    fn splits(&self) -> Vec<String> {
        match self {
            Corpus::Shards(s) => s.splits().map(String::from).collect(),
            Corpus::Pipeline(p) => p.source.split_names(),
        }
    }

    /// Calls `each(split, id, signature, words key)` for every document of the splits `wanted`
    /// accepts, in the input's order: shards through [`shard_documents`]; a pipeline through its
    /// steps up to the sequence building, the signatures computed on its workers.
    fn each_signed(
        &self,
        shown: &str,
        wanted: &(dyn Fn(&str) -> bool + Sync),
        hasher: &MinHasher,
        opts: &LeakageOptions,
        mut each: impl FnMut(&str, &str, Sketch, u64),
    ) -> Result<()> {
        match self {
            Corpus::Shards(shards) => {
                for split in self.splits().into_iter().filter(|s| wanted(s)) {
                    shard_documents(shards, &split, hasher, &mut each)?;
                }
            }
            Corpus::Pipeline(p) => {
                let mut steps = collect::document_steps(p);
                crate::pipeline::prepare_steps(&mut steps)?;
                let threads = crate::pipeline::threads_or_default(opts.threads);
                crate::pipeline::corpus::resolve_noise_quantiles(&p.source, p.seed, &mut steps, threads, opts.quiet)?;
                let progress = Progress::new(opts.quiet, "leakage");
                let set_total = |t: Total| progress.set_total(t);
                let sign =
                    |doc: &crate::contract::document::Document| wanted(&doc.split).then(|| hasher.sketch(&doc.text, 0));
                parallel::process_with(
                    CorpusPart::whole(&p.source, p.seed, &steps),
                    &steps,
                    threads,
                    &set_total,
                    &sign,
                    |outcome, signed| {
                        progress.advance(outcome.input_bytes(), 1);
                        if let (Outcome::Kept(doc), Some(Some((sig, key)))) = (outcome, signed) {
                            each(&doc.split, &doc.id, sig, key);
                        }
                        Ok(())
                    },
                )
                .with_context(|| format!("while reading {shown}"))?;
                progress.finish();
            }
        }
        Ok(())
    }
}

/// Every document of one split of a shard folder, signed: windows folded into their document
/// (its first row), one record batch of text at a time, signed in parallel.
fn shard_documents(
    shards: &ShardSet,
    split: &str,
    hasher: &MinHasher,
    each: &mut impl FnMut(&str, &str, Sketch, u64),
) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for shard in 0..shards.shard_rows(split)?.len() {
        for b in shards.shard_batches(split, shard, None)? {
            let b = b?;
            let shown = || shards.shard_shown(split, shard);
            let Some(text) = b.column_by_name("text") else {
                bail!(
                    "{} has no `text` column: leakage compares texts, so the pipeline must keep them (`sink.keep_text: true`), or name the pipeline itself",
                    shown()
                );
            };
            let text = columns::strings(text, "text").with_context(shown)?;
            let ids = columns::strings(b.column_by_name("id").context("no `id` column")?, "id").with_context(shown)?;
            let docs =
                b.column_by_name("doc_id").map(|c| columns::strings(c, "doc_id")).transpose().with_context(shown)?;
            let firsts: Vec<(String, &str)> = text
                .iter()
                .enumerate()
                .filter_map(|(i, t)| {
                    let id = docs.as_ref().and_then(|d| d[i].clone()).or_else(|| ids[i].clone()).unwrap_or_default();
                    seen.insert(id.clone()).then(|| (id, t.as_deref().unwrap_or_default()))
                })
                .collect();
            let signed: Vec<(Sketch, u64)> = firsts.par_iter().map(|(_, t)| hasher.sketch(t, 0)).collect();
            for ((id, _), (sig, key)) in firsts.iter().zip(signed) {
                each(split, id, sig, key);
            }
        }
    }
    Ok(())
}

fn same_input(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// Which splits of one input are read, and as what.
struct Reading {
    path: PathBuf,
    /// The evaluated split comes from this input.
    eval: bool,
    /// Training splits: `None` reads all (but the evaluated split of the evaluated input).
    against: Vec<Option<String>>,
}

pub fn run(opts: &LeakageOptions) -> Result<LeakageReport> {
    opts.params.check().map_err(|e| anyhow::anyhow!("leakage: {e}"))?;
    if opts.against.is_empty() {
        bail!("--leakage needs at least one --against INPUT[:SPLIT] to compare with");
    }
    // Each distinct input once, the evaluated one first.
    let mut readings = vec![Reading { path: opts.eval.clone(), eval: true, against: Vec::new() }];
    for (path, split) in &opts.against {
        match readings.iter_mut().find(|r| same_input(&r.path, path)) {
            Some(r) => r.against.push(split.clone()),
            None => readings.push(Reading { path: path.clone(), eval: false, against: vec![split.clone()] }),
        }
    }
    let hasher = MinHasher::new(opts.params);
    let mut eval_docs: Vec<(String, Sketch, u64)> = Vec::new();
    let mut index = LshIndex::new(&opts.params);
    // Per training document: which `INPUT:SPLIT` it came from, and its id.
    let (mut labels, mut label_of, mut ids): (Vec<String>, Vec<u16>, IdArena) = Default::default();
    let mut against = Vec::new();
    for reading in &readings {
        let shown = reading.path.display().to_string();
        let corpus = Corpus::open(&reading.path, &opts.set, opts.quiet)?;
        let splits = corpus.splits();
        if reading.eval && !splits.contains(&opts.split) {
            bail!("{shown} has no split `{}` to evaluate (it has: {})", opts.split, splits.join(", "));
        }
        let mut training: Vec<String> = Vec::new();
        for wanted in &reading.against {
            match wanted {
                Some(s) if reading.eval && *s == opts.split => {
                    bail!("--against {shown}:{s} is the evaluated split itself")
                }
                Some(s) if !splits.contains(s) => {
                    bail!("{shown} has no split `{s}` (it has: {})", splits.join(", "))
                }
                Some(s) => training.push(s.clone()),
                None => training.extend(splits.iter().filter(|s| !(reading.eval && **s == opts.split)).cloned()),
            }
        }
        training.sort_by_key(|s| splits.iter().position(|x| x == s));
        training.dedup();
        let first_label = labels.len();
        labels.extend(training.iter().map(|s| format!("{shown}:{s}")));
        let mut counts = vec![0usize; training.len()];
        let is_eval = |s: &str| reading.eval && s == opts.split;
        let wanted = |s: &str| is_eval(s) || training.iter().any(|t| t == s);
        corpus.each_signed(&shown, &wanted, &hasher, opts, |split, id, sig, key| {
            if is_eval(split) {
                eval_docs.push((id.to_string(), sig, key));
            } else if let Some(t) = training.iter().position(|t| t == split) {
                index.insert(&sig, key, 0);
                label_of.push((first_label + t) as u16);
                ids.push(id);
                counts[t] += 1;
            }
        })?;
        against.extend(training.iter().zip(&counts).map(|(s, n)| format!("{shown}:{s} ({n} documents)")));
    }
    if index.is_empty() && against.is_empty() {
        bail!("--against names no training split to compare with");
    }
    let (mut exact, mut near, mut leaks) = (0, 0, Vec::new());
    for (id, sig, key) in &eval_docs {
        if let Some(m) = index.best_match(sig, *key, 0) {
            if m.exact {
                exact += 1;
            } else {
                near += 1;
            }
            if leaks.len() < opts.listed {
                leaks.push(Leak {
                    id: id.clone(),
                    matches: format!("{}/{}", labels[label_of[m.index as usize] as usize], ids.get(m.index)),
                    similarity: m.similarity,
                    kind: if m.exact { "exact" } else { "near" },
                });
            }
        }
    }
    let p = opts.params;
    Ok(LeakageReport {
        eval: opts.eval.display().to_string(),
        split: opts.split.clone(),
        against,
        training_documents: index.len(),
        documents: eval_docs.len(),
        exact,
        near,
        leaked: exact + near,
        share: (exact + near) as f64 / eval_docs.len().max(1) as f64,
        ngram: p.ngram,
        bands: p.bands,
        rows: p.rows,
        threshold: p.threshold,
        leaks,
    })
}

pub fn format(r: &LeakageReport) -> String {
    let mut out = vec![format!(
        "leakage of `{}` in {}: {} of {} documents ({:.2}%) are in the training corpora — {} exact, {} near (MinHash {}-word shingles, {}×{} bands, Jaccard ≥ {})",
        r.split,
        r.eval,
        r.leaked,
        r.documents,
        100.0 * r.share,
        r.exact,
        r.near,
        r.ngram,
        r.bands,
        r.rows,
        r.threshold
    )];
    out.push(format!("against {} training documents: {}", r.training_documents, r.against.join(", ")));
    for l in &r.leaks {
        out.push(format!("  {:<28} {:<5} {:.3}  {}", l.id, l.kind, l.similarity, l.matches));
    }
    if r.leaked > r.leaks.len() {
        out.push(format!("  … {} more", r.leaked - r.leaks.len()));
    }
    out.join("\n") + "\n"
}
