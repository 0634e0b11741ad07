//! `csv`: delimited files with a header row; quoting and embedded newlines per RFC 4180.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::{parse_label, split_files, Emit, FileSplits, InvalidUtf8, RecordMeta, Split, SplitFile};
use crate::contract::partition::Partition;
use crate::contract::progress::Total;

/// Read CSV (or TSV) with a header row. Quoted fields may contain delimiters and newlines.
/// A record with the wrong number of fields goes to the rejects with its line number.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Csv {
    /// A `.csv`/`.tsv` file, or a folder of them (read in name order). With `splits`, the
    /// folder their entries are in (optional).
    #[serde(default)]
    pub path: PathBuf,
    /// Header of the text column.
    #[serde(default = "default_text_column")]
    pub text_column: String,
    /// Header of the label column.
    #[serde(default)]
    pub label_column: Option<String>,
    /// Header of an id column; default `<file>:<line>`.
    #[serde(default)]
    pub id_column: Option<String>,
    /// String labels to class ids, e.g. `{negative: 0, positive: 1}`.
    #[serde(default)]
    pub label_map: Option<BTreeMap<String, i64>>,
    /// Label names found in the corpus when there is no `label_map` ([`super::labels`]); not
    /// part of the configuration (its hash stays what the user wrote).
    #[serde(skip)]
    pub found_labels: Option<BTreeMap<String, i64>>,
    /// Field delimiter, one ASCII character. Default per file: tab for `.tsv`, else `,`.
    #[serde(default)]
    pub delimiter: Option<char>,
    /// The split every document belongs to, or fractions (`{train: 0.9, validation: 0.1}`)
    /// assigned by a stable hash of the document id and the pipeline seed.
    #[serde(default)]
    pub split: Split,
    /// Files per split instead of `path` + `split`: `{train: train.tsv, test: [a.tsv,
    /// b.tsv]}` — a path, a glob or a list of them per split (relative to `path` when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<FileSplits>,
    /// `replace` (default) or `reject` fields that are not valid UTF-8.
    #[serde(default)]
    pub on_invalid_utf8: InvalidUtf8,
}

/// The file types a `csv` source reads.
pub const EXTS: &[&str] = &["csv", "tsv"];

fn default_text_column() -> String {
    "text".into()
}

impl Csv {
    /// The delimiter of `file`: the configured one, else tab for `.tsv` and `,` otherwise.
    pub(super) fn delimiter(&self, file: &super::InputFile) -> u8 {
        match self.delimiter {
            Some(c) => c as u8,
            None if file.has_extension("tsv") => b'\t',
            None => b',',
        }
    }

