//! Label names found in the corpus: a `jsonl`, `csv` or `parquet` source whose labels are
//! strings (`positive`, `neutral`, …) and that has no `label_map` gets ids in sorted name
//! order, as HF `datasets`' `ClassLabel` numbers them — instead of a `bad_label` reject per
//! record. Finding them takes a pass over the label field of the whole corpus (every split,
//! every file, whatever part a task of an array reads, so every task numbers them alike).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::{Source, SplitFile};
use crate::contract::manifest::MANIFEST;

/// A source's label settings ([`Source::label_settings`]).
struct LabelSettings<'a> {
    field: Option<&'a str>,
    map: Option<&'a BTreeMap<String, i64>>,
    found: Option<&'a BTreeMap<String, i64>>,
    what: &'static str,
}

/// More distinct names than this is not a label field (a title, a free-text column).
const MAX_NAMES: usize = 1000;

/// What the label field holds, as far as numbering goes.
#[derive(Default)]
struct Seen {
    /// Label strings that are not integers.
    names: BTreeSet<String>,
    /// The first integer label (a number, a boolean or an integer string), if any.
    number: Option<String>,
    /// The class names HF `datasets` saved with the first file read (`ClassLabel`), by id
    /// (`Some(None)`: it saved none), and the first file whose names differ from those.
    class_names: Option<Option<Vec<String>>>,
    class_names_differ: Option<String>,
}

impl Seen {
    fn add(&mut self, v: &Value) {
        match v {
            Value::Null => {}
            Value::String(s) if s.trim().is_empty() => {}
            Value::String(s) if s.trim().parse::<i64>().is_err() => {
                if self.names.len() <= MAX_NAMES {
                    self.names.insert(s.trim().to_string());
                }
            }
            other => {
                self.number.get_or_insert_with(|| other.as_str().map_or_else(|| other.to_string(), str::to_string));
            }
        }
    }
}

impl Source {
    /// Whether labels are read from a field without a `label_map`: the case in which string
    /// labels are numbered by [`Source::find_labels`].
    pub fn may_have_label_names(&self) -> bool {
        self.label_settings().is_some_and(|l| l.field.is_some() && l.map.is_none())
    }

    /// What a source that reads labels from a field says of them: the field (or column), its
    /// `label_map`, the names [`Source::find_labels`] found, and the word for a field.
    fn label_settings(&self) -> Option<LabelSettings<'_>> {
        let (field, map, found, what) = match self {
            Source::Jsonl(s) => (&s.label_field, &s.label_map, &s.found_labels, "field"),
            Source::Csv(s) => (&s.label_column, &s.label_map, &s.found_labels, "column"),
            Source::Parquet(s) => (&s.label_column, &s.label_map, &s.found_labels, "column"),
            _ => return None,
        };
        Some(LabelSettings { field: field.as_deref(), map: map.as_ref(), found: found.as_ref(), what })
    }

    /// Reads the label field of the whole corpus; when its labels are names, numbers them in
    /// sorted order for the reading that follows and returns what was found, for the run
    /// summary. Integer labels (or none) leave the source as it is. Names mixed with numbers,
    /// or more than a thousand names, are an error saying what to do. A `parquet` source
    /// reading the `label` column of a bertpipe output folder's shards (ids) takes the names its
    /// manifest gives them, without a pass.
    pub fn find_labels(&mut self) -> Result<Option<String>> {
        if !self.may_have_label_names() {
            return Ok(None);
        }
        // The shards of a bertpipe output folder hold ids; its manifest names them.
        if let Source::Parquet(p) = self {
            if let Some(names) = p.shard_label_names()? {
                let listed: Vec<String> = names.iter().map(|(n, i)| format!("{n}={i}")).collect();
                let found = format!("labels {} (names from '{}')", listed.join(", "), p.path.join(MANIFEST).display());
                p.found_labels = Some(names);
                return Ok(Some(found));
            }
        }
        let mut seen = Seen::default();
        // The files the reader reads, listed as it lists them.
        let files = self.files()?;
        let Some(settings) = self.label_settings() else { return Ok(None) };
        let (field, what) = (settings.field.unwrap_or_default().to_string(), settings.what);
        for f in &files {
            match self {
                Source::Jsonl(_) => jsonl_labels(f, &field, &mut seen),
                Source::Csv(c) => csv_labels(c, f, &field, &mut seen),
                Source::Parquet(_) => parquet_labels(f, &field, &mut seen),
                _ => Ok(()),
            }
            .with_context(|| format!("finding the label names in '{}'", f.file.display()))?;
        }
        if seen.names.is_empty() {
            if let Some(file) = seen.class_names_differ {
                bail!(
                    "label {what} `{field}`: '{file}' names its classes (HF `datasets` ClassLabel) otherwise than the first file read, so an id would mean two classes; write the files with one ClassLabel"
                );
            }
            // Ids whose names `datasets` saved with the files: they keep their ids and names.
            let Some(Some(names)) = seen.class_names else { return Ok(None) };
            let map: BTreeMap<String, i64> = names.iter().cloned().zip(0..).collect();
            if map.len() != names.len() {
                bail!("label {what} `{field}`: its HF `datasets` ClassLabel names a class twice");
            }
            let listed: Vec<String> = names.iter().zip(0..).map(|(n, i)| format!("{n}={i}")).collect();
            let found = format!("labels {} (names from the files' HF `datasets` ClassLabel)", listed.join(", "));
            if let Source::Parquet(s) = self {
                s.found_labels = Some(map);
            }
            return Ok(Some(found));
        }
        let shown = |names: &BTreeSet<String>| {
            let mut s: Vec<String> = names.iter().take(5).map(|n| format!("`{n}`")).collect();
            if names.len() > 5 {
                s.push("…".into());
            }
            s.join(", ")
        };
        if seen.names.len() > MAX_NAMES {
            bail!(
                "label {what} `{field}` holds more than {MAX_NAMES} different strings ({}): is it the label? Name the label field, or give a label_map",
                shown(&seen.names)
            );
        }
        if let Some(number) = seen.number {
            bail!(
                "label {what} `{field}` holds names ({}) and numbers ({number}): give a label_map saying which id each name is",
                shown(&seen.names)
            );
        }
        let map: BTreeMap<String, i64> = seen.names.into_iter().zip(0..).collect();
        let listed: Vec<String> = map.iter().map(|(n, i)| format!("{n}={i}")).collect();
        let found = format!("labels {} (names in sorted order; a label_map sets others)", listed.join(", "));
        match self {
            Source::Jsonl(s) => s.found_labels = Some(map),
            Source::Csv(s) => s.found_labels = Some(map),
            Source::Parquet(s) => s.found_labels = Some(map),
            _ => {}
        }
        Ok(Some(found))
    }

    /// Class names by id: the `label_map` (inverted; the first name in name order where two
    /// share an id), or the names [`Source::find_labels`] found.
    pub fn id2label(&self) -> BTreeMap<i64, String> {
        let map = self.label_settings().and_then(|l| l.map.or(l.found));
        let mut out = BTreeMap::new();
        for (name, id) in map.into_iter().flatten() {
            out.entry(*id).or_insert_with(|| name.clone());
        }
        out
    }
}

