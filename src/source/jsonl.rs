//! `jsonl`: one JSON object per line — or a `.json` file holding one JSON array of objects, as
//! many exports are, read element by element without loading the array.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{parse_label, split_files, Emit, FileSplits, InvalidUtf8, RecordMeta, Split, SplitFile};
use crate::contract::partition::Partition;
use crate::contract::progress::Total;

/// Read JSON Lines: one object per line. A line that is not valid JSON, or lacks the text
/// field, goes to the rejects with its line number. Blank lines are skipped. A file whose first
/// character is `[` is one JSON array of objects instead: its elements are the records (ids
/// `<file>:<n>`, the element's number), and a syntax error in it is an error naming the file,
/// line and column (a damaged array cannot be re-entered after the damage).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Jsonl {
    /// A `.jsonl` file, or a folder of them (read in name order). With `splits`, the folder
    /// their entries are in (optional).
    #[serde(default)]
    pub path: PathBuf,
    /// Field holding the document text.
    #[serde(default = "default_text_field")]
    pub text_field: String,
    /// Field holding the label (integer, boolean, or a string mapped by `label_map`).
    #[serde(default)]
    pub label_field: Option<String>,
    /// Field holding a document id; default `<file>:<line>`.
    #[serde(default)]
    pub id_field: Option<String>,
    /// String labels to class ids, e.g. `{neg: 0, pos: 1}`.
    #[serde(default)]
    pub label_map: Option<BTreeMap<String, i64>>,
    /// Label names found in the corpus when there is no `label_map` ([`super::labels`]); not
    /// part of the configuration (its hash stays what the user wrote).
    #[serde(skip)]
    pub found_labels: Option<BTreeMap<String, i64>>,
    /// The split every document belongs to, or fractions (`{train: 0.9, validation: 0.1}`)
    /// assigned by a stable hash of the document id and the pipeline seed.
    #[serde(default)]
    pub split: Split,
    /// Files per split instead of `path` + `split`: `{train: train.jsonl, test: [a.jsonl,
    /// b.jsonl]}` — a path, a glob or a list of them per split (relative to `path` when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<FileSplits>,
    /// `replace` (default) or `reject` lines that are not valid UTF-8.
    #[serde(default)]
    pub on_invalid_utf8: InvalidUtf8,
}

/// The file types a `jsonl` source reads.
pub const EXTS: &[&str] = &["jsonl", "json", "ndjson"];

fn default_text_field() -> String {
    "text".into()
}

impl Jsonl {
    pub fn read(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        let files = split_files(&self.path, self.splits.as_ref(), &self.split, EXTS, part)?;
        out.total(Total::Bytes(files.iter().map(|f| f.file.size()).sum()));
        for SplitFile { file, split, key: name } in files {
            let mut reader = BufReader::with_capacity(1 << 20, file.open()?);
            let (first, blank_lines) =
                skip_to_first_byte(&mut reader).with_context(|| format!("could not read '{}'", file.display()))?;
            if first == Some(b'[') {
                self.read_array(&file, &split, &name, reader, out)?;
                continue;
            }
            let mut buf = Vec::new();
            // Line numbers (ids, reject origins) count the blank lines skipped before the first
            // record too: they are the file's own line numbers.
            let mut line_no = blank_lines;
            loop {
                buf.clear();
                let n = reader
                    .read_until(b'\n', &mut buf)
                    .with_context(|| format!("could not read '{}'", file.display()))?;
                if n == 0 {
                    break;
                }
                line_no += 1;
                if buf.iter().all(|b| b.is_ascii_whitespace()) {
                    continue;
                }
                let meta = RecordMeta {
                    id: format!("{name}:{line_no}"),
                    split: split.clone(),
                    label: None,
                    rating: None,
                    origin: format!("{}:{line_no}", file.display()),
                    input_bytes: n as u64,
                };
                out.emit(self.record(meta, std::mem::take(&mut buf)))?;
            }
        }
        Ok(())
    }

