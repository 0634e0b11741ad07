//! `jsonl`: one JSON object per line.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{input_files_of, parse_label, Emit, InvalidUtf8, RecordMeta, Split};
use crate::contract::partition::Partition;
use crate::contract::progress::Total;

/// Read JSON Lines: one object per line. A line that is not valid JSON, or lacks the text
/// field, goes to the rejects with its line number. Blank lines are skipped.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Jsonl {
    /// A `.jsonl` file, or a folder of them (read in name order).
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
    /// The split every document belongs to, or fractions (`{train: 0.9, validation: 0.1}`)
    /// assigned by a stable hash of the document id and the pipeline seed.
    #[serde(default)]
    pub split: Split,
    /// `replace` (default) or `reject` lines that are not valid UTF-8.
    #[serde(default)]
    pub on_invalid_utf8: InvalidUtf8,
}

fn default_text_field() -> String {
    "text".into()
}

impl Jsonl {
    pub fn read(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        let files = input_files_of(&self.path, &["jsonl", "json", "ndjson"], part)?;
        out.total(Total::Bytes(files.iter().map(|f| f.size()).sum()));
        for file in files {
            let name = file.name();
            let mut reader = BufReader::with_capacity(1 << 20, file.open()?);
            let mut buf = Vec::new();
            let mut line_no = 0u64;
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
                    split: self.split.initial().to_string(),
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
            match parse_label(obj.get(field).unwrap_or(&Value::Null), self.label_map.as_ref()) {
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
