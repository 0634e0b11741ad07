//! The shard folder's contract: `manifest.json` (written last: its presence means the output
//! is complete) with its per-split figures and shard list, the file names of the layout, and
//! the tokenizer a folder was made with. Readers (train, eval, stats, a Parquet source) and
//! writers (the sink, `shards merge`) share these types.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub const FORMAT: &str = "bertpipe-shards/1";
pub const MANIFEST: &str = "manifest.json";
pub const JOURNAL: &str = "_journal.jsonl";
pub const REJECTS: &str = "_rejects";
/// A task array's outputs: `tasks/NNNNN/` per task, `tasks/scan/` for the scan phase.
pub const TASKS_DIR: &str = "tasks";
/// The row length assumed where none is recorded (a manifest without `max_len`, an ONNX model
/// without that metadata): BERT's 512 positions.
pub const DEFAULT_MAX_LEN: usize = 512;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    pub created_by: String,
    /// What the shards hold: `clean`, `tokenize`, `classify` or `pretrain`.
    pub task: String,
    pub name: String,
    /// The resolved pipeline (overrides applied, absolute paths).
    pub config: serde_json::Value,
    pub config_sha256: String,
    pub tokenizer: Option<TokenizerInfo>,
    pub max_len: Option<u32>,
    pub seed: u64,
    pub splits: BTreeMap<String, SplitStats>,
    pub rejects: RejectsInfo,
    /// A task array's output: on a task's own manifest its index and the count; on the one
    /// `shards merge` writes, the count (shard files are then under `tasks/NNNNN/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TasksInfo>,
    /// Per evaluation split (`test`, `validation`, …): how many of its documents the other
    /// splits of this output hold, exactly or nearly (`sink.leakage`, on by default).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub leakage: BTreeMap<String, LeakageInfo>,
    /// A task of an array that measures leakage: the file (in its folder) holding its
    /// documents' signatures, which `shards merge` measures the whole array's leakage from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leakage_part: Option<ShardInfo>,
    /// What a reader should know before using the shards ([`Manifest::label_warnings`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// A source with `splits:` (files per split): the files that made each split, in the
    /// order they were read.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub source_files: BTreeMap<String, Vec<String>>,
    /// Class names by label id, when the source's labels are names: its `label_map`, or the
    /// label strings found in the corpus numbered in sorted order (as HF's `ClassLabel`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub id2label: BTreeMap<i64, String>,
}

/// Test leakage of one evaluation split: its documents with an exact or near duplicate (MinHash
/// over 5-word shingles, estimated Jaccard ≥ `threshold`) among the `against` splits' documents.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LeakageInfo {
    pub against: Vec<String>,
    /// Documents of the evaluation split, and of the splits compared with.
    pub documents: u64,
    pub against_documents: u64,
    /// The same words (up to case and punctuation) as a document compared with.
    pub exact: u64,
    /// Not exact, but at or above the threshold.
    pub near: u64,
    /// `exact + near`, and its share of `documents`.
    pub leaked: u64,
    pub share: f64,
    pub ngram: usize,
    pub bands: usize,
    pub rows: usize,
    pub threshold: f64,
    /// Every leaked document, in the split's order, with its best match.
    pub leaks: Vec<LeakedDoc>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LeakedDoc {
    pub id: String,
    /// `SPLIT/ID` of the document it repeats.
    pub matches: String,
    pub similarity: f64,
    pub exact: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct TasksInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    pub count: u32,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SplitStats {
    pub docs_in: u64,
    pub docs_out: u64,
    /// Rejected documents by reason key.
    pub rejected: BTreeMap<String, u64>,
    pub rows: u64,
    pub tokens: Option<u64>,
    /// Documents whose invalid UTF-8 was replaced with U+FFFD.
    pub utf8_replaced: u64,
    /// Documents written without a label.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unlabelled: u64,
    /// Tokenisation and truncation figures, when the pipeline tokenizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenization: Option<TokenStats>,
    /// Pretraining figures: masked fraction and 80/10/10 split, NSP balance, packing efficiency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pretraining: Option<PretrainStats>,
    pub shards: Vec<ShardInfo>,
}

/// Tokens before and after sequence building, for the documents written.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct TokenStats {
    /// WordPiece tokens of the written documents, before truncation, without specials.
    pub document_tokens: u64,
    pub unk_tokens: u64,
    /// `unk_tokens / document_tokens`.
    pub unk_rate: f64,
    /// Documents longer than `max_len − 2` (cut, or split into several windows).
    pub docs_over_max_len: u64,
    /// Tokens removed by truncation (0 with windows).
    pub tokens_dropped: u64,
    /// Rows per written document: mean and maximum (1 unless windows).
    pub rows_per_doc_mean: f64,
    pub rows_per_doc_max: u64,
}

