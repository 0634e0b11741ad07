//! Sources: streaming readers that turn a corpus into [`SourceItem`]s, one at a time.
//! None of them loads the corpus into memory.

pub mod aclimdb;
pub mod csv;
pub mod files;
pub mod jsonl;
pub mod labels;
pub mod parquet;
pub mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::contract::document::{Document, Rejected};
use crate::contract::partition::Partition;
use crate::contract::progress::Total;

pub use self::csv::Csv;
pub use self::parquet::ParquetSource;
pub use aclimdb::AclImdb;
pub use files::{split_files, FileList, FileSplits, SplitFile};
pub use jsonl::Jsonl;
pub use text::TextSource;

tagged_enum! {
    /// Where the documents come from (`source:` in the pipeline YAML).
    pub enum Source {
        "aclimdb" => AclImdb(AclImdb),
        "jsonl" => Jsonl(Jsonl),
        "csv" => Csv(Csv),
        "parquet" => Parquet(ParquetSource),
        "text" => Text(TextSource),
    }
}

impl Source {
    /// The splits this source's documents can belong to.
    pub fn split_names(&self) -> Vec<String> {
        if let Some(splits) = self.file_splits() {
            return splits.0.keys().cloned().collect();
        }
        match self {
            Source::AclImdb(s) => s.splits.clone(),
            Source::Jsonl(s) => s.split.names(),
            Source::Csv(s) => s.split.names(),
            Source::Parquet(s) => s.split.names(),
            Source::Text(s) => s.split.names(),
        }
    }
}

/// Receives what a source reads; the executor batches items onto worker threads.
pub trait Emit {
    /// The input's size, when the source knows it up front.
    fn total(&mut self, _total: Total) {}
    fn emit(&mut self, item: SourceItem) -> Result<()>;
    /// Whether files may be handed over unread ([`SourceItem::File`]) to be read by the
    /// workers: worth it with two workers or more; with one, reading on the source's own
    /// thread overlaps with the work instead.
    fn reads_files(&self) -> bool {
        false
    }
}

impl Source {
    /// Reads every record of `part`, in a deterministic order, into `out`; `seed` (the
    /// pipeline's) keys split fractions.
    pub fn read(&self, seed: u64, part: Partition, out: &mut dyn Emit) -> Result<()> {
        match self.reassigned_split() {
            Some(split) => self.read_raw(part, &mut AssignSplit { inner: out, split, seed }),
            None => self.read_raw(part, out),
        }
    }

    /// `splits:` of a file source (files per split), when it has them.
    pub fn file_splits(&self) -> Option<&FileSplits> {
        match self {
            Source::AclImdb(_) => None,
            Source::Jsonl(s) => s.splits.as_ref(),
            Source::Csv(s) => s.splits.as_ref(),
            Source::Parquet(s) => s.splits.as_ref(),
            Source::Text(s) => s.splits.as_ref(),
        }
    }

    fn file_splits_mut(&mut self) -> Option<&mut FileSplits> {
        match self {
            Source::AclImdb(_) => None,
            Source::Jsonl(s) => s.splits.as_mut(),
            Source::Csv(s) => s.splits.as_mut(),
            Source::Parquet(s) => s.splits.as_mut(),
            Source::Text(s) => s.splits.as_mut(),
        }
    }

    /// Every file this file source reads, with its split, in reading order — what its reader
    /// lists, and so what the label pass ([`Source::find_labels`]) and field detection
    /// ([`Source::detect_fields`]) read too: a `parquet` source over a bertpipe output folder
    /// lists the shards its manifest names (in split folders, not at the top level; not the
    /// rejects). None for aclImdb, which reads its own layout.
    pub fn files(&self) -> Result<Vec<SplitFile>> {
        match self {
            Source::AclImdb(_) => Ok(Vec::new()),
            Source::Parquet(s) => s.listing(),
            _ => {
                let split = self.split().cloned().unwrap_or_default();
                split_files(self.path(), self.file_splits(), &split, self.extensions(), Partition::WHOLE)
            }
        }
    }

