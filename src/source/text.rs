//! `text`: plain text, one document per line or per paragraph.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::{split_files, Emit, FileSplits, InvalidUtf8, RecordMeta, Split, SplitFile};
use crate::contract::partition::Partition;
use crate::contract::progress::Total;

/// Read plain text files. Ids are `<file>:<first line>`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TextSource {
    /// A `.txt` file, or a folder of them (read in name order). With `splits`, the folder
    /// their entries are in (optional).
    #[serde(default)]
    pub path: PathBuf,
    /// `lines`: every non-blank line is a document. `paragraphs`: blocks separated by blank
    /// lines are documents.
    #[serde(default)]
    pub mode: TextMode,
    /// The split every document belongs to, or fractions (`{train: 0.9, validation: 0.1}`)
    /// assigned by a stable hash of the document id and the pipeline seed.
    #[serde(default)]
    pub split: Split,
    /// Files per split instead of `path` + `split`: `{train: train.txt, test: [a.txt,
    /// b.txt]}` — a path, a glob or a list of them per split (relative to `path` when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<FileSplits>,
    /// `replace` (default) or `reject` documents that are not valid UTF-8.
    #[serde(default)]
    pub on_invalid_utf8: InvalidUtf8,
}

/// The file types a `text` source reads.
pub const EXTS: &[&str] = &["txt", "text"];

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TextMode {
    #[default]
    Lines,
    Paragraphs,
}

impl TextSource {
    pub fn read(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        let files = split_files(&self.path, self.splits.as_ref(), &self.split, EXTS, part)?;
        out.total(Total::Bytes(files.iter().map(|f| f.file.size()).sum()));
        for SplitFile { file, split, key: name } in files {
            let mut reader = BufReader::with_capacity(1 << 20, file.open()?);
            let (mut line_no, mut start_line, mut pending_bytes) = (0u64, 0u64, 0u64);
            let mut doc: Vec<u8> = Vec::new();
            let mut line = Vec::new();
            let flush = |doc: &mut Vec<u8>, start: u64, bytes: &mut u64, out: &mut dyn Emit| -> Result<()> {
                while matches!(doc.last(), Some(b'\n' | b'\r')) {
                    doc.pop();
                }
                if doc.is_empty() {
                    return Ok(());
                }
                let meta = RecordMeta {
                    id: format!("{name}:{start}"),
                    split: split.clone(),
                    label: None,
                    rating: None,
                    origin: format!("{}:{start}", file.display()),
                    input_bytes: std::mem::take(bytes),
                };
                out.emit(meta.into_item(std::mem::take(doc), self.on_invalid_utf8))
            };
            loop {
                line.clear();
                let n = reader
                    .read_until(b'\n', &mut line)
                    .with_context(|| format!("could not read '{}'", file.display()))?;
                if n == 0 {
                    break;
                }
                line_no += 1;
                pending_bytes += n as u64;
                let blank = line.iter().all(|b| b.is_ascii_whitespace());
                match self.mode {
                    TextMode::Lines if !blank => {
                        doc.extend_from_slice(&line);
                        flush(&mut doc, line_no, &mut pending_bytes, out)?;
                    }
                    TextMode::Lines => {}
                    TextMode::Paragraphs if blank => flush(&mut doc, start_line, &mut pending_bytes, out)?,
                    TextMode::Paragraphs => {
                        if doc.is_empty() {
                            start_line = line_no;
                        }
                        doc.extend_from_slice(&line);
                    }
                }
            }
            flush(&mut doc, start_line, &mut pending_bytes, out)?;
        }
        Ok(())
    }
}