impl SplitStats {
    pub fn rejected_total(&self) -> u64 {
        self.rejected.values().sum()
    }

    /// The rates derived from the counts: [UNK] rate and rows per document, and the
    /// pretraining shares.
    pub fn finish(&mut self) {
        let rows_per_doc = self.rows as f64 / self.docs_out.max(1) as f64;
        if let Some(t) = self.tokenization.as_mut() {
            t.unk_rate = t.unk_tokens as f64 / t.document_tokens.max(1) as f64;
            t.rows_per_doc_mean = rows_per_doc;
        }
        if let Some(p) = self.pretraining.as_mut() {
            p.finish();
        }
    }

    /// Adds the figures of another part of the same split (a task of an array), whose shard
    /// files are under `prefix`. The rates are [`SplitStats::finish`]'s to recompute.
    pub fn add(&mut self, s: SplitStats, prefix: &str) {
        self.docs_in += s.docs_in;
        self.docs_out += s.docs_out;
        self.unlabelled += s.unlabelled;
        for (reason, n) in s.rejected {
            *self.rejected.entry(reason).or_default() += n;
        }
        self.rows += s.rows;
        self.tokens = match (self.tokens, s.tokens) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.utf8_replaced += s.utf8_replaced;
        if let Some(t) = s.tokenization {
            self.tokenization.get_or_insert_with(Default::default).add(&t);
        }
        if let Some(p) = s.pretraining {
            self.pretraining.get_or_insert_with(Default::default).add(&p);
        }
        self.shards.extend(s.shards.into_iter().map(|shard| shard.under(prefix)));
    }
}