    /// The file types this source reads (none for aclImdb, which reads its own layout).
    pub fn extensions(&self) -> &'static [&'static str] {
        match self {
            Source::AclImdb(_) => &[],
            Source::Jsonl(_) => jsonl::EXTS,
            Source::Csv(_) => self::csv::EXTS,
            Source::Parquet(_) => parquet::EXTS,
            Source::Text(_) => text::EXTS,
        }
    }

    /// Makes the source's paths absolute: `path` against `base`, then the `splits:` entries
    /// against `path` (when given) or `splits_base`. Object-storage URLs stay as they are.
    pub fn resolve_paths(&mut self, base: &Path, splits_base: &Path) {
        if !self.path().as_os_str().is_empty() {
            crate::storage::resolve_path(self.path_mut(), base);
        }
        let path = self.path().to_path_buf();
        if let Some(splits) = self.file_splits_mut() {
            splits.resolve(&path, splits_base);
        }
    }

    /// What the source reads, for a chain's fingerprint: `path`, or every file `splits:`
    /// lists (globs expanded; an entry that cannot be listed stands for itself, so its
    /// absence is seen too).
    pub fn input_paths(&self) -> Vec<PathBuf> {
        let Some(splits) = self.file_splits() else { return vec![self.path().to_path_buf()] };
        let mut out = Vec::new();
        for entry in splits.0.values().flat_map(FileList::entries) {
            match files::expand(entry, self.extensions()) {
                Ok(found) => out.extend(found.into_iter().map(|f| PathBuf::from(f.display()))),
                Err(_) => out.push(PathBuf::from(entry)),
            }
        }
        out
    }

    /// Starts listing what [`Source::read`] will read on threads of its own, where that is a
    /// folder tree (aclImdb's), so the listing overlaps what the caller does first; the
    /// listings are the next read's, and dropped with the returned guard.
    pub fn list_early(&self) -> Option<aclimdb::EarlyListing> {
        match self {
            Source::AclImdb(s) => s.list_early(),
            _ => None,
        }
    }

    /// The files that made each split, for the manifest (empty without `splits:`).
    pub fn files_by_split(&self) -> Result<BTreeMap<String, Vec<String>>> {
        match self.file_splits() {
            Some(splits) => files::files_by_split(splits, self.extensions()),
            None => Ok(BTreeMap::new()),
        }
    }

    /// The source's `split:` (an aclImdb source has none unless it re-splits its folders).
    fn split(&self) -> Option<&Split> {
        match self {
            Source::AclImdb(s) => s.split.as_ref(),
            Source::Jsonl(Jsonl { split, .. })
            | Source::Csv(Csv { split, .. })
            | Source::Parquet(ParquetSource { split, .. })
            | Source::Text(TextSource { split, .. }) => Some(split),
        }
    }

    /// The split that replaces the one each record is read with: fractions, or a name given
    /// to an aclImdb source (the others read records with their name already).
    fn reassigned_split(&self) -> Option<&Split> {
        let split = self.split()?;
        (matches!(self, Source::AclImdb(_)) || matches!(split, Split::Fractions(_))).then_some(split)
    }

    fn read_raw(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        match self {
            Source::AclImdb(s) => s.read(part, out),
            Source::Jsonl(s) => s.read(part, out),
            Source::Csv(s) => s.read(part, out),
            Source::Parquet(s) => s.read(part, out),
            Source::Text(s) => s.read(part, out),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            Source::AclImdb(s) => &s.path,
            Source::Jsonl(s) => &s.path,
            Source::Csv(s) => &s.path,
            Source::Parquet(s) => &s.path,
            Source::Text(s) => &s.path,
        }
    }

    pub fn path_mut(&mut self) -> &mut PathBuf {
        match self {
            Source::AclImdb(s) => &mut s.path,
            Source::Jsonl(s) => &mut s.path,
            Source::Csv(s) => &mut s.path,
            Source::Parquet(s) => &mut s.path,
            Source::Text(s) => &mut s.path,
        }
    }

    /// Problems found without reading the corpus: `(field, message)` pairs.
    pub fn check(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        let path = self.path();
        if let Some(splits) = self.file_splits() {
            let split = self.split().cloned().unwrap_or_default();
            problems.extend(splits.check(path, &split, self.extensions()));
            if !path.as_os_str().is_empty() && !path.exists() && !crate::storage::is_remote(path) {
                problems.push(("path", format!("'{}' does not exist", path.display())));
            }
            return problems;
        }
        if path.as_os_str().is_empty() {
            problems.push(("path", "give `path` (a file or a folder of files) or `splits` (files per split, e.g. {train: train.jsonl, test: test.jsonl})".into()));
        } else if !path.exists() && !crate::storage::is_remote(path) {
            problems.push(("path", format!("'{}' does not exist", path.display())));
        }
        if let Source::AclImdb(s) = self {
            problems.extend(s.check());
        }
        if let Some(split) = self.split() {
            problems.extend(split.check().into_iter().map(|m| ("split", m)));
        }
        problems
    }
}

