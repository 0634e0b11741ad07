//! `near_dedup`: near-duplicates after cleaning, by MinHash ([`crate::clean::minhash`]).
//! Workers compute each document's signature; the ordered stage looks it up among the
//! documents kept so far and rejects it as `near_duplicate_of:<id> (similarity S)` when an
//! earlier one's estimated Jaccard similarity is at or above the threshold — so the first
//! document in input order is the one kept, whatever the thread count.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::clean::dedup::{DedupScope, IdArena};
use crate::clean::minhash::{LshIndex, MinHashParams, MinHasher};
use crate::contract::document::{Document, NearKey, OrderKey};
use crate::contract::{Step, Verdict};

/// Reject documents whose 5-word shingles overlap an earlier kept document's by an estimated
/// Jaccard similarity of `threshold` or more. Documents without words pass untouched (`dedup`
/// and `filter` are the steps for those).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NearDedup {
    /// `split` (default): near-duplicates count within a split; `global`: across splits too.
    pub scope: DedupScope,
    /// Words per shingle.
    pub ngram: usize,
    /// LSH bands, and hashes per band: `bands × rows` hashes per signature.
    pub bands: usize,
    pub rows: usize,
    pub threshold: f64,
    /// The hash functions' seed (not the pipeline's: changing the split seed changes no verdict).
    pub seed: u64,
    #[serde(skip)]
    hasher: OnceLock<MinHasher>,
}

impl Default for NearDedup {
    fn default() -> Self {
        let p = MinHashParams::default();
        NearDedup {
            scope: DedupScope::Split,
            ngram: p.ngram,
            bands: p.bands,
            rows: p.rows,
            threshold: p.threshold,
            seed: p.seed,
            hasher: OnceLock::new(),
        }
    }
}

impl PartialEq for NearDedup {
    fn eq(&self, other: &Self) -> bool {
        self.scope == other.scope && self.params() == other.params()
    }
}

impl NearDedup {
    pub fn params(&self) -> MinHashParams {
        MinHashParams {
            ngram: self.ngram,
            bands: self.bands,
            rows: self.rows,
            threshold: self.threshold,
            seed: self.seed,
        }
    }

    fn hasher(&self) -> &MinHasher {
        self.hasher.get_or_init(|| MinHasher::new(self.params()))
    }
}

impl Step for NearDedup {
    fn apply(&self, doc: &mut Document) -> Verdict {
        let salt = match self.scope {
            DedupScope::Split => split_salt(&doc.split),
            DedupScope::Global => 0,
        };
        let (sketch, words) = self.hasher().sketch(&doc.text, salt);
        doc.order_keys.push(OrderKey::Near(NearKey { salt, words, sketch }));
        Verdict::Keep
    }
}

/// A split's salt: never 0, the global scope's.
fn split_salt(split: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for &b in split.as_bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h | 1
}

/// The documents `near_dedup` kept so far, in input order: their signatures in LSH buckets,
/// their ids in one arena.
#[derive(Debug)]
pub struct NearIndex {
    lsh: LshIndex,
    ids: IdArena,
}

impl NearIndex {
    pub fn new(params: &MinHashParams) -> NearIndex {
        NearIndex { lsh: LshIndex::new(params), ids: IdArena::default() }
    }

    /// The earlier kept document `key` nearly repeats (its id and the estimated similarity),
    /// or `None` — and then the document is kept and indexed. A text without words is neither
    /// compared nor indexed.
    pub fn check(&mut self, key: &NearKey, id: &str) -> Option<(&str, f64)> {
        if key.sketch.signature().is_empty() {
            return None;
        }
        if let Some(m) = self.lsh.best_match(&key.sketch, key.words, key.salt) {
            return Some((self.ids.get(m.index), m.similarity));
        }
        self.lsh.insert(&key.sketch, key.words, key.salt);
        self.ids.push(id);
        None
    }

    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// The reason a near-duplicate is rejected with.
pub fn reason(first: &str, similarity: f64) -> String {
    format!("near_duplicate_of:{first} (similarity {similarity:.3})")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(step: &NearDedup, split: &str, text: &str) -> NearKey {
        let mut doc = Document { split: split.into(), text: text.into(), ..Default::default() };
        step.apply(&mut doc);
        match doc.order_keys.pop() {
            Some(OrderKey::Near(k)) => k,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_first_kept_document_wins_and_scope_separates_splits() {
        let step = NearDedup::default();
        let a: String = (0..60).map(|i| format!("word{i} ")).collect();
        let b = a.replace("word30 ", "changed ");
        let mut index = NearIndex::new(&step.params());
        assert_eq!(index.check(&key(&step, "train", &a), "a"), None);
        let (first, s) = index.check(&key(&step, "train", &b), "b").unwrap();
        assert_eq!(first, "a");
        assert!(s >= 0.8, "{s}");
        // The rejected `b` was not indexed, and another split is another scope.
        assert_eq!(index.check(&key(&step, "test", &b), "c"), None);
        assert_eq!(index.len(), 2);
        let global = NearDedup { scope: DedupScope::Global, ..NearDedup::default() };
        let mut index = NearIndex::new(&global.params());
        assert_eq!(index.check(&key(&global, "train", &a), "a"), None);
        assert_eq!(index.check(&key(&global, "test", &b), "b").map(|m| m.0), Some("a"));
        // No words: never compared.
        assert_eq!(index.check(&key(&global, "test", " ?! "), "e"), None);
        assert_eq!(index.check(&key(&global, "test", " ... "), "f"), None);
    }
}
