//! The records that flow from a source through the steps to a sink: [`Document`], what a
//! step rejects ([`Rejected`]), the noise figures a document carries, and a pretraining row.

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
    pub noise: Option<NoiseComponents>,
    /// Set by `dedup` and `near_dedup`, in step order: what each computed from the text when it
    /// reached that step. The ordered stage decides with them, in input order.
    pub order_keys: Vec<OrderKey>,
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

/// What a step whose verdict depends on earlier documents computed on a worker, for the
/// ordered stage to decide with: the first document in input order wins, whatever the threads.
#[derive(Debug, Clone, PartialEq)]
pub enum OrderKey {
    /// `dedup`: the text's fingerprint.
    Exact(DedupKey),
    /// `near_dedup`: the text's MinHash signature.
    Near(NearKey),
}

impl OrderKey {
    /// The step type that decides with this key.
    pub fn step(&self) -> &'static str {
        match self {
            OrderKey::Exact(_) => "dedup",
            OrderKey::Near(_) => "near_dedup",
        }
    }
}

/// A document's MinHash signature as `near_dedup` computed it.
#[derive(Debug, Clone, PartialEq)]
pub struct NearKey {
    /// Keeps the splits' buckets apart when near-duplicates count only within a split (0: global).
    pub salt: u64,
    /// A key of the words (equal keys: the same words up to case and punctuation).
    pub words: u64,
    pub sketch: Sketch,
}

/// A document's MinHash signature and, when a worker computed them, its LSH band keys, in one
/// buffer: what a worker hands the ordered stage per document, in one allocation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sketch {
    /// The signature's minima, then the band keys.
    values: Vec<u32>,
    hashes: usize,
}

impl Sketch {
    /// `values`: the `hashes` minima of a signature, then its band keys if known.
    pub fn new(values: Vec<u32>, hashes: usize) -> Sketch {
        assert!(hashes <= values.len(), "a sketch holds its signature");
        Sketch { values, hashes }
    }

    /// One minimum per hash; empty for a text without words, which is never compared.
    pub fn signature(&self) -> &[u32] {
        &self.values[..self.hashes]
    }

    /// The band keys; empty where they are not known yet (a signature read back from a file):
    /// then the ordered stage computes them.
    pub fn bands(&self) -> &[u32] {
        &self.values[self.hashes..]
    }

    /// The signature alone, as files keep it.
    pub fn without_bands(mut self) -> Sketch {
        self.values.truncate(self.hashes);
        self
    }
}

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

/// The measured components and the composite, as stored in the shards.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NoiseComponents {
    pub score: f32,
    pub sent_len_std: f32,
    pub punct_ratio: f32,
    pub caps_ratio: f32,
    pub repeat_ratio: f32,
    pub mojibake_ratio: f32,
}

impl NoiseComponents {
    /// Shard column names, in the order [`NoiseComponents::values`] returns them.
    pub const COLUMNS: [&'static str; 6] = [
        "noise_score",
        "noise_sent_len_std",
        "noise_punct_ratio",
        "noise_caps_ratio",
        "noise_repeat_ratio",
        "noise_mojibake_ratio",
    ];

    pub fn values(&self) -> [f32; 6] {
        [self.score, self.sent_len_std, self.punct_ratio, self.caps_ratio, self.repeat_ratio, self.mojibake_ratio]
    }
}

/// One pretraining sequence as the builder makes it (ids as `u32`); the sink writes it as a
/// row of a pretraining shard, read back by `shards` as its `PretrainRow`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PretrainSequence {
    /// The document the row starts in.
    pub doc_id: String,
    /// Masked ids with static masking, plain ids otherwise.
    pub input_ids: Vec<u32>,
    pub token_type_ids: Vec<u8>,
    /// HF convention: 0 = B follows A, 1 = B is random. `None` when packing.
    pub next_sentence_label: Option<i8>,
    /// Static masking: positions and original ids.
    pub masked: Option<(Vec<u32>, Vec<u32>)>,
    /// Packing: index in `input_ids` where each document (or its continuation) starts.
    pub doc_boundaries: Option<Vec<u32>>,
}