/// `split:` of a source: one name for every document, or fractions of the documents by split
/// name. A document's split is then a pure function of its id and the pipeline seed — the
/// same wherever it sits in the input and however the input is divided among machines.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged, try_from = "serde_json::Value")]
pub enum Split {
    Name(String),
    Fractions(BTreeMap<String, f64>),
}

/// Either shape, or an error that shows both (serde's own for an untagged enum only says that
/// no variant matched).
impl TryFrom<serde_json::Value> for Split {
    type Error = String;

    fn try_from(v: serde_json::Value) -> std::result::Result<Split, String> {
        let help = "a split name (`train`) or fractions by name (`{train: 0.9, validation: 0.1}`)";
        match v {
            serde_json::Value::String(name) => Ok(Split::Name(name)),
            serde_json::Value::Object(map) => map
                .into_iter()
                .map(|(name, f)| match f.as_f64() {
                    Some(x) => Ok((name, x)),
                    None => Err(format!("the fraction of `{name}` is {f}, not a number: expected {help}")),
                })
                .collect::<std::result::Result<_, _>>()
                .map(Split::Fractions),
            other => Err(format!("got {other}: expected {help}")),
        }
    }
}

impl Default for Split {
    fn default() -> Split {
        Split::Name("train".into())
    }
}

impl Split {
    /// Every split a document may be given.
    pub fn names(&self) -> Vec<String> {
        match self {
            Split::Name(n) => vec![n.clone()],
            Split::Fractions(f) => f.keys().cloned().collect(),
        }
    }

    /// The name records are read with (the first fraction's until [`Split::assign`]).
    pub fn initial(&self) -> &str {
        match self {
            Split::Name(n) => n,
            Split::Fractions(f) => f.keys().next().map(String::as_str).unwrap_or("train"),
        }
    }

    /// The split of document `id`: its hash as a point in [0, 1) against the cumulative
    /// fractions, in name order.
    pub fn assign(&self, id: &str, seed: u64) -> &str {
        let fractions = match self {
            Split::Name(n) => return n,
            Split::Fractions(f) => f,
        };
        let u = unit_hash(id, seed);
        let total: f64 = fractions.values().sum();
        let mut cumulative = 0.0;
        for (name, f) in fractions {
            cumulative += f / total;
            if u < cumulative {
                return name;
            }
        }
        fractions.keys().next_back().map(String::as_str).unwrap_or("train")
    }

