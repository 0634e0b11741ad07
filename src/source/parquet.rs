//! `parquet`: a text column (and optional label and id columns) from Parquet files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow_array::{cast::AsArray, Array, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::{Deserialize, Serialize};

use super::{
    file_size, parse_label, split_files, Emit, FileSplits, InputFile, InvalidUtf8, RecordMeta, Split, SplitFile,
};
use crate::contract::columns::string_at;
use crate::contract::manifest::{Manifest, MANIFEST, TASKS_DIR};
use crate::contract::partition::Partition;
use crate::contract::progress::Total;

/// The manifest of a bertpipe output folder (a local folder with a `manifest.json`, a single
/// run's or a merged task array's), when `path` is one. A task array's output that is not
/// merged yet (`tasks/` and no Parquet file of its own) is an error saying to merge it.
fn shard_manifest(path: &Path) -> Result<Option<Manifest>> {
    if path.as_os_str().is_empty() || crate::storage::is_remote(path) || !path.is_dir() {
        return Ok(None);
    }
    if path.join(MANIFEST).is_file() || (path.join(TASKS_DIR).is_dir() && super::input_files(path, EXTS).is_err()) {
        // Manifest::read says what to do with an unmerged task array.
        return Manifest::read(path).map(Some);
    }
    Ok(None)
}

/// The shards of a bertpipe output folder, every split's in manifest order (such a folder keeps
/// them in split folders, and a task array's under `tasks/`, not directly inside it), each with
/// its path in the folder (`train/part-00000.parquet`) as the name its ids start with. The
/// rejects (`_rejects/`) are not documents and are not read.
fn shard_files(path: &Path, m: &Manifest) -> Vec<(PathBuf, String)> {
    m.splits.values().flat_map(|s| &s.shards).map(|s| (path.join(&s.file), s.file.clone())).collect()
}

/// The label names of a bertpipe output folder's shards (name → id), which hold labels as ids:
/// the manifest's `id2label`, or `neg` / `pos` for an aclImdb source's shards (which record
/// none). `None` when it says nothing of names.
fn manifest_label_names(m: &Manifest) -> Option<BTreeMap<String, i64>> {
    let mut names: BTreeMap<String, i64> = BTreeMap::new();
    for (id, name) in &m.id2label {
        names.entry(name.clone()).or_insert(*id);
    }
    if names.is_empty() && m.config.pointer("/source/type").and_then(|t| t.as_str()) == Some("aclimdb") {
        names = BTreeMap::from([("neg".to_string(), 0), ("pos".to_string(), 1)]);
    }
    (!names.is_empty()).then_some(names)
}

/// The label column of bertpipe's document shards.
pub const SHARD_LABEL_COLUMN: &str = "label";

/// Read Parquet files batch by batch. Text and id columns are strings; the label column may be
/// an integer, boolean or string column.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ParquetSource {
    /// A `.parquet` file, a folder of them (read in name order), or a bertpipe output folder
    /// (its shards, in manifest order, each given `split`; not its `_rejects/`; `keep_text:
    /// true` shards have the `text` column, and their `label` ids keep the names the manifest
    /// gives them). With `splits`, the folder their entries are in (optional).
    #[serde(default)]
    pub path: PathBuf,
    /// Name of the text column.
    #[serde(default = "default_text_column")]
    pub text_column: String,
    /// Name of the label column.
    #[serde(default)]
    pub label_column: Option<String>,
    /// Name of an id column; default `<file>:<row>`.
    #[serde(default)]
    pub id_column: Option<String>,
    /// String labels to class ids.
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
    /// Files per split instead of `path` + `split`: `{train: train.parquet, test: [a.parquet,
    /// b.parquet]}` — a path, a glob or a list of them per split (relative to `path` when given).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub splits: Option<FileSplits>,
    /// Not used by Parquet (strings are UTF-8 by format); accepted for symmetry.
    #[serde(default)]
    pub on_invalid_utf8: InvalidUtf8,
}

/// The file types a `parquet` source reads.
pub const EXTS: &[&str] = &["parquet"];

fn default_text_column() -> String {
    "text".into()
}

pub(super) fn cell_json(col: &dyn Array, i: usize) -> serde_json::Value {
    use arrow_array::types::*;
    use serde_json::Value;
    if col.is_null(i) {
        return Value::Null;
    }
    match col.data_type() {
        DataType::Int8 => col.as_primitive::<Int8Type>().value(i).into(),
        DataType::Int16 => col.as_primitive::<Int16Type>().value(i).into(),
        DataType::Int32 => col.as_primitive::<Int32Type>().value(i).into(),
        DataType::Int64 => col.as_primitive::<Int64Type>().value(i).into(),
        DataType::UInt8 => col.as_primitive::<UInt8Type>().value(i).into(),
        DataType::UInt16 => col.as_primitive::<UInt16Type>().value(i).into(),
        DataType::UInt32 => col.as_primitive::<UInt32Type>().value(i).into(),
        DataType::UInt64 => col.as_primitive::<UInt64Type>().value(i).into(),
        DataType::Boolean => col.as_boolean().value(i).into(),
        _ => string_at(col, i).map_or(Value::Null, |s| Value::String(s.to_string())),
    }
}