impl TokenStats {
    /// Adds another part's counts (the rates are recomputed by [`SplitStats::finish`]).
    pub fn add(&mut self, t: &TokenStats) {
        self.document_tokens += t.document_tokens;
        self.unk_tokens += t.unk_tokens;
        self.docs_over_max_len += t.docs_over_max_len;
        self.tokens_dropped += t.tokens_dropped;
        self.rows_per_doc_max = self.rows_per_doc_max.max(t.rows_per_doc_max);
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RejectsInfo {
    pub rows: u64,
    pub shards: Vec<ShardInfo>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Manifest {
    /// Classification shards without labels: none at all (the source's label field was not
    /// found — nothing to train on), or how many documents of a split have none.
    pub fn label_warnings(&self) -> Vec<String> {
        if self.task != "classify" {
            return Vec::new();
        }
        let out: u64 = self.splits.values().map(|s| s.docs_out).sum();
        let unlabelled: u64 = self.splits.values().map(|s| s.unlabelled).sum();
        if out > 0 && unlabelled == out {
            let named = ["label_field", "label_column"]
                .iter()
                .find_map(|k| self.config.pointer(&format!("/source/{k}")).and_then(|v| v.as_str()).map(|v| (k, v)));
            if let Some((key, field)) = named {
                return vec![format!(
                    "no document has a label: the source's `{key}: {field}` is empty or null in every record read, so a classifier has nothing to learn from these shards"
                )];
            }
            return vec![
                "no document has a label: name the source's label field (`label_field:` / `label_column:`; one called label, labels or sentiment is found without it), or a classifier has nothing to learn from these shards".into(),
            ];
        }
        self.splits
            .iter()
            .filter(|(_, s)| s.unlabelled > 0)
            .map(|(name, s)| format!("split `{name}`: {} of {} documents have no label", s.unlabelled, s.docs_out))
            .collect()
    }

    /// `manifest.json`'s bytes.
    pub fn to_json(&self) -> Result<Vec<u8>> {
        let mut text = serde_json::to_vec_pretty(self)?;
        text.push(b'\n');
        Ok(text)
    }

    pub fn write(&self, out: &Path) -> Result<()> {
        super::write_file_atomic(&out.join(MANIFEST), &self.to_json()?)
    }

    pub fn read(out: &Path) -> Result<Manifest> {
        let path = out.join(MANIFEST);
        if !path.exists() && out.join(TASKS_DIR).is_dir() {
            bail!(
                "'{}' is the output of a task array that is not merged yet: when every task has finished, run `bertpipe shards merge {}`",
                out.display(),
                out.display()
            );
        }
        let text =
            crate::contract::reads::read(&path).with_context(|| format!("could not read '{}'", path.display()))?;
        Manifest::from_json(&text, &path.display().to_string())
    }

    /// The longest row the shards hold, specials included (`max_len`, else [`DEFAULT_MAX_LEN`]).
    pub fn longest_row(&self) -> usize {
        self.max_len.map_or(DEFAULT_MAX_LEN, |n| n as usize)
    }

    /// The vocabulary file (vocab.txt or tokenizer.json) the shards were tokenized with, from
    /// the resolved pipeline the manifest records.
    pub fn vocab_file(&self) -> Option<PathBuf> {
        let steps = self.config.get("steps")?.as_array()?;
        let t = steps.iter().find(|s| s.get("type").and_then(|t| t.as_str()) == Some("tokenize"))?;
        let path = ["vocab", "tokenizer"].iter().find_map(|k| t.get(*k).and_then(|p| p.as_str()))?;
        Some(PathBuf::from(path))
    }

    /// Parses a manifest's bytes; `shown` names it in errors.
    pub fn from_json(bytes: &[u8], shown: &str) -> Result<Manifest> {
        let m: Manifest =
            serde_json::from_slice(bytes).with_context(|| format!("'{shown}' is not a bertpipe manifest"))?;
        if m.format != FORMAT {
            bail!("'{shown}' has format `{}`; this bertpipe reads `{FORMAT}`", m.format);
        }
        m.check_layout(shown)?;
        Ok(m)
    }

    /// Every name a reader joins to a folder is of the layout's own shape: split names are
    /// plain folder names, and each shard is `SPLIT/part-NNNNN.parquet` (`_rejects/…` for
    /// rejects), under `tasks/NNNNN/` in a merged task array. An absolute path or `..` could
    /// otherwise make a reader write or remove files outside its folder. Counts are checked
    /// too: a split's rows are its shards' rows.
    fn check_layout(&self, shown: &str) -> Result<()> {
        if let Some(name) = self.splits.keys().find(|name| !is_split_name(name)) {
            bail!("'{shown}': split name {name:?} is not a plain folder name (letters, digits, `_`, `-`, `.`; not starting with `.` or `_`)");
        }
        let merged = matches!(self.tasks, Some(TasksInfo { index: None, .. }));
        let splits = self.splits.iter().map(|(name, s)| ("splits", name.as_str(), &s.shards, s.rows));
        for (field, folder, shards, rows) in
            splits.chain([("rejects", REJECTS, &self.rejects.shards, self.rejects.rows)])
        {
            for s in shards {
                if !is_shard_path(&s.file, folder, merged) {
                    bail!(
                        "'{shown}': shard {:?} of {field} `{folder}` is not a path of the shard layout ({folder}/part-NNNNN.parquet{})",
                        s.file,
                        if merged { format!(" under {TASKS_DIR}/NNNNN/") } else { String::new() }
                    );
                }
            }
            let listed: u64 = shards.iter().map(|s| s.rows).fold(0u64, u64::saturating_add);
            if listed != rows {
                bail!("'{shown}': {field} `{folder}` has rows {rows}, but its shards list {listed} rows");
            }
        }
        Ok(())
    }
}

/// A finished shard, as the manifest and the journal record it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ShardInfo {
    /// Path relative to the output folder, e.g. `train/part-00000.parquet`.
    pub file: String,
    pub rows: u64,
    pub bytes: u64,
    pub sha256: String,
}

impl ShardInfo {
    /// The same shard, its path relative to a folder `prefix` above its own output (a task
    /// array's merged output lists `tasks/NNNNN/train/part-….parquet`).
    pub fn under(mut self, prefix: &str) -> ShardInfo {
        self.file = format!("{prefix}{}", self.file);
        self
    }
}

/// A split's name as a folder: letters, digits, `_`, `-`, `.`, not starting with `.` or `_`
/// (`_rejects` and hidden names are the layout's own) and not `tasks`.
pub fn is_split_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name != TASKS_DIR
        && !name.starts_with(['.', '_'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

/// `part-NNNNN.parquet` (five digits or more), as [`shard_name`] writes it.
pub fn is_shard_name(name: &str) -> bool {
    name.strip_prefix("part-")
        .and_then(|n| n.strip_suffix(".parquet"))
        .is_some_and(|n| n.len() >= 5 && n.len() <= 10 && n.bytes().all(|b| b.is_ascii_digit()))
}

/// `tasks/NNNNN`'s last part: five digits.
pub fn is_task_name(name: &str) -> bool {
    name.len() == 5 && name.bytes().all(|b| b.is_ascii_digit())
}

/// `FOLDER/part-NNNNN.parquet`, or with `merged` `tasks/NNNNN/FOLDER/part-NNNNN.parquet`.
pub fn is_shard_path(rel: &str, folder: &str, merged: bool) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        [f, name] if !merged => *f == folder && is_shard_name(name),
        [t, n, f, name] if merged => *t == TASKS_DIR && is_task_name(n) && *f == folder && is_shard_name(name),
        _ => false,
    }
}

/// Whether `rel` (a file's path relative to an output folder, `/`-separated) is one the shard
/// layout has: the manifest and journal (and their temporaries), `SPLIT/part-NNNNN.parquet`,
/// `_rejects/…`, a shard being written (`.part-NNNNN.parquet.tmp`), a task array's
/// `tasks/NNNNN/…` and `tasks/scan/NNNNN.bin`. What `--overwrite` may remove.
pub fn is_layout_file(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let shard_or_temp = |n: &str| is_shard_name(n) || super::temp_target(n).is_some_and(is_shard_name);
    match parts.as_slice() {
        [name] => matches!(*name, MANIFEST | JOURNAL) || super::temp_target(name) == Some(MANIFEST),
        [t, s, f] if *t == TASKS_DIR && *s == "scan" => {
            let f = super::temp_target(f).unwrap_or(f);
            f.strip_suffix(".bin").is_some_and(is_task_name)
        }
        [t, n, rest @ ..] if *t == TASKS_DIR && is_task_name(n) && !rest.is_empty() => {
            rest.first() != Some(&TASKS_DIR) && is_layout_file(&rest.join("/"))
        }
        [folder, name] => (*folder == REJECTS || is_split_name(folder)) && shard_or_temp(name),
        _ => false,
    }
}

/// Whether `rel` is a folder the shard layout has (a split, `_rejects`, `tasks`, a task's).
pub fn is_layout_dir(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let split_or_rejects = |f: &str| f == REJECTS || is_split_name(f);
    match parts.as_slice() {
        [f] => *f == TASKS_DIR || split_or_rejects(f),
        [t, n] => *t == TASKS_DIR && (*n == "scan" || is_task_name(n)),
        [t, n, f] => *t == TASKS_DIR && is_task_name(n) && split_or_rejects(f),
        _ => false,
    }
}

/// The file name of a split's `index`-th shard.
pub fn shard_name(index: usize) -> String {
    format!("part-{index:05}.parquet")
}

/// A pretraining split's figures: rows and packing, NSP balance, the 80/10/10 masking split.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PretrainStats {
    pub rows: u64,
    /// Tokens in rows, specials included.
    pub tokens: u64,
    /// Row positions available: rows × max_len.
    pub positions: u64,
    /// `tokens / positions`.
    pub packing_efficiency: f64,
    pub nsp_random: u64,
    pub nsp_follows: u64,
    /// Share of NSP rows whose B is random.
    pub nsp_random_share: f64,
    /// Tokens of single-sentence chunks that found no partner document (only at a split's start).
    pub tokens_unused: u64,
    pub maskable_tokens: u64,
    pub masked_tokens: u64,
    pub masked_fraction: f64,
    pub replaced_mask: u64,
    pub replaced_random: u64,
    pub kept: u64,
}

impl PretrainStats {
    /// Adds another part's counts (the shares are recomputed by [`PretrainStats::finish`]).
    pub fn add(&mut self, p: &PretrainStats) {
        self.rows += p.rows;
        self.tokens += p.tokens;
        self.positions += p.positions;
        self.nsp_random += p.nsp_random;
        self.nsp_follows += p.nsp_follows;
        self.tokens_unused += p.tokens_unused;
        self.maskable_tokens += p.maskable_tokens;
        self.masked_tokens += p.masked_tokens;
        self.replaced_mask += p.replaced_mask;
        self.replaced_random += p.replaced_random;
        self.kept += p.kept;
    }

