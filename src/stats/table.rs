//! The per-document table every input is reduced to before polars aggregates it: a few numbers
//! per document (about 50 bytes), never the text. The noisiest documents are kept aside in a
//! bounded heap, with a snippet.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashSet};

use polars::prelude::*;
use serde::Serialize;

use crate::clean::dedup::fingerprint;
use crate::clean::filter::{count_chars, count_words};
use crate::contract::document::DedupKey;

/// Which columns an input can provide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Columns {
    /// Characters, words and exact duplicates (needs the text).
    pub text: bool,
    /// Token counts (and [UNK] counts when `unk`).
    pub tokens: bool,
    pub unk: bool,
    /// Noise score and its five components.
    pub noise: bool,
}

/// What the table needs from a text: its length in characters and words, and its fingerprint.
/// Computed where the text is (on the pipeline's workers), so only these 24 bytes travel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextMeasure {
    pub chars: u32,
    pub words: u32,
    pub fingerprint: DedupKey,
}

impl TextMeasure {
    pub fn of(text: &str) -> TextMeasure {
        TextMeasure {
            chars: count_chars(text) as u32,
            words: count_words(text) as u32,
            fingerprint: fingerprint(None, text),
        }
    }
}

/// One document (or shard row) as the collectors see it.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    pub id: &'a str,
    pub split: &'a str,
    pub label: Option<i64>,
    /// The text, for the measures (unless `measured` has them already) and the snippet.
    pub text: Option<&'a str>,
    pub measured: Option<TextMeasure>,
    pub tokens: Option<u32>,
    pub unk: Option<u32>,
    /// `noise_score` first, then the components, in shard column order.
    pub noise: Option<[f32; 6]>,
}

/// One of the noisiest documents, for the report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NoisyDoc {
    pub id: String,
    pub split: String,
    pub label: Option<i64>,
    pub noise_score: f32,
    /// The start of the text, whitespace collapsed; absent when the input has no text.
    pub snippet: Option<String>,
}

/// Characters of text a snippet keeps.
pub const SNIPPET_CHARS: usize = 120;

struct Ranked {
    score: f32,
    seq: u64,
    doc: NoisyDoc,
}

impl Ranked {
    /// Higher score first; among equal scores the earlier document first.
    fn rank(&self, other: &Self) -> Ordering {
        self.score.total_cmp(&other.score).then(other.seq.cmp(&self.seq))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.rank(other) == Ordering::Equal
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        self.rank(other)
    }
}

/// Accumulates records in input order.
pub struct DocTable {
    pub columns: Columns,
    /// Split names, in order of first appearance; `split` holds indexes into it.
    pub splits: Vec<String>,
    split: Vec<u32>,
    label: Vec<Option<i64>>,
    chars: Vec<u32>,
    words: Vec<u32>,
    duplicate: Vec<bool>,
    tokens: Vec<u32>,
    unk: Vec<u32>,
    noise: [Vec<f32>; 6],
    seen: HashSet<DedupKey, rustc_hash::FxBuildHasher>,
    top: usize,
    noisiest: BinaryHeap<Reverse<Ranked>>,
    seq: u64,
}

