//! `bertpipe stats --leakage EVAL --against TRAIN…`: how many documents of an evaluated split
//! the training corpora already hold, exactly or nearly (MinHash, [`crate::clean::minhash`]).
//!
//! A document of the evaluated split is *leaked* when a training document has the same words
//! (up to case and punctuation: `exact`) or an estimated Jaccard similarity of its 5-word
//! shingles at or above the threshold (`near`, 0.8 by default). Each document is counted once,
//! with its best match. Both sides are read from shard folders that kept their text
//! (`sink.keep_text: true`); windows of one document count as that document.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::clean::minhash::{LshIndex, MinHashParams, MinHasher};
use crate::contract::columns;
use crate::shards::ShardSet;

/// What to compare.
#[derive(Debug, Clone)]
pub struct LeakageOptions {
    /// The shard folder holding the evaluated split.
    pub eval: PathBuf,
    pub split: String,
    /// Training shard folders, each with the splits to read (`None`: all of them; the evaluated
    /// split itself is never read from its own folder).
    pub against: Vec<(PathBuf, Option<String>)>,
    pub params: MinHashParams,
    /// How many leaked documents to list.
    pub listed: usize,
}

/// One leaked document and its best match.
#[derive(Debug, Clone, Serialize)]
pub struct Leak {
    pub id: String,
    /// `FOLDER:SPLIT/ID` of the training document.
    pub matches: String,
    pub similarity: f64,
    pub kind: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeakageReport {
    pub eval: String,
    pub split: String,
    /// The training corpora read, as `FOLDER:SPLIT`, and their documents.
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

/// Calls `each(id, text)` for every document of one split, windows folded into their document
/// (its first row), shard by shard: no text is held beyond one record batch.
fn documents(shards: &ShardSet, split: &str, mut each: impl FnMut(String, &str)) -> Result<usize> {
    let mut seen = std::collections::HashSet::new();
    for shard in 0..shards.shard_rows(split)?.len() {
        for b in shards.shard_batches(split, shard, None)? {
            let b = b?;
            let shown = || shards.shard_shown(split, shard);
            let Some(text) = b.column_by_name("text") else {
                bail!(
                    "{} has no `text` column: leakage compares texts, so the pipeline must keep them (`sink.keep_text: true`)",
                    shown()
                );
            };
            let text = columns::strings(text, "text").with_context(shown)?;
            let ids = columns::strings(b.column_by_name("id").context("no `id` column")?, "id").with_context(shown)?;
            let docs =
                b.column_by_name("doc_id").map(|c| columns::strings(c, "doc_id")).transpose().with_context(shown)?;
            for (i, t) in text.iter().enumerate() {
                let id = docs.as_ref().and_then(|d| d[i].clone()).or_else(|| ids[i].clone()).unwrap_or_default();
                if seen.insert(id.clone()) {
                    each(id, t.as_deref().unwrap_or_default());
                }
            }
        }
    }
    Ok(seen.len())
}

fn same_folder(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

pub fn run(opts: &LeakageOptions) -> Result<LeakageReport> {
    opts.params.check().map_err(|e| anyhow::anyhow!("leakage: {e}"))?;
    if opts.against.is_empty() {
        bail!("--leakage needs at least one --against FOLDER[:SPLIT] to compare with");
    }
    let eval = ShardSet::open(&opts.eval)?;
    let hasher = MinHasher::new(opts.params);
    // The evaluated documents as signatures (448 bytes each), not texts.
    let mut eval_docs = Vec::new();
    documents(&eval, &opts.split, |id, text| {
        let (sig, key) = hasher.sign(text);
        eval_docs.push((id, sig, key))
    })?;
    let mut index = LshIndex::new(&opts.params);
    let mut names: Vec<String> = Vec::new();
    let mut against = Vec::new();
    for (folder, split) in &opts.against {
        let set = ShardSet::open(folder)?;
        let splits: Vec<String> = match split {
            Some(s) => {
                set.split_stats(s)?;
                vec![s.clone()]
            }
            None => set.splits().map(String::from).collect(),
        };
        for s in splits {
            if same_folder(folder, &opts.eval) && s == opts.split {
                if split.is_some() {
                    bail!("--against {}:{s} is the evaluated split itself", folder.display());
                }
                continue;
            }
            let n = documents(&set, &s, |id, text| {
                let (sig, key) = hasher.sign(text);
                index.insert(sig.as_deref(), key, 0);
                names.push(format!("{}:{s}/{id}", folder.display()));
            })?;
            against.push(format!("{}:{s} ({n} documents)", folder.display()));
        }
    }
    let (mut exact, mut near, mut leaks) = (0, 0, Vec::new());
    for (id, sig, key) in &eval_docs {
        if let Some(m) = index.best_match(sig.as_deref(), *key, 0) {
            if m.exact {
                exact += 1;
            } else {
                near += 1;
            }
            if leaks.len() < opts.listed {
                leaks.push(Leak {
                    id: id.clone(),
                    matches: names[m.index as usize].clone(),
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