    pub fn check(&self) -> Vec<String> {
        let valid_name = |n: &str| {
            !n.is_empty() && n != "_rejects" && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        };
        let mut problems = Vec::new();
        let names: Vec<&String> = match self {
            Split::Name(n) => vec![n],
            Split::Fractions(f) => f.keys().collect(),
        };
        for n in names.into_iter().filter(|n| !valid_name(n)) {
            problems.push(format!("split name `{n}` must be letters, digits, `_` or `-` (it names a folder)"));
        }
        if let Split::Fractions(f) = self {
            if f.is_empty() {
                problems.push("no fractions given, e.g. {train: 0.9, validation: 0.1}".into());
            }
            if let Some((n, v)) = f.iter().find(|(_, v)| !(**v > 0.0 && **v <= 1.0)) {
                problems.push(format!("fraction of `{n}` must be in (0, 1], got {v}"));
            }
            let sum: f64 = f.values().sum();
            if !f.is_empty() && (sum - 1.0).abs() > 1e-6 {
                problems.push(format!("fractions must add up to 1, got {sum}"));
            }
        }
        problems
    }
}

/// A stable point in [0, 1) for `(id, seed)`: FNV-1a over the id's bytes, mixed with the seed
/// by SplitMix64's finaliser. Defined here, so no crate update moves a document.
fn unit_hash(id: &str, seed: u64) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in id.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut z = h ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// Gives each record read its split from a [`Split`].
struct AssignSplit<'a> {
    inner: &'a mut dyn Emit,
    split: &'a Split,
    seed: u64,
}

impl Emit for AssignSplit<'_> {
    fn total(&mut self, total: Total) {
        self.inner.total(total);
    }

    fn reads_files(&self) -> bool {
        self.inner.reads_files()
    }

    fn emit(&mut self, mut item: SourceItem) -> Result<()> {
        let split = self.split.assign(item.id(), self.seed).to_string();
        item.set_split(split);
        self.inner.emit(item)
    }
}

/// What to do with bytes that are not valid UTF-8.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum InvalidUtf8 {
    /// Decode lossily (U+FFFD) and count the document in `utf8_replaced`.
    #[default]
    Replace,
    /// Send the document to the rejects with reason `invalid_utf8`.
    Reject,
}

/// Turns raw bytes into document text: drops a UTF-8 BOM, rejects binary (NUL bytes) and
/// empty documents, applies the invalid-UTF-8 policy and makes CRLF and CR line breaks `\n`.
/// Returns the text and whether bytes were replaced, or a reject reason with the bytes.
pub fn decode_text(
    mut bytes: Vec<u8>,
    policy: InvalidUtf8,
) -> std::result::Result<(String, bool), (&'static str, Vec<u8>)> {
    if bytes.starts_with(b"\xEF\xBB\xBF") {
        bytes.drain(..3);
    }
    if memchr::memchr(0, &bytes).is_some() {
        return Err(("binary", bytes));
    }
    let (text, replaced) = match String::from_utf8(bytes) {
        Ok(s) => (s, false),
        Err(e) if policy == InvalidUtf8::Reject => return Err(("invalid_utf8", e.into_bytes())),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
    };
    let text = normalize_line_breaks(text);
    if text.trim().is_empty() {
        return Err(("empty", text.into_bytes()));
    }
    Ok((text, replaced))
}

fn normalize_line_breaks(text: String) -> String {
    if !text.contains('\r') {
        return text;
    }
    text.replace("\r\n", "\n").replace('\r', "\n")
}

/// A file a folder source found, read and decoded later by a worker ([`PendingFile::load`]).
#[derive(Debug)]
pub struct PendingFile {
    pub meta: RecordMeta,
    pub path: PathBuf,
    pub policy: InvalidUtf8,
    /// A `source` reject reason decided from the name alone (the text is still read, so the
    /// rejects hold it).
    pub reject: Option<String>,
}