/// A label cell as [`super::parse_label`] takes it, from the types tools write labels in: any
/// integer, a boolean, a string, a dictionary of those (a pandas `Categorical`: its value), and
/// a float column holding whole numbers (pandas writes an integer column with a missing value
/// as float64). A float that is not a whole number, or NaN, is no label: the error says which.
pub(super) fn label_cell(col: &dyn Array, i: usize) -> std::result::Result<serde_json::Value, String> {
    use arrow_array::types::*;
    if col.is_null(i) {
        return Ok(serde_json::Value::Null);
    }
    if let Some(dict) = col.as_any_dictionary_opt() {
        let key = dict.normalized_keys()[i];
        return label_cell(dict.values().as_ref(), key);
    }
    let float = match col.data_type() {
        DataType::Float16 => Some(col.as_primitive::<Float16Type>().value(i).to_f64()),
        DataType::Float32 => Some(col.as_primitive::<Float32Type>().value(i) as f64),
        DataType::Float64 => Some(col.as_primitive::<Float64Type>().value(i)),
        _ => None,
    };
    match float {
        Some(v) if v.is_nan() => Err("label is NaN (a float column's missing value)".into()),
        // Whole and within ±2^53, where a float64 holds every integer exactly.
        Some(v) if v.fract() == 0.0 && v.abs() <= 9_007_199_254_740_992.0 => Ok((v as i64).into()),
        Some(v) => Err(format!("label {v} is not a whole number")),
        None => Ok(cell_json(col, i)),
    }
}

/// The class names HF `datasets` keeps for `column` in a Parquet file's metadata (the
/// `huggingface` key: `info.features.COLUMN` of `_type: ClassLabel`), by id.
pub(super) fn class_label_names(metadata: &parquet::file::metadata::FileMetaData, column: &str) -> Option<Vec<String>> {
    let kv = metadata.key_value_metadata()?.iter().find(|kv| kv.key == "huggingface")?;
    let info: serde_json::Value = serde_json::from_str(kv.value.as_deref()?).ok()?;
    let feature = info.pointer("/info/features")?.get(column)?;
    if feature.get("_type").and_then(|t| t.as_str()) != Some("ClassLabel") {
        return None;
    }
    feature.get("names")?.as_array()?.iter().map(|n| n.as_str().map(str::to_string)).collect()
}

/// A local Parquet file, with the name and the path or URL its records carry (a bucket
/// object's, when it was downloaded).
struct ParquetInput {
    local: PathBuf,
    name: String,
    shown: String,
    split: String,
}

type RowGroupPlan = Vec<(usize, Option<Vec<usize>>, u64)>;

/// What `part` reads of `inputs`, file by file: `(file, row groups, the first of them's row
/// number in its file)`. A single run reads every row group (`None`); a task of an array a
/// contiguous range of the row groups of all files, which takes each file's footer first.
fn row_group_plan(inputs: &[ParquetInput], part: Partition) -> Result<RowGroupPlan> {
    if part.is_whole() {
        return Ok((0..inputs.len()).map(|k| (k, None, 0)).collect());
    }
    let mut groups = Vec::new(); // (file, row group, first row)
    for (k, input) in inputs.iter().enumerate() {
        let f =
            crate::contract::reads::open(&input.local).with_context(|| format!("could not open '{}'", input.shown))?;
        let builder = ParquetRecordBatchReaderBuilder::try_new(f)
            .with_context(|| format!("'{}' is not a readable Parquet file", input.shown))?;
        let mut first = 0u64;
        for (g, rg) in builder.metadata().row_groups().iter().enumerate() {
            groups.push((k, g, first));
            first += rg.num_rows() as u64;
        }
    }
    let mut plan: RowGroupPlan = Vec::new();
    for &(k, g, first) in &groups[part.range(groups.len())] {
        match plan.last_mut() {
            Some((file, Some(gs), _)) if *file == k => gs.push(g),
            _ => plan.push((k, Some(vec![g]), first)),
        }
    }
    Ok(plan)
}

impl ParquetSource {
    /// Every file read, with its split, in reading order: `path`'s files, `splits:`'s, or a
    /// bertpipe output folder's shards (from its manifest; every shard gets `split`). The reader,
    /// the label pass ([`super::labels`]) and field detection all list files through this.
    pub(super) fn listing(&self) -> Result<Vec<SplitFile>> {
        if self.splits.is_none() {
            if let Some(m) = shard_manifest(&self.path)? {
                let split = self.split.initial().to_string();
                return Ok(shard_files(&self.path, &m)
                    .into_iter()
                    .map(|(p, key)| SplitFile { key, file: InputFile::Local(p), split: split.clone() })
                    .collect());
            }
        }
        split_files(&self.path, self.splits.as_ref(), &self.split, EXTS, Partition::WHOLE)
    }