    pub fn read(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        if let Some(d) = self.delimiter.filter(|d| !d.is_ascii()) {
            bail!("csv delimiter `{d}` must be one ASCII character");
        }
        let files = split_files(&self.path, self.splits.as_ref(), &self.split, EXTS, part)?;
        out.total(Total::Bytes(files.iter().map(|f| f.file.size()).sum()));
        for SplitFile { file, split, key: name } in files {
            let mut raw = BufReader::with_capacity(1 << 20, file.open()?);
            // Drop a UTF-8 BOM so the first header is not "\u{feff}text".
            let mut head = [0u8; 3];
            let got = read_up_to(&mut raw, &mut head)?;
            let prefix: Vec<u8> = if head[..got] == *b"\xEF\xBB\xBF" { Vec::new() } else { head[..got].to_vec() };
            let reader = std::io::Cursor::new(prefix).chain(raw);
            let mut csv = ::csv::ReaderBuilder::new()
                .delimiter(self.delimiter(&file))
                .has_headers(true)
                .from_reader(AsRead::new(reader));
            let headers = csv
                .byte_headers()
                .with_context(|| format!("could not read the header of '{}'", file.display()))?
                .clone();
            let end = csv.position().byte();
            csv.get_mut().take(end);
            let col = |want: &str| headers.iter().position(|h| String::from_utf8_lossy(h).trim() == want);
            let available =
                || headers.iter().map(|h| String::from_utf8_lossy(h).into_owned()).collect::<Vec<_>>().join(", ");
            let text_idx = col(&self.text_column).with_context(|| {
                format!(
                    "'{}' has no column `{}` (text_column); columns: {}",
                    file.display(),
                    self.text_column,
                    available()
                )
            })?;
            let find = |name: &Option<String>, what: &str| -> Result<Option<usize>> {
                match name {
                    None => Ok(None),
                    Some(n) => col(n).map(Some).with_context(|| {
                        format!("'{}' has no column `{n}` ({what}); columns: {}", file.display(), available())
                    }),
                }
            };
            let label_idx = find(&self.label_column, "label_column")?;
            let id_idx = find(&self.id_column, "id_column")?;
            let mut record = ::csv::ByteRecord::new();
            loop {
                let read = csv.read_byte_record(&mut record);
                let end = csv.position().byte();
                let (line, bytes) = csv.get_mut().take(end);
                let mut meta = RecordMeta {
                    id: format!("{name}:{line}"),
                    split: split.clone(),
                    label: None,
                    rating: None,
                    origin: format!("{}:{line}", file.display()),
                    input_bytes: bytes,
                };
                match read {
                    Ok(false) => break,
                    Ok(true) => {}
                    Err(e) if e.is_io_error() => {
                        return Err(e).with_context(|| format!("could not read '{}'", file.display()))
                    }
                    Err(e) => {
                        let raw = csv.get_ref().last_record();
                        out.emit(meta.reject(format!("bad_csv:{e}"), raw))?;
                        continue;
                    }
                }
                // A reject keeps the record as it was in the file (quotes, delimiters, the
                // lines of a multi-line field), not its fields glued together.
                let whole = || csv.get_ref().last_record();
                if let Some(id) = id_idx.and_then(|i| record.get(i)) {
                    meta.id = String::from_utf8_lossy(id).into_owned();
                }
                if let Some(i) = label_idx {
                    let cell = String::from_utf8_lossy(record.get(i).unwrap_or_default()).into_owned();
                    match parse_label(
                        &serde_json::Value::String(cell),
                        self.label_map.as_ref().or(self.found_labels.as_ref()),
                    ) {
                        Ok(l) => meta.label = l,
                        Err(e) => {
                            let text = whole();
                            out.emit(meta.reject(format!("bad_label:{e}"), text))?;
                            continue;
                        }
                    }
                }
                let text = record.get(text_idx).unwrap_or_default().to_vec();
                out.emit(meta.into_item(text, self.on_invalid_utf8))?;
            }
        }
        Ok(())
    }
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        let n = r.read(&mut buf[got..])?;
        if n == 0 {
            break;
        }
        got += n;
    }
    Ok(got)
}

/// The reader under the CSV parser: it keeps the bytes the parser has taken since the last
/// record ended (the parser reads ahead a buffer at a time), so each record's first line and
/// its bytes as they are in the file can be told once the parser says where it ended. The
/// parser's own line count cannot: it is one ahead after an LF-ended record (it has taken the
/// `\n`) but not after a CRLF one (the `\n` is taken with the next record), and it counts the
/// empty lines it skips into the record after them.
struct AsRead<R> {
    inner: R,
    /// Bytes from file offset `start` on, as read.
    window: Vec<u8>,
    start: u64,
    /// Newlines before `start`.
    lines: u64,
    /// The last record taken, without the empty lines before it and its line terminator.
    last: std::ops::Range<usize>,
    taken: Vec<u8>,
}

impl<R: Read> AsRead<R> {
    fn new(inner: R) -> AsRead<R> {
        AsRead { inner, window: Vec::new(), start: 0, lines: 0, last: 0..0, taken: Vec::new() }
    }

    /// Takes the bytes up to file offset `end` (where the parser says a record ended) as one
    /// record: its first line (1-based) and its size in bytes.
    fn take(&mut self, end: u64) -> (u64, u64) {
        let n = ((end.saturating_sub(self.start)) as usize).min(self.window.len());
        self.taken.clear();
        self.taken.extend(self.window.drain(..n));
        self.start += n as u64;
        let first = self.taken.iter().position(|&b| b != b'\n' && b != b'\r').unwrap_or(self.taken.len());
        let skipped = memchr::memchr_iter(b'\n', &self.taken[..first]).count() as u64;
        let line = self.lines + skipped + 1;
        self.lines += memchr::memchr_iter(b'\n', &self.taken).count() as u64;
        let mut last = self.taken.len();
        while last > first && matches!(self.taken[last - 1], b'\n' | b'\r') {
            last -= 1;
        }
        self.last = first..last;
        (line, n as u64)
    }

    /// The last record taken, as it was in the file (lossy UTF-8).
    fn last_record(&self) -> String {
        String::from_utf8_lossy(&self.taken[self.last.clone()]).into_owned()
    }
}

impl<R: Read> Read for AsRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.window.extend_from_slice(&buf[..n]);
        Ok(n)
    }
}