impl PendingFile {
    /// Reads the file into a document or a `source` reject. A file that cannot be read is an
    /// error naming it, as when the reader thread read it.
    /// Its `input_bytes` are the bytes read (the listing did not `stat` the file).
    pub fn load(mut self) -> Result<SourceItem> {
        if let Some(reason) = self.reject {
            let text = crate::contract::reads::read_in_folder(&self.path)
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            self.meta.input_bytes = text.len() as u64;
            return Ok(self.meta.reject(reason, text));
        }
        let bytes = crate::contract::reads::read_in_folder(&self.path)
            .with_context(|| format!("could not read '{}'", self.path.display()))?;
        self.meta.input_bytes = bytes.len() as u64;
        Ok(self.meta.into_item(bytes, self.policy))
    }
}

/// The fields a source knows about a record before its text is decoded.
#[derive(Debug)]
pub struct RecordMeta {
    pub id: String,
    pub split: String,
    pub label: Option<i64>,
    pub rating: Option<i8>,
    pub origin: String,
    pub input_bytes: u64,
}

impl RecordMeta {
    /// A document, or a `source` reject when the bytes cannot become one.
    pub fn into_item(self, bytes: Vec<u8>, policy: InvalidUtf8) -> SourceItem {
        match decode_text(bytes, policy) {
            Ok((text, utf8_replaced)) => SourceItem::Doc(Document {
                id: self.id,
                split: self.split,
                label: self.label,
                rating: self.rating,
                text,
                origin: self.origin,
                utf8_replaced,
                input_bytes: self.input_bytes,
                ..Default::default()
            }),
            Err((reason, bytes)) => self.reject(reason.to_string(), String::from_utf8_lossy(&bytes).into_owned()),
        }
    }

    pub fn reject(self, reason: String, text: String) -> SourceItem {
        SourceItem::Reject(Rejected {
            id: self.id,
            split: self.split,
            step: "source".into(),
            reason,
            origin: self.origin,
            text,
            input_bytes: self.input_bytes,
        })
    }
}

/// Maps a label cell (number, boolean or string) to a class id. Strings go through
/// `label_map` first, then are parsed as integers. Empty/null means unlabelled.
pub fn parse_label(
    value: &serde_json::Value,
    label_map: Option<&BTreeMap<String, i64>>,
) -> std::result::Result<Option<i64>, String> {
    use serde_json::Value;
    match value {
        Value::Null => Ok(None),
        Value::Bool(b) => Ok(Some(*b as i64)),
        Value::Number(n) => n.as_i64().map(Some).ok_or_else(|| format!("label {n} is not an integer")),
        Value::String(s) if s.trim().is_empty() => Ok(None),
        Value::String(s) => {
            if let Some(id) = label_map.and_then(|m| m.get(s.trim())) {
                return Ok(Some(*id));
            }
            s.trim().parse::<i64>().map(Some).map_err(|_| match label_map {
                Some(m) => {
                    format!("label `{s}` is not in label_map ({})", m.keys().cloned().collect::<Vec<_>>().join(", "))
                }
                None => format!("label `{s}` is not an integer; add a label_map"),
            })
        }
        other => Err(format!("label {other} is not a number or string")),
    }
}

/// One input file: on disk, or an object in a bucket.
#[derive(Debug, Clone)]
pub enum InputFile {
    Local(PathBuf),
    Remote { remote: crate::storage::Remote, rel: String, size: u64 },
}

impl InputFile {
    /// The file's name (its last path component).
    pub fn name(&self) -> String {
        match self {
            InputFile::Local(p) => p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            InputFile::Remote { remote, rel, .. } => {
                let full = remote.url_of(rel);
                full.rsplit('/').next().unwrap_or_default().to_string()
            }
        }
    }

    /// The path or URL, for messages and record origins.
    pub fn display(&self) -> String {
        match self {
            InputFile::Local(p) => p.display().to_string(),
            InputFile::Remote { remote, rel, .. } => remote.url_of(rel),
        }
    }

    pub fn has_extension(&self, ext: &str) -> bool {
        has_extension(&self.name(), &[ext])
    }

    pub fn size(&self) -> u64 {
        match self {
            InputFile::Local(p) => file_size(p),
            InputFile::Remote { size, .. } => *size,
        }
    }

