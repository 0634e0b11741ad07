//! The record that flows from a source through the steps to a sink.

/// One document on its way through the pipeline.
#[derive(Debug, Clone, Default)]
pub struct Document {
    /// Stable identifier, e.g. `train/pos/123_9` or `reviews.jsonl:17`.
    pub id: String,
    pub split: String,
    /// 0 negative, 1 positive, `None` unlabelled.
    pub label: Option<i64>,
    pub rating: Option<i8>,
    pub text: String,
    /// Where it came from (file, or file:line), for error messages and rejects.
    pub origin: String,
    /// Invalid UTF-8 was replaced with U+FFFD while decoding.
    pub utf8_replaced: bool,
    /// Set by `noise_score`.
    pub noise: Option<crate::clean::noise::NoiseComponents>,
    /// Set by `dedup`: the fingerprint of the text when it reached that step.
    pub dedup_key: Option<DedupKey>,
    /// Bytes of input this record accounts for (progress reporting).
    pub input_bytes: u64,
    /// Set by `tokenize`: WordPiece ids, without special tokens.
    pub tokens: Vec<u32>,
    /// Set by `tokenize` when sentences are needed: the end (exclusive index into `tokens`) of
    /// each sentence.
    pub sentence_ends: Vec<u32>,
    /// How many of `tokens` are [UNK].
    pub unk_tokens: u32,
    /// Set by `classify_sequences`: model inputs with [CLS]/[SEP], one per output row.
    pub sequences: Vec<Vec<u32>>,
    /// Tokens truncation removed (windows drop none).
    pub dropped_tokens: u32,
}

/// A 128-bit fingerprint of a document's text (and split, when deduplicating per split).
pub type DedupKey = [u8; 16];

/// A document that will not reach the shards, and why.
#[derive(Debug, Clone)]
pub struct Rejected {
    pub id: String,
    pub split: String,
    /// The step type that rejected it, or `source`.
    pub step: String,
    /// `key` or `key:detail`; manifests count by `key`.
    pub reason: String,
    pub origin: String,
    /// The document as read from the source (lossily decoded).
    pub text: String,
    pub input_bytes: u64,
}

impl Rejected {
    /// The part of the reason before the first `:`, used for counting.
    pub fn reason_key(&self) -> &str {
        self.reason.split(':').next().unwrap_or(&self.reason)
    }
}

/// What a source yields: a document, or a record it could not turn into one.
#[derive(Debug)]
pub enum SourceItem {
    Doc(Document),
    Reject(Rejected),
    /// A file to be read into a document by the worker that processes it, so a folder of
    /// many small files is opened and read on every core instead of on the reader thread.
    File(crate::source::PendingFile),
}

impl SourceItem {
    pub fn id(&self) -> &str {
        match self {
            SourceItem::Doc(d) => &d.id,
            SourceItem::Reject(r) => &r.id,
            SourceItem::File(f) => &f.meta.id,
        }
    }

    pub fn set_split(&mut self, split: String) {
        match self {
            SourceItem::Doc(d) => d.split = split,
            SourceItem::Reject(r) => r.split = split,
            SourceItem::File(f) => f.meta.split = split,
        }
    }
}