    pub fn finish(&mut self) {
        self.packing_efficiency = self.tokens as f64 / self.positions.max(1) as f64;
        self.nsp_random_share = self.nsp_random as f64 / (self.nsp_random + self.nsp_follows).max(1) as f64;
        self.masked_fraction = self.masked_tokens as f64 / self.maskable_tokens.max(1) as f64;
    }
}

impl TokenizerInfo {
    /// This tokenizer's vocabulary, as the chain compares it.
    pub fn vocab(&self) -> VocabRef {
        VocabRef { sha256: self.vocab_sha256.clone(), id: self.vocab_id.clone() }
    }

    /// The one vocabulary check of the chain: refuses `theirs`, the vocabulary of `whose` ("the
    /// model 'm.onnx'"), when it is not this tokenizer's, which `ours` names ("the shards in
    /// 'out' were tokenized with 'vocab.txt'", "pipeline `imdb` tokenizes with …"). Two
    /// vocabularies are the same when their contents are ([`vocab_id`]: the tokens in id order
    /// and the normaliser settings), whichever files they came from; a side that recorded only
    /// the file's SHA-256 (made before bertpipe recorded content) is compared by that.
    pub fn expect_vocab(&self, ours: &str, theirs: &VocabRef, whose: &str) -> Result<()> {
        let ours_ref = self.vocab();
        if ours_ref.same_as(theirs) {
            return Ok(());
        }
        let (what, mine, other) = match (&ours_ref.id, &theirs.id) {
            (Some(a), Some(b)) => ("vocab content id", a.as_str(), b.as_str()),
            _ => ("vocab sha256", ours_ref.sha256.as_str(), theirs.sha256.as_str()),
        };
        bail!(
            "vocab mismatch: {ours} ({what} {mine}), but {whose} has {what} {}; tokenize with the vocabulary the model was trained with, or use a model trained on this vocabulary",
            if other.is_empty() { "(none recorded)" } else { other }
        );
    }
}

/// A vocabulary as the chain compares it: the SHA-256 of the file it was read from (what older
/// manifests and models record) and, when known, its content identity ([`vocab_id`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VocabRef {
    pub sha256: String,
    pub id: Option<String>,
}