    /// Runs `f` on a local path of the file: the file itself, or for an object a download
    /// into a spool file of this process, removed afterwards — for Parquet, which is read
    /// footer first and so cannot be streamed.
    pub fn with_local<T>(&self, f: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
        match self {
            InputFile::Local(p) => f(p),
            InputFile::Remote { remote, rel, .. } => {
                let dir = std::env::temp_dir().join(format!("bertpipe-spool-{}", std::process::id()));
                let local = dir.join(self.name());
                remote.download(rel, &local)?;
                let out = f(&local);
                std::fs::remove_file(&local).ok();
                std::fs::remove_dir(&dir).ok();
                out
            }
        }
    }

    /// The bytes, streamed (an object is read as it downloads).
    pub fn open(&self) -> Result<Box<dyn std::io::Read + Send>> {
        Ok(match self {
            InputFile::Local(p) => {
                Box::new(crate::contract::reads::open(p).with_context(|| format!("could not open '{}'", p.display()))?)
            }
            InputFile::Remote { remote, rel, .. } => Box::new(remote.reader(rel)?),
        })
    }
}

/// The files of `part`: a contiguous range of [`input_files`] (a single file is one unit, so
/// it goes whole to the first task of an array). `path` may be a bucket prefix (`s3://…`):
/// its objects with one of `exts`, directly under it, in name order — or one such object.
pub fn input_files_of(path: &Path, exts: &[&str], part: Partition) -> Result<Vec<InputFile>> {
    let mut files = if crate::storage::is_remote(path) {
        remote_input_files(path, exts)?
    } else {
        input_files(path, exts)?.into_iter().map(InputFile::Local).collect()
    };
    let range = part.range(files.len());
    files.truncate(range.end);
    files.drain(..range.start);
    Ok(files)
}

fn remote_input_files(path: &Path, exts: &[&str]) -> Result<Vec<InputFile>> {
    let remote = crate::storage::Remote::open(path)?;
    let ext_ok = |name: &str| has_extension(name, exts);
    if ext_ok(remote.url()) {
        if let Some(size) = remote.size("")? {
            return Ok(vec![InputFile::Remote { remote, rel: String::new(), size }]);
        }
    }
    let files: Vec<InputFile> = remote
        .list()?
        .into_iter()
        .filter(|(rel, _)| !rel.contains('/') && ext_ok(rel))
        .map(|(rel, size)| InputFile::Remote { remote: remote.clone(), rel, size })
        .collect();
    if files.is_empty() {
        anyhow::bail!("no .{} objects in '{}' (or it does not exist)", exts.join("/."), remote.url());
    }
    Ok(files)
}

/// A file, or the files directly inside a folder whose extension is one of `exts`, sorted.
pub fn input_files(path: &Path, exts: &[&str]) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in
        crate::contract::reads::read_dir(path).with_context(|| format!("could not list '{}'", path.display()))?
    {
        let p = entry?.path();
        if p.is_file() && has_extension(&p.file_name().unwrap_or_default().to_string_lossy(), exts) {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        anyhow::bail!("no .{} files in '{}'", exts.join("/."), path.display());
    }
    Ok(files)
}