    /// The elements of a JSON array, one record each, streamed.
    fn read_array(
        &self,
        file: &super::InputFile,
        split: &str,
        name: &str,
        reader: impl std::io::Read,
        out: &mut dyn Emit,
    ) -> Result<()> {
        let mut n = 0u64;
        let mut failed: Option<anyhow::Error> = None;
        let mut de = serde_json::Deserializer::from_reader(reader);
        let walked = each_element(&mut de, |value| {
            n += 1;
            let line = serde_json::to_vec(&value).unwrap_or_default();
            let meta = RecordMeta {
                id: format!("{name}:{n}"),
                split: split.to_string(),
                label: None,
                rating: None,
                origin: format!("{}#{n}", file.display()),
                input_bytes: line.len() as u64,
            };
            match out.emit(self.record(meta, line)) {
                Ok(()) => true,
                Err(e) => {
                    failed = Some(e);
                    false
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        walked.with_context(|| format!("'{}' is not a JSON array of records (after {n} elements)", file.display()))?;
        de.end().with_context(|| format!("'{}' has more after its JSON array", file.display()))
    }

    fn record(&self, mut meta: RecordMeta, line: Vec<u8>) -> crate::source::SourceItem {
        use serde_json::Value;
        let (line, line_replaced) = match super::decode_text(line, self.on_invalid_utf8) {
            Ok(decoded) => decoded,
            Err((reason, bytes)) => {
                return meta.reject(reason.to_string(), String::from_utf8_lossy(&bytes).into_owned())
            }
        };
        // A rejected line keeps its text as read (decoded), so it can be fixed and fed again.
        let mut value: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => return meta.reject(format!("bad_json:{e}"), line),
        };
        let Some(obj) = value.as_object_mut() else {
            return meta.reject("bad_json:not an object".into(), line);
        };
        if let Some(id) = self.id_field.as_ref().and_then(|f| obj.get(f)) {
            meta.id = id.as_str().map_or_else(|| id.to_string(), str::to_string);
        }
        if let Some(field) = &self.label_field {
            match parse_label(
                obj.get(field).unwrap_or(&Value::Null),
                self.label_map.as_ref().or(self.found_labels.as_ref()),
            ) {
                Ok(l) => meta.label = l,
                Err(e) => return meta.reject(format!("bad_label:{e}"), line),
            }
        }
        match obj.remove(&self.text_field) {
            Some(Value::String(text)) => {
                let mut item = meta.into_item(text.into_bytes(), self.on_invalid_utf8);
                if let crate::source::SourceItem::Doc(d) = &mut item {
                    // Invalid bytes were replaced when the line was decoded, before the JSON parse.
                    d.utf8_replaced = line_replaced;
                }
                item
            }
            Some(_) => meta.reject(format!("bad_field:`{}` is not a string", self.text_field), line),
            None => meta.reject(format!("missing_field:{}", self.text_field), line),
        }
    }
}

/// The first byte that is not whitespace (after a UTF-8 BOM), left unread; `None` for an empty
/// input. What comes before it is consumed: [`skip_to_first_byte`] says how many lines that was.
pub fn first_byte(r: &mut impl BufRead) -> std::io::Result<Option<u8>> {
    Ok(skip_to_first_byte(r)?.0)
}

/// [`first_byte`], and how many line breaks (`\n`) the whitespace consumed before it held: the
/// lines a reader that numbers lines has passed (a record that starts on line 4 after three
/// blank lines is line 4, not line 1).
pub fn skip_to_first_byte(r: &mut impl BufRead) -> std::io::Result<(Option<u8>, u64)> {
    let mut start = true;
    let mut lines = 0u64;
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok((None, lines));
        }
        let mut skip = 0;
        if start && buf.starts_with(b"\xEF\xBB\xBF") {
            skip = 3;
        }
        start = false;
        match buf[skip..].iter().position(|b| !b.is_ascii_whitespace()) {
            Some(i) => {
                let b = buf[skip + i];
                lines += memchr::memchr_iter(b'\n', &buf[skip..skip + i]).count() as u64;
                r.consume(skip + i);
                return Ok((Some(b), lines));
            }
            None => {
                let n = buf.len();
                lines += memchr::memchr_iter(b'\n', &buf[skip..]).count() as u64;
                r.consume(n);
            }
        }
    }
}

/// Calls `f` with each element of the JSON array `de` reads, until it returns false.
pub fn each_element<'de, R: serde_json::de::Read<'de>>(
    de: &mut serde_json::Deserializer<R>,
    f: impl FnMut(serde_json::Value) -> bool,
) -> std::result::Result<(), serde_json::Error> {
    use serde::de::{Deserializer as _, SeqAccess, Visitor};
    struct Each<F>(F);
    impl<'de, F: FnMut(serde_json::Value) -> bool> Visitor<'de> for Each<F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON array")
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> std::result::Result<(), A::Error> {
            while let Some(v) = seq.next_element::<serde_json::Value>()? {
                if !(self.0)(v) {
                    return Err(serde::de::Error::custom("stopped"));
                }
            }
            Ok(())
        }
    }
    de.deserialize_seq(Each(f))
}

