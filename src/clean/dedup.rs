//! `dedup`: exact duplicates after cleaning. Workers fingerprint; the ordered stage decides, so
//! the first document in input order is the one kept, whatever the thread count.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::document::{DedupKey, Document, OrderKey};
use crate::contract::{Step, Verdict};

/// Reject exact duplicates of an earlier document's cleaned text with reason
/// `duplicate_of:<id>`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Dedup {
    /// `split` (default) compares documents within their own split, so a test set keeps its
    /// size; `global` also drops test documents that repeat a training one.
    pub scope: DedupScope,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DedupScope {
    #[default]
    Split,
    Global,
}

impl Step for Dedup {
    fn apply(&self, doc: &mut Document) -> Verdict {
        let split = (self.scope == DedupScope::Split).then_some(doc.split.as_str());
        doc.order_keys.push(OrderKey::Exact(fingerprint(split, &doc.text)));
        Verdict::Keep
    }
}

/// The 128-bit fingerprint exact dedup compares: a SHA-256 prefix of the text, preceded by the
/// split when duplicates count only within it.
pub fn fingerprint(split: Option<&str>, text: &str) -> DedupKey {
    let mut h = Sha256::new();
    if let Some(split) = split {
        h.update(split.as_bytes());
        h.update([0u8]);
    }
    h.update(text.as_bytes());
    let digest = h.finalize();
    let mut key = [0u8; 16];
    key.copy_from_slice(&digest[..16]);
    key
}

/// The fingerprints seen so far, in input order. Exact dedup has to remember every distinct
/// document: fingerprint and index in the table, the id in one arena — measured at about 90
/// bytes per document at peak (table growth included), ~45 MB for half a million reviews. It is
/// the only state of a run that grows with the corpus.
#[derive(Debug, Default)]
pub struct DedupIndex {
    first: HashMap<DedupKey, u32, BuildHasherDefault<FingerprintHasher>>,
    ids: IdArena,
}

/// Document ids in one string, by insertion index: what dedup and near_dedup name a first
/// occurrence by, without an allocation per document.
#[derive(Debug, Default)]
pub struct IdArena {
    ids: String,
    ends: Vec<usize>,
}

impl IdArena {
    /// Appends `id`; returns its index.
    pub fn push(&mut self, id: &str) -> u32 {
        let index = u32::try_from(self.ends.len()).expect("fewer than 4 billion distinct documents");
        self.ids.push_str(id);
        self.ends.push(self.ids.len());
        index
    }

    pub fn get(&self, index: u32) -> &str {
        let i = index as usize;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.ids[start..self.ends[i]]
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }
}

impl DedupIndex {
    /// Records `id` under `key`, or returns the id of the earlier document with the same key.
    pub fn check(&mut self, key: DedupKey, id: &str) -> Option<&str> {
        use std::collections::hash_map::Entry;
        match self.first.entry(key) {
            Entry::Occupied(e) => Some(self.ids.get(*e.get())),
            Entry::Vacant(e) => {
                e.insert(self.ids.push(id));
                None
            }
        }
    }
}

/// Fingerprints are SHA-256 prefixes already: their first 8 bytes are a perfectly good hash.
#[derive(Default)]
struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().take(8) {
            self.0 = (self.0 << 8) | b as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(d: &Dedup, split: &str, text: &str) -> DedupKey {
        let mut doc = Document { split: split.into(), text: text.into(), ..Default::default() };
        d.apply(&mut doc);
        match doc.order_keys.pop() {
            Some(OrderKey::Exact(k)) => k,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn first_seen_wins() {
        let d = Dedup::default();
        let mut idx = DedupIndex::default();
        assert_eq!(idx.check(key(&d, "train", "same"), "a"), None);
        assert_eq!(idx.check(key(&d, "train", "other"), "b"), None);
        assert_eq!(idx.check(key(&d, "train", "same"), "c"), Some("a"));
    }

    #[test]
    fn scope_controls_cross_split_matches() {
        let split = Dedup { scope: DedupScope::Split };
        let global = Dedup { scope: DedupScope::Global };
        assert_ne!(key(&split, "train", "t"), key(&split, "test", "t"));
        assert_eq!(key(&global, "train", "t"), key(&global, "test", "t"));
    }
}