impl VocabRef {
    /// The content identities when both sides have one, else the file hashes.
    pub fn same_as(&self, other: &VocabRef) -> bool {
        match (&self.id, &other.id) {
            (Some(a), Some(b)) => a == b,
            _ => !self.sha256.is_empty() && self.sha256 == other.sha256,
        }
    }
}

/// A vocabulary's content identity: the SHA-256 of its tokens in id order (the token → id map a
/// WordPiece model uses, ids without a token left out) and of the normaliser settings that
/// change ids. A `vocab.txt` and a `tokenizer.json` of the same tokens and options have the
/// same identity.
pub fn vocab_id<'a>(entries: impl IntoIterator<Item = (&'a str, u32)>, lowercase: bool, strip_accents: bool) -> String {
    let mut by_id: Vec<(u32, &str)> = entries.into_iter().map(|(t, id)| (id, t)).collect();
    by_id.sort_unstable();
    vocab_id_in_order(by_id, lowercase, strip_accents)
}

/// [`vocab_id`] of entries already in `(id, token)` order, hashed as they come: the WordPiece
/// loader has them so, and a copy sorted again was fresh memory at the start of every run.
pub fn vocab_id_in_order<'a>(
    by_id: impl IntoIterator<Item = (u32, &'a str)>,
    lowercase: bool,
    strip_accents: bool,
) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    h.update(format!("bertpipe-vocab/1 lowercase={lowercase} strip_accents={strip_accents}\n").as_bytes());
    let mut last: Option<(u32, &str)> = None;
    for (id, token) in by_id {
        debug_assert!(last.is_none_or(|l| l <= (id, token)), "vocab_id_in_order: entries out of order");
        last = Some((id, token));
        h.update(id.to_le_bytes());
        h.update((token.len() as u32).to_le_bytes());
        h.update(token.as_bytes());
    }
    hex::encode(h.finalize())
}