/// The first element of the JSON array `de` reads (the rest is not read).
pub fn first_element<'de, R: serde_json::de::Read<'de>>(
    de: &mut serde_json::Deserializer<R>,
) -> std::result::Result<Option<serde_json::Value>, serde_json::Error> {
    let mut first = None;
    // Stopping after the first element ends the walk with an error, which is expected.
    let _ = each_element(de, |v| {
        first = Some(v);
        false
    });
    Ok(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceItem;

    #[test]
    fn the_lines_before_the_first_record_are_counted() {
        let mut r = std::io::Cursor::new(b"\xEF\xBB\xBF\n \r\n\n  {\"a\": 1}\n".to_vec());
        assert_eq!(skip_to_first_byte(&mut r).unwrap(), (Some(b'{'), 3));
        // Whitespace over several buffer fills.
        let mut r = BufReader::with_capacity(2, std::io::Cursor::new(b"\n\n\n \n\n[1]".to_vec()));
        assert_eq!(skip_to_first_byte(&mut r).unwrap(), (Some(b'['), 5));
        assert_eq!(skip_to_first_byte(&mut std::io::Cursor::new(b"\n\n".to_vec())).unwrap(), (None, 2));
    }

    struct Collect(Vec<SourceItem>);

    impl Emit for Collect {
        fn emit(&mut self, item: SourceItem) -> Result<()> {
            self.0.push(item);
            Ok(())
        }
    }

    /// Ids and reject origins are the file's line numbers, blank lines before the first record
    /// included (they were off by the number of those lines).
    #[test]
    fn ids_and_origins_count_leading_blank_lines() {
        let dir = std::env::temp_dir().join(format!("bertpipe-jsonl-lines-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("c.jsonl");
        std::fs::write(&file, "\n\n{\"text\": \"first\"}\nnot json\n\n{\"text\": \"last\"}\n").unwrap();
        let source: Jsonl = serde_json::from_value(serde_json::json!({ "path": file })).unwrap();
        let mut got = Collect(Vec::new());
        source.read(Partition::WHOLE, &mut got).unwrap();
        let seen: Vec<(String, String)> = got
            .0
            .iter()
            .map(|item| match item {
                SourceItem::Doc(d) => (d.id.clone(), d.origin.clone()),
                SourceItem::Reject(r) => (r.id.clone(), r.origin.clone()),
                SourceItem::File(f) => (f.meta.id.clone(), f.meta.origin.clone()),
            })
            .collect();
        let shown = file.display().to_string();
        let want: Vec<(String, String)> =
            [3, 4, 6].iter().map(|n| (format!("c.jsonl:{n}"), format!("{shown}:{n}"))).collect();
        assert_eq!(seen, want);
        std::fs::remove_dir_all(&dir).ok();
    }
}
