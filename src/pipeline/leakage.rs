//! The manifest's `leakage` block: while a pipeline writes, the documents of its evaluation
//! splits (`test`, `validation`, `valid`, `dev`, `eval`) are compared with every other split's,
//! exactly (the same words, up to case and punctuation) and nearly (MinHash, estimated Jaccard
//! of 5-word shingles ≥ 0.8: [`crate::clean::minhash`]'s defaults, as `stats --leakage` and
//! `near_dedup` use them). Workers compute the signatures; here they are kept — the other
//! splits' in LSH buckets (about 0.8 KB a document), the evaluation splits' as signatures — and
//! compared when the last document is in, since the splits may come in any order.
//!
//! A task of an array sees only its part of each split, so it decides nothing: it writes what
//! it would have kept (each document's split, id and signature, in input order) to a part file
//! in its folder ([`Part`]), and `shards merge` replays every task's part in task order — the
//! input's order — into one [`Leakage`], which gives the single run's figures exactly.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::clean::minhash::{LshIndex, MinHashParams, MinHasher};
use crate::contract::document::{Document, Sketch};
use crate::contract::manifest::{LeakageInfo, LeakedDoc};

/// Split names read as evaluation splits.
pub const EVAL_SPLITS: [&str; 5] = ["test", "validation", "valid", "dev", "eval"];

pub fn is_eval_split(split: &str) -> bool {
    EVAL_SPLITS.contains(&split)
}

