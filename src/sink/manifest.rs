//! `manifest.json` (written last: its presence means the output is complete) and the journal
//! of finished shards that `--resume` uses after a crash.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::shard::{sha256_file, ShardInfo};

pub const FORMAT: &str = "bertpipe-shards/1";
pub const MANIFEST: &str = "manifest.json";
pub const JOURNAL: &str = "_journal.jsonl";
pub const REJECTS: &str = "_rejects";

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Manifest {
    pub format: String,
    pub created_by: String,
    /// `clean`, `classify` or `pretrain`.
    pub task: String,
    pub name: String,
    /// The resolved pipeline (overrides applied, absolute paths).
    pub config: serde_json::Value,
    pub config_sha256: String,
    pub tokenizer: Option<serde_json::Value>,
    pub max_len: Option<u32>,
    pub seed: u64,
    pub splits: BTreeMap<String, SplitStats>,
    pub rejects: RejectsInfo,
    /// A task array's output: on a task's own manifest its index and the count; on the one
    /// `shards merge` writes, the count (shard files are then under `tasks/NNNNN/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<TasksInfo>,
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
    /// Tokenisation and truncation figures, when the pipeline tokenizes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenization: Option<TokenStats>,
    /// Pretraining figures: masked fraction and 80/10/10 split, NSP balance, packing efficiency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pretraining: Option<crate::sequence::pretrain::PretrainStats>,
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

impl Manifest {
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
        if !path.exists() && out.join(crate::pipeline::tasks::TASKS_DIR).is_dir() {
            bail!(
                "'{}' is the output of a task array that is not merged yet: when every task has finished, run `bertpipe shards merge {}`",
                out.display(),
                out.display()
            );
        }
        let text = std::fs::read(&path).with_context(|| format!("could not read '{}'", path.display()))?;
        Manifest::from_json(&text, &path.display().to_string())
    }

    /// Parses a manifest's bytes; `shown` names it in errors.
    pub fn from_json(bytes: &[u8], shown: &str) -> Result<Manifest> {
        let m: Manifest =
            serde_json::from_slice(bytes).with_context(|| format!("'{shown}' is not a bertpipe manifest"))?;
        if m.format != FORMAT {
            bail!("'{shown}' has format `{}`; this bertpipe reads `{FORMAT}`", m.format);
        }
        Ok(m)
    }
}

#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum JournalLine {
    Header { config_sha256: String },
    Shard { folder: String, shard: ShardInfo },
}

/// Append-only record of completed shards.
pub struct Journal {
    file: File,
}

impl Journal {
    pub fn create(out: &Path, config_sha256: &str) -> Result<Journal> {
        let path = out.join(JOURNAL);
        let mut file = File::create(&path).with_context(|| format!("could not create '{}'", path.display()))?;
        writeln!(file, "{}", serde_json::to_string(&JournalLine::Header { config_sha256: config_sha256.into() })?)?;
        Ok(Journal { file })
    }

    /// Opens an existing journal for appending after a resume.
    pub fn append(out: &Path) -> Result<Journal> {
        let path = out.join(JOURNAL);
        let file = OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("could not open '{}'", path.display()))?;
        Ok(Journal { file })
    }

    pub fn record(&mut self, folder: &str, shard: &ShardInfo) -> Result<()> {
        let line = serde_json::to_string(&JournalLine::Shard { folder: folder.into(), shard: shard.clone() })?;
        writeln!(self.file, "{line}")?;
        self.file.flush()?;
        Ok(())
    }

    /// Shards of an interrupted run that are still intact, per folder, in order. Stops at the
    /// first shard of a folder that is missing or fails its checksum: later ones are rewritten.
    pub fn verified_shards(out: &Path, config_sha256: &str) -> Result<BTreeMap<String, Vec<ShardInfo>>> {
        Self::verified_shards_with(out, config_sha256, &mut |shard: &ShardInfo| {
            let file = out.join(&shard.file);
            Ok(file.is_file() && sha256_file(&file).map(|h| h == shard.sha256).unwrap_or(false))
        })
    }

    /// As [`Journal::verified_shards`], with `intact` deciding whether a recorded shard is
    /// still there and whole (on disk, or in a bucket).
    pub fn verified_shards_with(
        out: &Path,
        config_sha256: &str,
        intact: &mut dyn FnMut(&ShardInfo) -> Result<bool>,
    ) -> Result<BTreeMap<String, Vec<ShardInfo>>> {
        let path = out.join(JOURNAL);
        let file = File::open(&path).with_context(|| {
            format!("'{}' has no journal of an interrupted run ({JOURNAL}); run without --resume", out.display())
        })?;
        let mut kept: BTreeMap<String, Vec<ShardInfo>> = BTreeMap::new();
        let mut broken: std::collections::BTreeSet<String> = Default::default();
        for (i, line) in BufReader::new(file).lines().enumerate() {
            let line = line?;
            // A crash can cut the last line short; everything before it is still good.
            let Ok(entry) = serde_json::from_str::<JournalLine>(&line) else {
                break;
            };
            match entry {
                JournalLine::Header { config_sha256: h } => {
                    if i == 0 && h != config_sha256 {
                        bail!(
                            "the pipeline changed since the interrupted run in '{}'; --resume needs the same configuration (use --overwrite to start over)",
                            out.display()
                        );
                    }
                }
                JournalLine::Shard { folder, shard } => {
                    if broken.contains(&folder) {
                        continue;
                    }
                    let ok = intact(&shard)?;
                    let expected =
                        format!("{folder}/{}", super::shard::shard_name(kept.get(&folder).map_or(0, Vec::len)));
                    if ok && shard.file == expected {
                        kept.entry(folder).or_default().push(shard);
                    } else {
                        broken.insert(folder);
                    }
                }
            }
        }
        Ok(kept)
    }
}

/// Files a resumed run must not keep: temporaries and shards beyond the verified ones.
pub fn stale_files(out: &Path, kept: &BTreeMap<String, Vec<ShardInfo>>) -> Result<Vec<PathBuf>> {
    let mut stale = Vec::new();
    for entry in std::fs::read_dir(out)? {
        let dir = entry?.path();
        if !dir.is_dir() {
            continue;
        }
        let folder = dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let keep: Vec<&str> =
            kept.get(&folder).map(|v| v.iter().map(|s| s.file.as_str()).collect()).unwrap_or_default();
        for f in std::fs::read_dir(&dir)? {
            let f = f?.path();
            let rel = format!("{folder}/{}", f.file_name().unwrap_or_default().to_string_lossy());
            if !keep.contains(&rel.as_str()) {
                stale.push(f);
            }
        }
    }
    Ok(stale)
}