/// Whether a file name ends in `.` and one of `exts`, in any case.
fn has_extension(name: &str, exts: &[&str]) -> bool {
    name.rsplit_once('.').is_some_and(|(_, e)| exts.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

pub(crate) fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED_ASSIGNMENT: &str = "[44, 50, 54, 72]";

    #[test]
    fn decode_table() {
        let r = InvalidUtf8::Replace;
        let decode_text = |b: Vec<u8>, p| decode_text(b, p).map_err(|e| e.0);
        assert_eq!(decode_text(b"\xEF\xBB\xBFhello".to_vec(), r), Ok(("hello".into(), false)));
        assert_eq!(decode_text(b"a\r\nb\rc".to_vec(), r), Ok(("a\nb\nc".into(), false)));
        assert_eq!(decode_text(b"caf\xE9 ok".to_vec(), r), Ok(("caf\u{FFFD} ok".into(), true)));
        assert_eq!(decode_text(b"caf\xE9".to_vec(), InvalidUtf8::Reject), Err("invalid_utf8"));
        assert_eq!(decode_text(b"\x00\x01\x02junk".to_vec(), r), Err("binary"));
        assert_eq!(decode_text(b"  \n ".to_vec(), r), Err("empty"));
        assert_eq!(decode_text(Vec::new(), r), Err("empty"));
    }

    #[test]
    fn labels() {
        use serde_json::json;
        let map: BTreeMap<String, i64> = [("pos".to_string(), 1), ("neg".to_string(), 0)].into();
        assert_eq!(parse_label(&json!(1), None), Ok(Some(1)));
        assert_eq!(parse_label(&json!(true), None), Ok(Some(1)));
        assert_eq!(parse_label(&json!("0"), None), Ok(Some(0)));
        assert_eq!(parse_label(&json!("pos"), Some(&map)), Ok(Some(1)));
        assert_eq!(parse_label(&json!(null), None), Ok(None));
        assert!(parse_label(&json!("meh"), Some(&map)).unwrap_err().contains("label_map"));
        assert!(parse_label(&json!(1.5), None).is_err());
    }

    #[test]
    fn split_fractions_are_stable_and_near_their_shares() {
        let split: Split = serde_json::from_str(r#"{"train": 0.9, "validation": 0.1}"#).unwrap();
        assert!(split.check().is_empty());
        let ids: Vec<String> = (0..20_000).map(|i| format!("reviews.csv:{i}")).collect();
        let a: Vec<&str> = ids.iter().map(|id| split.assign(id, 42)).collect();
        let val = a.iter().filter(|s| **s == "validation").count() as f64 / ids.len() as f64;
        assert!((val - 0.1).abs() < 0.01, "validation share {val}");
        // Order-independent: the same id gets the same split, alone or among others.
        assert_eq!(split.assign("reviews.csv:17", 42), a[17]);
        // Pinned: changing the hash moves documents between splits in existing datasets.
        let validation: Vec<usize> =
            (0..100).filter(|i| split.assign(&format!("doc{i}"), 42) == "validation").collect();
        assert_eq!(format!("{validation:?}"), PINNED_ASSIGNMENT);
        // Another seed, another assignment.
        let b: Vec<&str> = ids.iter().map(|id| split.assign(id, 7)).collect();
        assert!(a.iter().zip(&b).filter(|(x, y)| x != y).count() > 1000);
        assert!(serde_json::from_str::<Split>(r#"{"train": 0.9, "validation": 0.2}"#).unwrap().check()[0]
            .contains("add up to 1"));
        assert!(!serde_json::from_str::<Split>(r#""a/b""#).unwrap().check().is_empty());
        let e = serde_json::from_str::<Split>(r#"{"train": "most"}"#).unwrap_err().to_string();
        assert!(e.contains("fraction of `train`") && e.contains("{train: 0.9"), "{e}");
        let e = serde_json::from_str::<Split>("[1, 2]").unwrap_err().to_string();
        assert!(e.contains("a split name (`train`)"), "{e}");
    }
}

/// What a source yields: a document, or a record it could not turn into one.
#[derive(Debug)]
pub enum SourceItem {
    Doc(Document),
    Reject(Rejected),
    /// A file to be read into a document by the worker that processes it, so a folder of
    /// many small files is opened and read on every core instead of on the reader thread.
    File(PendingFile),
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

/// The fields (JSONL) or columns (CSV, Parquet) a label is found under when the configuration
/// names none, in order of preference, and the id's.
pub const LABEL_NAMES: &[&str] = &["label", "labels", "sentiment"];
pub const ID_NAMES: &[&str] = &["id"];

impl Source {
    /// Names the label and id fields of a `jsonl`, `csv` or `parquet` source whose
    /// configuration names none, from what its first file has: the first record's fields, the
    /// header, the schema ([`LABEL_NAMES`], [`ID_NAMES`]). HF `datasets` picks a `label` column up
    /// the same way; before this, the labels of such a corpus were silently left out. Returns
    /// what was found, for the run summary (`label from field `label``); nothing when the
    /// fields are named or the first file cannot be read (reading it then reports why).
    pub fn detect_fields(&mut self) -> Vec<String> {
        let (label_missing, id_missing, what) = match self {
            Source::Jsonl(s) => (s.label_field.is_none(), s.id_field.is_none(), "field"),
            Source::Csv(s) => (s.label_column.is_none(), s.id_column.is_none(), "column"),
            Source::Parquet(s) => (s.label_column.is_none(), s.id_column.is_none(), "column"),
            _ => return Vec::new(),
        };
        if !label_missing && !id_missing {
            return Vec::new();
        }
        let Some(names) = self.first_names() else { return Vec::new() };
        let pick = |want: &[&str]| want.iter().find(|w| names.iter().any(|n| n == *w)).map(|w| w.to_string());
        let found_label = if label_missing { pick(LABEL_NAMES) } else { None };
        let found_id = if id_missing { pick(ID_NAMES) } else { None };
        let mut found = Vec::new();
        found.extend(found_label.as_ref().map(|l| format!("label from {what} `{l}`")));
        found.extend(found_id.as_ref().map(|i| format!("id from {what} `{i}`")));
        let (label, id) = match self {
            Source::Jsonl(s) => (&mut s.label_field, &mut s.id_field),
            Source::Csv(s) => (&mut s.label_column, &mut s.id_column),
            Source::Parquet(s) => (&mut s.label_column, &mut s.id_column),
            _ => return Vec::new(),
        };
        if found_label.is_some() {
            *label = found_label;
        }
        if found_id.is_some() {
            *id = found_id;
        }
        found
    }

    /// The field or column names of the first file: the first record's (JSONL, or the first
    /// element of a JSON array), the header (CSV), the schema (Parquet).
    fn first_names(&self) -> Option<Vec<String>> {
        use std::io::{BufRead, BufReader, Read};
        let kind: u8 = match self {
            Source::Jsonl(_) => 0,
            Source::Csv(_) => 1,
            Source::Parquet(_) => 2,
            _ => return None,
        };
        // The first file the reader reads (a bertpipe output folder's first shard).
        let file = self.files().ok()?.into_iter().next()?.file;
        match kind {
            0 => {
                let mut r = BufReader::new(file.open().ok()?);
                let first = jsonl::first_byte(&mut r).ok()??;
                let value: serde_json::Value = if first == b'[' {
                    // The first element of the array: parse a bounded prefix element by element.
                    let mut de = serde_json::Deserializer::from_reader(r);
                    jsonl::first_element(&mut de).ok()??
                } else {
                    let mut line = String::new();
                    r.take(16 << 20).read_line(&mut line).ok()?;
                    serde_json::from_str(&line).ok()?
                };
                Some(value.as_object()?.keys().cloned().collect())
            }
            1 => {
                let Source::Csv(c) = self else { return None };
                let delimiter = c.delimiter(&file);
                let mut r = ::csv::ReaderBuilder::new().delimiter(delimiter).from_reader(file.open().ok()?);
                let names: Vec<String> =
                    r.headers().ok()?.iter().map(|h| h.trim_start_matches('\u{feff}').trim().to_string()).collect();
                Some(names)
            }
            _ => {
                // An object is spooled: Parquet is read footer first.
                file.with_local(|p| {
                    let b = ::parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                        std::fs::File::open(p)?,
                    )?;
                    Ok(b.schema().fields().iter().map(|f| f.name().clone()).collect())
                })
                .ok()
            }
        }
    }
}