impl DocTable {
    pub fn new(columns: Columns, top: usize) -> DocTable {
        DocTable {
            columns,
            splits: Vec::new(),
            split: Vec::new(),
            label: Vec::new(),
            chars: Vec::new(),
            words: Vec::new(),
            duplicate: Vec::new(),
            tokens: Vec::new(),
            unk: Vec::new(),
            noise: Default::default(),
            seen: HashSet::default(),
            top,
            noisiest: BinaryHeap::new(),
            seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.split.len()
    }

    pub fn is_empty(&self) -> bool {
        self.split.is_empty()
    }

    fn split_code(&mut self, split: &str) -> u32 {
        match self.splits.iter().rposition(|s| s == split) {
            Some(i) => i as u32,
            None => {
                self.splits.push(split.to_string());
                (self.splits.len() - 1) as u32
            }
        }
    }

    /// Adds one record. Fields the table's [`Columns`] do not promise are ignored; promised
    /// ones must be present.
    pub fn push(&mut self, r: Record<'_>) {
        let code = self.split_code(r.split);
        self.split.push(code);
        self.label.push(r.label);
        let c = self.columns;
        if c.text {
            let m = r.measured.unwrap_or_else(|| TextMeasure::of(r.text.expect("a text column was promised")));
            self.chars.push(m.chars);
            self.words.push(m.words);
            self.duplicate.push(!self.seen.insert(m.fingerprint));
        }
        if c.tokens {
            self.tokens.push(r.tokens.expect("a token column was promised"));
        }
        if c.unk {
            self.unk.push(r.unk.expect("an [UNK] column was promised"));
        }
        if c.noise {
            let values = r.noise.expect("noise columns were promised");
            for (col, v) in self.noise.iter_mut().zip(values) {
                col.push(v);
            }
            self.offer_noisy(&r, values[0]);
        }
        self.seq += 1;
    }

    fn offer_noisy(&mut self, r: &Record<'_>, score: f32) {
        if self.top == 0 {
            return;
        }
        if self.noisiest.len() == self.top {
            let Reverse(weakest) = self.noisiest.peek().expect("heap is full");
            // A later document with the same score ranks below the ones already kept.
            if score.total_cmp(&weakest.score) != Ordering::Greater {
                return;
            }
            self.noisiest.pop();
        }
        let doc = NoisyDoc {
            id: r.id.to_string(),
            split: r.split.to_string(),
            label: r.label,
            noise_score: score,
            snippet: r.text.map(snippet),
        };
        self.noisiest.push(Reverse(Ranked { score, seq: self.seq, doc }));
    }

    /// The noisiest documents, noisiest first.
    pub fn noisiest(&self) -> Vec<NoisyDoc> {
        let mut ranked: Vec<&Ranked> = self.noisiest.iter().map(|Reverse(r)| r).collect();
        ranked.sort_by(|a, b| b.rank(a));
        ranked.into_iter().map(|r| r.doc.clone()).collect()
    }

    /// Moves the columns into a polars frame (no copy of the numeric columns), leaving the table
    /// empty: `split` (u32 code), `label` (i64, null = unlabelled), and whichever of `chars`,
    /// `words`, `duplicate`, `tokens`, `unk` and the noise columns exist. Split names and the
    /// noisiest documents stay.
    pub fn take_frame(&mut self) -> PolarsResult<DataFrame> {
        let height = self.len();
        let take_u32 = |name: &str, v: &mut Vec<u32>| Column::new(name.into(), std::mem::take(v));
        let mut cols =
            vec![take_u32("split", &mut self.split), Column::new("label".into(), std::mem::take(&mut self.label))];
        if self.columns.text {
            cols.push(take_u32("chars", &mut self.chars));
            cols.push(take_u32("words", &mut self.words));
            cols.push(Column::new("duplicate".into(), std::mem::take(&mut self.duplicate)));
        }
        if self.columns.tokens {
            cols.push(take_u32("tokens", &mut self.tokens));
        }
        if self.columns.unk {
            cols.push(take_u32("unk", &mut self.unk));
        }
        if self.columns.noise {
            for (name, values) in crate::contract::document::NoiseComponents::COLUMNS.iter().zip(&mut self.noise) {
                cols.push(Column::new((*name).into(), std::mem::take(values)));
            }
        }
        self.seen = HashSet::default();
        DataFrame::new(height, cols)
    }
}

/// The first [`SNIPPET_CHARS`] characters with runs of whitespace collapsed to one space, and
/// `…` when the text goes on.
pub fn snippet(text: &str) -> String {
    let mut out = String::new();
    let mut chars = 0usize;
    for word in text.split_whitespace() {
        if chars > 0 {
            out.push(' ');
            chars += 1;
        }
        for ch in word.chars() {
            if chars >= SNIPPET_CHARS {
                out.truncate(out.trim_end().len());
                out.push('…');
                return out;
            }
            out.push(ch);
            chars += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec<'a>(id: &'a str, text: &'a str, score: f32) -> Record<'a> {
        Record {
            id,
            split: "train",
            label: Some(1),
            text: Some(text),
            measured: None,
            tokens: None,
            unk: None,
            noise: Some([score, 0.0, 0.0, 0.0, 0.0, 0.0]),
        }
    }

    #[test]
    fn snippets_collapse_whitespace_and_cut() {
        assert_eq!(snippet("  a\n\n b\tc  "), "a b c");
        let long = "word ".repeat(100);
        let s = snippet(&long);
        assert!(s.chars().count() <= SNIPPET_CHARS + 1);
        assert!(s.starts_with("word word"));
        assert!(s.ends_with('…'));
        assert_eq!(snippet(&"x".repeat(SNIPPET_CHARS)), "x".repeat(SNIPPET_CHARS));
    }

    #[test]
    fn keeps_the_top_n_noisiest_first_occurrence_wins_ties() {
        let columns = Columns { text: true, tokens: false, unk: false, noise: true };
        let mut t = DocTable::new(columns, 3);
        for (id, score) in [("a", 1.0), ("b", 5.0), ("c", 3.0), ("d", 5.0), ("e", 0.5), ("f", 3.0), ("g", 9.0)] {
            t.push(rec(id, "same text", score));
        }
        let ids: Vec<String> = t.noisiest().into_iter().map(|d| d.id).collect();
        assert_eq!(ids, ["g", "b", "d"]);
        let df = t.take_frame().unwrap();
        assert_eq!(df.height(), 7);
        let dup = df.column("duplicate").unwrap().bool().unwrap();
        assert_eq!(dup.sum(), Some(6), "every text after the first is an exact duplicate");
    }
}