    /// When `path` is a bertpipe output folder and labels are read from its shards' `label`
    /// column without a `label_map`: the names its manifest gives the ids (name → id), so the
    /// shards' classes keep their ids and their names (`id2label` of the new manifest) instead
    /// of becoming bare numbers.
    pub(super) fn shard_label_names(&self) -> Result<Option<BTreeMap<String, i64>>> {
        if self.label_map.is_some() || self.label_column.as_deref() != Some(SHARD_LABEL_COLUMN) {
            return Ok(None);
        }
        Ok(shard_manifest(&self.path)?.as_ref().and_then(manifest_label_names))
    }

    pub fn read(&self, part: Partition, out: &mut dyn Emit) -> Result<()> {
        let files = self.listing()?;
        // Objects in a bucket are downloaded one at a time into a spool file (Parquet needs
        // random access: the footer first), read, and removed.
        // A task of an array takes whole files here, not row groups.
        if files.iter().any(|f| matches!(f.file, InputFile::Remote { .. })) {
            let range = part.range(files.len());
            let objects: Vec<SplitFile> = files.into_iter().skip(range.start).take(range.len()).collect();
            out.total(Total::Bytes(objects.iter().map(|o| o.file.size()).sum()));
            for SplitFile { file, split, key } in objects {
                let shown = file.display();
                file.with_local(|local| {
                    let input = [ParquetInput { local: local.to_path_buf(), name: key, shown, split }];
                    self.read_files(&input, row_group_plan(&input, Partition::WHOLE)?, out)
                })?;
            }
            return Ok(());
        }
        let inputs: Vec<ParquetInput> = files
            .into_iter()
            .map(|SplitFile { file, split, key }| {
                let InputFile::Local(local) = file else { unreachable!("no object in the listing") };
                ParquetInput { name: key, shown: local.display().to_string(), local, split }
            })
            .collect();
        let plan = row_group_plan(&inputs, part)?;
        out.total(Total::Bytes(plan.iter().map(|(k, ..)| file_size(&inputs[*k].local)).sum()));
        self.read_files(&inputs, plan, out)
    }

    /// Reads the row groups of `inputs` that `plan` ([`row_group_plan`]) lists.
    fn read_files(&self, inputs: &[ParquetInput], plan: RowGroupPlan, out: &mut dyn Emit) -> Result<()> {
        for (k, row_groups, first_row) in plan {
            let ParquetInput { local, name, shown, split } = &inputs[k];
            let file = Path::new(shown);
            let size = file_size(local);
            let f =
                crate::contract::reads::open(local).with_context(|| format!("could not open '{}'", file.display()))?;
            let mut builder = ParquetRecordBatchReaderBuilder::try_new(f)
                .with_context(|| format!("'{}' is not a readable Parquet file", file.display()))?;
            if let Some(groups) = row_groups {
                builder = builder.with_row_groups(groups);
            }
            let schema = builder.schema().clone();
            let total_rows = builder.metadata().file_metadata().num_rows().max(1) as u64;
            let available = || schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ");
            let index = |col: &str, what: &str| -> Result<usize> {
                schema.index_of(col).map_err(|_| {
                    anyhow::anyhow!("'{}' has no column `{col}` ({what}); columns: {}", file.display(), available())
                })
            };
            let text_idx = index(&self.text_column, "text_column")?;
            if !matches!(schema.field(text_idx).data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
            {
                anyhow::bail!(
                    "column `{}` of '{}' is {}, not a string column",
                    self.text_column,
                    file.display(),
                    schema.field(text_idx).data_type()
                );
            }
            let label_idx = self.label_column.as_deref().map(|c| index(c, "label_column")).transpose()?;
            let id_idx = self.id_column.as_deref().map(|c| index(c, "id_column")).transpose()?;
            // Row numbers (in ids) count from the file's first row, whichever groups are read.
            let mut row = first_row;
            for batch in builder.build()? {
                let batch: RecordBatch = batch.with_context(|| format!("could not decode '{}'", file.display()))?;
                let text = batch.column(text_idx);
                for i in 0..batch.num_rows() {
                    row += 1;
                    let mut meta = RecordMeta {
                        id: format!("{name}:{row}"),
                        split: split.clone(),
                        label: None,
                        rating: None,
                        origin: format!("{}:row {row}", file.display()),
                        input_bytes: size / total_rows,
                    };
                    if let Some(id) = id_idx.map(|c| cell_json(batch.column(c).as_ref(), i)) {
                        if !id.is_null() {
                            meta.id = id.as_str().map_or_else(|| id.to_string(), str::to_string);
                        }
                    }
                    let body = string_at(text.as_ref(), i).unwrap_or("").to_string();
                    if let Some(c) = label_idx {
                        let map = self.label_map.as_ref().or(self.found_labels.as_ref());
                        match label_cell(batch.column(c).as_ref(), i).and_then(|v| parse_label(&v, map)) {
                            Ok(l) => meta.label = l,
                            Err(e) => {
                                out.emit(meta.reject(format!("bad_label:{e}"), body))?;
                                continue;
                            }
                        }
                    }
                    out.emit(meta.into_item(body.into_bytes(), self.on_invalid_utf8))?;
                }
            }
        }
        Ok(())
    }
}