/// What a worker computes for one kept document.
#[derive(Debug, Clone, PartialEq)]
pub struct DocSignature {
    /// The signature and, computed on the worker, its band keys (none once read back from a
    /// part); empty for a text without words.
    sketch: Sketch,
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
        let (sketch, words) = self.hasher.sketch(&doc.text, 0);
        DocSignature { sketch, words }
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
        self.add_signed(&doc.split, &doc.id, sig)
    }

    fn add_signed(&mut self, split: &str, id: &str, sig: DocSignature) {
        if is_eval_split(split) {
            self.eval.entry(split.to_string()).or_default().push((id.to_string(), sig));
            return;
        }
        let split = split_index(&mut self.splits, split);
        self.index.insert(&sig.sketch, sig.words, 0);
        self.names.push((split, id.to_string()));
    }

    /// Replays a task's part, after the parts of the tasks before it.
    pub fn add_part(&mut self, part: Part) {
        for (split, id, sig) in part.docs {
            self.add_signed(&part.splits[split as usize], &id, sig);
        }
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
                if let Some(m) = self.index.best_match(&sig.sketch, sig.words, 0) {
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

/// `split`'s index in `splits`, added at the end when new.
fn split_index(splits: &mut Vec<String>, split: &str) -> u16 {
    let i = match splits.iter().position(|s| s == split) {
        Some(i) => i,
        None => {
            splits.push(split.to_string());
            splits.len() - 1
        }
    };
    u16::try_from(i).expect("fewer than 65,536 splits")
}

/// The file a task of an array leaves its part in, relative to its folder.
pub const PART_FILE: &str = "_leakage.bin";
const PART_FORMAT: &str = "bertpipe-leakage/1";

/// One task's documents as the leakage measure sees them: split (an index into `splits`), id
/// and signature, in input order.
#[derive(Debug, Default, PartialEq)]
pub struct Part {
    pub splits: Vec<String>,
    pub docs: Vec<(u16, String, DocSignature)>,
}

#[derive(Serialize, Deserialize)]
struct PartHeader {
    format: String,
    config_sha256: String,
    splits: Vec<String>,
    docs: u64,
    hashes: usize,
}

impl Part {
    pub fn add(&mut self, doc: &Document, sig: DocSignature) {
        let split = split_index(&mut self.splits, &doc.split);
        // The file holds signatures only; the merge computes the band keys again.
        self.docs.push((split, doc.id.clone(), DocSignature { sketch: sig.sketch.without_bands(), ..sig }));
    }

    /// The file's bytes: a JSON header line, then per document its split (u16), id (u32 length
    /// and UTF-8), words key (u64), whether it has words (u8) and then its signature (u32 each),
    /// all little-endian.
    pub fn to_bytes(&self, config_sha256: &str) -> Vec<u8> {
        let hashes = MinHashParams::default().hashes();
        let header = PartHeader {
            format: PART_FORMAT.into(),
            config_sha256: config_sha256.into(),
            splits: self.splits.clone(),
            docs: self.docs.len() as u64,
            hashes,
        };
        let mut w = serde_json::to_vec(&header).expect("the header serialises");
        w.push(b'\n');
        w.reserve(self.docs.len() * (16 + 4 * hashes));
        for (split, id, sig) in &self.docs {
            w.extend_from_slice(&split.to_le_bytes());
            w.extend_from_slice(&(id.len() as u32).to_le_bytes());
            w.extend_from_slice(id.as_bytes());
            w.extend_from_slice(&sig.words.to_le_bytes());
            match sig.sketch.signature() {
                [] => w.push(0),
                s => {
                    w.push(1);
                    s.iter().for_each(|v| w.extend_from_slice(&v.to_le_bytes()));
                }
            }
        }
        w
    }

    /// A part file's contents (`shown` names it in errors); every count and length is checked
    /// against the bytes left before anything is allocated for it.
    pub fn parse(bytes: &[u8], shown: &str, config_sha256: &str) -> Result<Part> {
        let Some(end) = bytes.iter().position(|&b| b == b'\n') else {
            bail!("'{shown}' is not a bertpipe leakage part (no header line)");
        };
        let header: PartHeader = serde_json::from_slice(&bytes[..end])
            .with_context(|| format!("'{shown}' is not a bertpipe leakage part"))?;
        if header.format != PART_FORMAT {
            bail!("'{shown}' has format `{}`; this bertpipe reads `{PART_FORMAT}` (run the task again)", header.format);
        }
        if header.config_sha256 != config_sha256 {
            bail!("'{shown}' was written by another pipeline configuration than its task's manifest");
        }
        if header.hashes != MinHashParams::default().hashes() {
            bail!(
                "'{shown}' holds signatures of {} hashes, this bertpipe uses {}",
                header.hashes,
                MinHashParams::default().hashes()
            );
        }
        let mut r = &bytes[end + 1..];
        // A document takes at least 15 bytes.
        if header.docs.saturating_mul(15) > r.len() as u64 {
            bail!(
                "'{shown}' is truncated or corrupt: its header lists {} documents, but only {} bytes follow",
                header.docs,
                r.len()
            );
        }
        let mut take = |n: usize| -> Result<&[u8]> {
            if n > r.len() {
                bail!("'{shown}' is truncated or corrupt: {n} bytes wanted, but only {} bytes follow", r.len());
            }
            let (head, rest) = r.split_at(n);
            r = rest;
            Ok(head)
        };
        let mut docs = Vec::with_capacity(header.docs as usize);
        for _ in 0..header.docs {
            let split = u16::from_le_bytes(take(2)?.try_into().expect("2 bytes"));
            if split as usize >= header.splits.len() {
                bail!("'{shown}' is corrupt: split {split} of {}", header.splits.len());
            }
            let len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
            let id = String::from_utf8(take(len)?.to_vec()).with_context(|| format!("'{shown}' is corrupt"))?;
            let words = u64::from_le_bytes(take(8)?.try_into().expect("8 bytes"));
            let sketch = match take(1)?[0] {
                0 => Sketch::default(),
                1 => Sketch::new(
                    take(4 * header.hashes)?
                        .chunks_exact(4)
                        .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
                        .collect(),
                    header.hashes,
                ),
                f => bail!("'{shown}' is corrupt: a signature flag of {f}"),
            };
            docs.push((split, id, DocSignature { sketch, words }));
        }
        if !r.is_empty() {
            bail!("'{shown}' is corrupt: {} bytes after its last document", r.len());
        }
        Ok(Part { splits: header.splits, docs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_reads_back_and_damage_is_refused_by_name() {
        let signer = Signer::new();
        let mut part = Part::default();
        for (split, id, text) in
            [("train", "a", "one two three four five six"), ("test", "b", " ?! "), ("train", "c", "x")]
        {
            let doc = Document { split: split.into(), id: id.into(), text: text.into(), ..Default::default() };
            part.add(&doc, signer.sign(&doc));
        }
        let bytes = part.to_bytes("cfg");
        assert_eq!(Part::parse(&bytes, "p.bin", "cfg").unwrap(), part);
        assert!(Part::parse(&bytes, "p.bin", "other").unwrap_err().to_string().contains("another pipeline"));
        for cut in [bytes.len() - 1, bytes.len() - 300, 20] {
            let e = Part::parse(&bytes[..cut], "p.bin", "cfg").unwrap_err().to_string();
            assert!(e.contains("p.bin"), "{e}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(Part::parse(&longer, "p.bin", "cfg").unwrap_err().to_string().contains("after its last"));
    }
}