fn jsonl_labels(f: &SplitFile, field: &str, seen: &mut Seen) -> Result<()> {
    let mut r = BufReader::with_capacity(1 << 20, f.file.open()?);
    let add = |v: &Value, seen: &mut Seen| seen.add(v.get(field).unwrap_or(&Value::Null));
    if super::jsonl::first_byte(&mut r)? == Some(b'[') {
        let mut de = serde_json::Deserializer::from_reader(r);
        // A damaged array is an error when it is read for its records; here what was read counts.
        let _ = super::jsonl::each_element(&mut de, |v| {
            add(&v, seen);
            true
        });
        return Ok(());
    }
    let mut line = Vec::new();
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        // A line that is not JSON is rejected when it is read for its record.
        if let Ok(v) = serde_json::from_slice::<Value>(&line) {
            add(&v, seen);
        }
    }
}

fn csv_labels(c: &super::Csv, f: &SplitFile, field: &str, seen: &mut Seen) -> Result<()> {
    let mut r = ::csv::ReaderBuilder::new().delimiter(c.delimiter(&f.file)).from_reader(f.file.open()?);
    let headers = r.byte_headers()?.clone();
    let clean = |h: &[u8]| String::from_utf8_lossy(h).trim_start_matches('\u{feff}').trim().to_string();
    let Some(i) = headers.iter().position(|h| clean(h) == field) else { return Ok(()) };
    let mut record = ::csv::ByteRecord::new();
    loop {
        match r.read_byte_record(&mut record) {
            Ok(false) => return Ok(()),
            Ok(true) => seen.add(&Value::String(String::from_utf8_lossy(record.get(i).unwrap_or_default()).into())),
            Err(e) if e.is_io_error() => return Err(e.into()),
            // A malformed record is rejected when it is read for its document.
            Err(_) => {}
        }
    }
}

fn parquet_labels(f: &SplitFile, field: &str, seen: &mut Seen) -> Result<()> {
    // An object is spooled: Parquet is read footer first.
    f.file.with_local(|path| parquet_file_labels(path, field, seen))
}

fn parquet_file_labels(path: &std::path::Path, field: &str, seen: &mut Seen) -> Result<()> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ProjectionMask;
    let builder = ParquetRecordBatchReaderBuilder::try_new(crate::contract::reads::open(path)?)?;
    let Ok(index) = builder.schema().index_of(field) else { return Ok(()) };
    let names = super::parquet::class_label_names(builder.metadata().file_metadata(), field);
    match &seen.class_names {
        None => seen.class_names = Some(names),
        Some(first) if *first != names && seen.class_names_differ.is_none() => {
            seen.class_names_differ = Some(path.display().to_string())
        }
        _ => {}
    }
    let leaves: Vec<usize> = {
        // The leaf columns of the top-level field (a plain column is one leaf).
        let schema = builder.parquet_schema();
        (0..schema.num_columns()).filter(|&c| schema.get_column_root_idx(c) == index).collect()
    };
    let mask = ProjectionMask::leaves(builder.parquet_schema(), leaves);
    for batch in builder.with_projection(mask).build()? {
        let batch = batch?;
        let col = batch.column(0);
        for i in 0..batch.num_rows() {
            // A cell that is no label (NaN, 1.5) is rejected when it is read for its record.
            if let Ok(v) = super::parquet::label_cell(col.as_ref(), i) {
                seen.add(&v);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn names_numbers_and_blanks() {
        let mut s = Seen::default();
        for v in [json!("pos"), json!(" neg "), json!(""), json!(null), json!("pos")] {
            s.add(&v);
        }
        assert_eq!(s.names.into_iter().collect::<Vec<_>>(), ["neg", "pos"]);
        assert_eq!(s.number, None);
        let mut s = Seen::default();
        for v in [json!("1"), json!(0), json!(true)] {
            s.add(&v);
        }
        assert!(s.names.is_empty());
        assert_eq!(s.number.as_deref(), Some("1"));
    }
}
