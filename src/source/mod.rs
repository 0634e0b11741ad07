//! Sources: streaming readers that turn a corpus into [`SourceItem`]s, one at a time.
//! None of them loads the corpus into memory.

pub mod aclimdb;
pub mod csv;
pub mod jsonl;
pub mod parquet;
pub mod text;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::document::{Document, Rejected, SourceItem};

pub use self::csv::Csv;
pub use self::parquet::ParquetSource;
pub use aclimdb::AclImdb;
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

/// Receives what a source reads; the executor batches items onto worker threads.
pub trait Emit {
    /// The input size in bytes, when the source knows it up front (drives progress and ETA).
    fn total_bytes(&mut self, _bytes: u64) {}
    fn emit(&mut self, item: SourceItem) -> Result<()>;
}

impl Source {
    /// Reads every record, in a deterministic order, into `out`.
    pub fn read(&self, out: &mut dyn Emit) -> Result<()> {
        match self {
            Source::AclImdb(s) => s.read(out),
            Source::Jsonl(s) => s.read(out),
            Source::Csv(s) => s.read(out),
            Source::Parquet(s) => s.read(out),
            Source::Text(s) => s.read(out),
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
        if !self.path().exists() {
            problems.push(("path", format!("'{}' does not exist", self.path().display())));
        }
        if let Source::AclImdb(s) = self {
            problems.extend(s.check());
        }
        problems
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

/// The fields a source knows about a record before its text is decoded.
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

/// A file, or the files directly inside a folder whose extension is one of `exts`, sorted.
pub fn input_files(path: &Path, exts: &[&str]) -> Result<Vec<PathBuf>> {
    if !path.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).with_context(|| format!("could not list '{}'", path.display()))? {
        let p = entry?.path();
        let ext_ok =
            p.extension().and_then(|e| e.to_str()).is_some_and(|e| exts.iter().any(|x| x.eq_ignore_ascii_case(e)));
        if p.is_file() && ext_ok {
            files.push(p);
        }
    }
    files.sort();
    if files.is_empty() {
        anyhow::bail!("no .{} files in '{}'", exts.join("/."), path.display());
    }
    Ok(files)
}

pub(crate) fn file_size(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

fn default_split() -> String {
    "train".into()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