/// What downstream steps and the manifest need to know about the tokenizer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerInfo {
    /// The SHA-256 of the vocabulary file's bytes.
    pub vocab_sha256: String,
    /// The vocabulary's content identity ([`vocab_id`]); absent in manifests written before it
    /// was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vocab_id: Option<String>,
    pub vocab_size: usize,
    pub lowercase: bool,
    /// Whether accents are stripped (absent in older manifests: then it follows `lowercase`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strip_accents: Option<bool>,
    pub special_ids: SpecialIds,
    /// `wordpiece` (the fast path) or `tokenizers` (the HF crate).
    pub encoder: String,
}

/// The ids of the special tokens, and the shape of a sequence the tokenizer's post-processor
/// makes: `cls A sep` for one segment, `cls A sep… B sep` for a pair. `cls`/`sep` are roles:
/// `[CLS]`/`[SEP]` for BERT and ModernBERT, `<s>`/`</s>` for RoBERTa and XLM-R.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecialIds {
    pub pad: u32,
    pub unk: u32,
    pub cls: u32,
    pub sep: u32,
    pub mask: u32,
    /// Separators between a pair's segments: 1 (`[SEP]`, BERT) or 2 (`</s></s>`, RoBERTa).
    #[serde(default = "one_u32", skip_serializing_if = "is_one_u32")]
    pub pair_separators: u32,
    /// Whether a pair's second segment has token type 1 (BERT) rather than 0 (RoBERTa and
    /// ModernBERT, which have no token types).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub pair_type_ids: bool,
}

impl SpecialIds {
    /// BERT's shape (`[CLS] A [SEP] B [SEP]`, B of type 1) with these ids.
    pub fn bert(pad: u32, unk: u32, cls: u32, sep: u32, mask: u32) -> SpecialIds {
        SpecialIds { pad, unk, cls, sep, mask, pair_separators: 1, pair_type_ids: true }
    }
}

fn one_u32() -> u32 {
    1
}
fn is_one_u32(n: &u32) -> bool {
    *n == 1
}
fn yes() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
}
