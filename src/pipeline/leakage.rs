//! The manifest's `leakage` block: while a pipeline writes, the documents of its evaluation
//! splits (`test`, `validation`, `valid`, `dev`, `eval`) are compared with every other split's,
//! exactly (the same words, up to case and punctuation) and nearly (MinHash, estimated Jaccard
//! of 5-word shingles ≥ 0.8: [`crate::clean::minhash`]'s defaults, as `stats --leakage` and
//! `near_dedup` use them). Workers compute the signatures; here they are kept — the other
//! splits' in LSH buckets (about 0.8 KB a document), the evaluation splits' as signatures — and
//! compared when the last document is in, since the splits may come in any order.

use std::collections::BTreeMap;

use crate::clean::minhash::{LshIndex, MinHashParams, MinHasher, Signature};
use crate::contract::document::Document;
use crate::contract::manifest::{LeakageInfo, LeakedDoc};

/// Split names read as evaluation splits.
pub const EVAL_SPLITS: [&str; 5] = ["test", "validation", "valid", "dev", "eval"];

pub fn is_eval_split(split: &str) -> bool {
    EVAL_SPLITS.contains(&split)
}

/// What a worker computes for one kept document.
pub struct DocSignature {
    signature: Option<Signature>,
    words: u64,
}

/// Computes signatures on the workers.
pub struct Signer {
    hasher: MinHasher,
}

impl Signer {
    pub fn new() -> Signer {
        Signer { hasher: MinHasher::new(MinHashParams::default()) }
    }

    pub fn sign(&self, doc: &Document) -> DocSignature {
        let (signature, words) = self.hasher.sign(&doc.text);
        DocSignature { signature, words }
    }
}

impl Default for Signer {
    fn default() -> Self {
        Signer::new()
    }
}

/// The documents seen so far, on the ordered consumer.
pub struct Leakage {
    params: MinHashParams,
    index: LshIndex,
    /// Per indexed document: its split (an index into `splits`) and id.
    names: Vec<(u16, String)>,
    splits: Vec<String>,
    eval: BTreeMap<String, Vec<(String, DocSignature)>>,
}

impl Default for Leakage {
    fn default() -> Self {
        let params = MinHashParams::default();
        Leakage { params, index: LshIndex::new(&params), names: Vec::new(), splits: Vec::new(), eval: BTreeMap::new() }
    }
}

impl Leakage {
    pub fn add(&mut self, doc: &Document, sig: DocSignature) {
        if is_eval_split(&doc.split) {
            self.eval.entry(doc.split.clone()).or_default().push((doc.id.clone(), sig));
            return;
        }
        let split = match self.splits.iter().position(|s| *s == doc.split) {
            Some(i) => i,
            None => {
                self.splits.push(doc.split.clone());
                self.splits.len() - 1
            }
        };
        self.index.insert(sig.signature.as_deref(), sig.words, 0);
        self.names.push((split as u16, doc.id.clone()));
    }

    /// Each evaluation split's figures, when there is something to compare it with.
    pub fn finish(self) -> BTreeMap<String, LeakageInfo> {
        let mut out = BTreeMap::new();
        if self.index.is_empty() {
            return out;
        }
        let mut against = self.splits.clone();
        against.sort();
        for (split, docs) in self.eval {
            let (mut exact, mut near, mut leaks) = (0u64, 0u64, Vec::new());
            for (id, sig) in &docs {
                if let Some(m) = self.index.best_match(sig.signature.as_deref(), sig.words, 0) {
                    if m.exact {
                        exact += 1;
                    } else {
                        near += 1;
                    }
                    let (s, name) = &self.names[m.index as usize];
                    leaks.push(LeakedDoc {
                        id: id.clone(),
                        matches: format!("{}/{name}", self.splits[*s as usize]),
                        similarity: m.similarity,
                        exact: m.exact,
                    });
                }
            }
            let p = self.params;
            out.insert(
                split,
                LeakageInfo {
                    against: against.clone(),
                    documents: docs.len() as u64,
                    against_documents: self.index.len() as u64,
                    exact,
                    near,
                    leaked: exact + near,
                    share: (exact + near) as f64 / docs.len().max(1) as f64,
                    ngram: p.ngram,
                    bands: p.bands,
                    rows: p.rows,
                    threshold: p.threshold,
                    leaks,
                },
            );
        }
        out
    }
}
