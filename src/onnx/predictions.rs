//! `predictions.parquet`: one row per evaluated row, in the split's order, written shard by
//! shard as inference finishes them (one row group per shard), and read back to score.
//!
//! Columns: `id`, `label` (the row's label as the model's class id: the shards' labels are
//! matched to the model's classes by name, [`crate::shards::match_labels`]), `prediction`,
//! `predicted_label`, `confidence`, `probabilities` (list<float32>, the model's class order),
//! `logits` (list<float32>, the model's output as it came),
//! `finite` (false when a logit is NaN or infinite: prediction, confidence and probabilities are
//! then null), `tokens` (the row's length with [CLS]/[SEP]), `noise_score` when the shards carry
//! it, and `doc_id` / `chunk` when rows are windows of documents.
//!
//! The schema depends only on the shards' schema and the label count, never on the rows, and a
//! row group is written from one record batch: the same rows give the same bytes whether one
//! process wrote them or a task array's merge copied them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use arrow_array::builder::{BooleanBuilder, Float32Builder, Int32Builder, Int64Builder, ListBuilder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float32Type, Int32Type, Int64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};

use crate::metrics::{all_finite, argmax, softmax};

pub const PREDICTIONS: &str = "predictions.parquet";
pub const BASELINE_PREDICTIONS: &str = "baseline_predictions.parquet";

/// Which optional columns a split's predictions have (from the shards' schema).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    /// Rows are windows of documents (`doc_id`, `chunk`).
    pub windows: bool,
    /// The shards carry `noise_score`.
    pub noise: bool,
}

impl Layout {
    fn schema(&self) -> SchemaRef {
        let list = || DataType::List(Arc::new(Field::new_list_field(DataType::Float32, true)));
        let mut fields = vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("label", DataType::Int64, true),
            Field::new("prediction", DataType::Int64, true),
            Field::new("predicted_label", DataType::Utf8, true),
            Field::new("confidence", DataType::Float32, true),
            Field::new("probabilities", list(), true),
            Field::new("logits", list(), false),
            Field::new("finite", DataType::Boolean, false),
            Field::new("tokens", DataType::Int32, false),
        ];
        if self.noise {
            fields.push(Field::new("noise_score", DataType::Float32, true));
        }
        if self.windows {
            fields.push(Field::new("doc_id", DataType::Utf8, false));
            fields.push(Field::new("chunk", DataType::Int32, true));
        }
        Arc::new(Schema::new(fields))
    }
}

/// One row as inference leaves it.
#[derive(Debug, Clone)]
pub struct PredRow {
    /// The row's place in the split.
    pub index: u64,
    pub id: String,
    pub label: Option<i64>,
    pub logits: Vec<f32>,
    pub doc_id: Option<String>,
    pub chunk: Option<i32>,
    pub tokens: u32,
    pub noise: Option<f32>,
}

/// Writes a predictions file shard by shard into a temporary beside it, renamed into place by
/// [`PredictionsWriter::finish`]: a run that dies leaves no half file under the real name.
pub struct PredictionsWriter {
    path: PathBuf,
    tmp: PathBuf,
    writer: ArrowWriter<File>,
    schema: SchemaRef,
    layout: Layout,
    names: Vec<String>,
    rows: u64,
}

impl PredictionsWriter {
    pub fn create(path: &Path, names: &[String], layout: Layout) -> Result<PredictionsWriter> {
        let tmp = crate::contract::temp_path(path);
        let file = File::create(&tmp).with_context(|| format!("could not create '{}'", tmp.display()))?;
        let props = parquet::file::properties::WriterProperties::builder()
            .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
            .set_key_value_metadata(Some(vec![parquet::file::metadata::KeyValue::new(
                "id2label".to_string(),
                serde_json::to_string(names)?,
            )]))
            .build();
        let schema = layout.schema();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props))?;
        Ok(PredictionsWriter { path: path.to_path_buf(), tmp, writer, schema, layout, names: names.to_vec(), rows: 0 })
    }

    /// One shard's rows (in the split's order) as one row group.
    pub fn write_shard(&mut self, rows: &[PredRow]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let batch = self.batch(rows)?;
        self.write_group(&batch)
    }

    /// A row group read back from another predictions file of the same layout (a task's).
    pub fn write_group(&mut self, batch: &RecordBatch) -> Result<()> {
        let batch = RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec())
            .with_context(|| format!("a row group for '{}' does not have its columns", self.path.display()))?;
        self.writer.write(&batch)?;
        self.writer.flush()?;
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// Closes the file and renames it into place; the rows written.
    pub fn finish(self) -> Result<u64> {
        self.writer.close().with_context(|| format!("could not write '{}'", self.tmp.display()))?;
        crate::contract::kill_point();
        std::fs::rename(&self.tmp, &self.path).with_context(|| format!("could not write '{}'", self.path.display()))?;
        Ok(self.rows)
    }

    fn batch(&self, rows: &[PredRow]) -> Result<RecordBatch> {
        let mut id = StringBuilder::new();
        let mut label = Int64Builder::new();
        let mut pred = Int64Builder::new();
        let mut pred_name = StringBuilder::new();
        let mut conf = Float32Builder::new();
        let mut probs = ListBuilder::new(Float32Builder::new());
        let mut logits = ListBuilder::new(Float32Builder::new());
        let mut finite = BooleanBuilder::new();
        let mut tokens = Int32Builder::new();
        let mut noise = Float32Builder::new();
        let mut doc = StringBuilder::new();
        let mut chunk = Int32Builder::new();
        for r in rows {
            id.append_value(&r.id);
            label.append_option(r.label);
            if all_finite(&r.logits) {
                let p = softmax(&r.logits);
                let c = argmax(&p);
                pred.append_value(c as i64);
                pred_name.append_value(&self.names[c]);
                conf.append_value(p[c] as f32);
                for &x in &p {
                    probs.values().append_value(x as f32);
                }
                probs.append(true);
                finite.append_value(true);
            } else {
                pred.append_null();
                pred_name.append_null();
                conf.append_null();
                probs.append(false);
                finite.append_value(false);
            }
            logits.values().append_slice(&r.logits);
            logits.append(true);
            tokens.append_value(r.tokens as i32);
            noise.append_option(r.noise);
            doc.append_value(r.doc_id.as_deref().unwrap_or(&r.id));
            chunk.append_option(r.chunk);
        }
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(id.finish()),
            Arc::new(label.finish()),
            Arc::new(pred.finish()),
            Arc::new(pred_name.finish()),
            Arc::new(conf.finish()),
            Arc::new(probs.finish()),
            Arc::new(logits.finish()),
            Arc::new(finite.finish()),
            Arc::new(tokens.finish()),
        ];
        if self.layout.noise {
            cols.push(Arc::new(noise.finish()));
        }
        if self.layout.windows {
            cols.push(Arc::new(doc.finish()));
            cols.push(Arc::new(chunk.finish()));
        }
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
    }
}

/// The row groups of a predictions file, each as one record batch, in order.
pub fn row_groups(path: &Path) -> Result<impl Iterator<Item = Result<RecordBatch>>> {
    let shown = path.display().to_string();
    let path = path.to_path_buf();
    let open = move || -> Result<ParquetRecordBatchReaderBuilder<File>> {
        let f = File::open(&path).with_context(|| format!("could not open '{}'", path.display()))?;
        ParquetRecordBatchReaderBuilder::try_new(f)
            .with_context(|| format!("'{}' is not a Parquet file", path.display()))
    };
    let groups: Vec<usize> = open()?.metadata().row_groups().iter().map(|g| g.num_rows().max(0) as usize).collect();
    Ok(groups.into_iter().enumerate().filter(|(_, rows)| *rows > 0).map(move |(i, rows)| {
        let reader = open()?.with_row_groups(vec![i]).with_batch_size(rows).build()?;
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>()?;
        match batches.len() {
            1 => Ok(batches.into_iter().next().expect("one batch")),
            n => bail!("row group {i} of '{shown}' came back as {n} batches"),
        }
    }))
}

/// A row read back for scoring.
#[derive(Debug, Clone, Copy)]
pub struct RowView<'a> {
    pub id: &'a str,
    pub label: Option<i64>,
    pub logits: &'a [f32],
    pub tokens: usize,
    pub noise: Option<f32>,
    /// The document (the row's own id when rows are not windows).
    pub doc_id: &'a str,
    pub chunk: Option<i32>,
}

/// The columns of one batch of a predictions file, typed.
struct Columns {
    id: arrow_array::StringArray,
    label: arrow_array::PrimitiveArray<Int64Type>,
    logits: arrow_array::ListArray,
    tokens: arrow_array::PrimitiveArray<Int32Type>,
    noise: Option<arrow_array::PrimitiveArray<Float32Type>>,
    doc: Option<arrow_array::StringArray>,
    chunk: Option<arrow_array::PrimitiveArray<Int32Type>>,
}

impl Columns {
    fn of(b: &RecordBatch, path: &Path) -> Result<Columns> {
        let col = |name: &str| {
            b.column_by_name(name).cloned().with_context(|| format!("'{}' has no column `{name}`", path.display()))
        };
        Ok(Columns {
            id: col("id")?.as_string::<i32>().clone(),
            label: col("label")?.as_primitive::<Int64Type>().clone(),
            logits: col("logits")?.as_list::<i32>().clone(),
            tokens: col("tokens")?.as_primitive::<Int32Type>().clone(),
            noise: b.column_by_name("noise_score").map(|c| c.as_primitive::<Float32Type>().clone()),
            doc: b.column_by_name("doc_id").map(|c| c.as_string::<i32>().clone()),
            chunk: b.column_by_name("chunk").map(|c| c.as_primitive::<Int32Type>().clone()),
        })
    }

    fn row(&self, i: usize) -> RowView<'_> {
        let values = self.logits.values().as_primitive::<Float32Type>().values();
        let offsets = self.logits.value_offsets();
        let id = self.id.value(i);
        RowView {
            id,
            label: self.label.is_valid(i).then(|| self.label.value(i)),
            logits: &values[offsets[i] as usize..offsets[i + 1] as usize],
            tokens: self.tokens.value(i).max(0) as usize,
            noise: self.noise.as_ref().and_then(|n| n.is_valid(i).then(|| n.value(i))),
            doc_id: self.doc.as_ref().map_or(id, |d| d.value(i)),
            chunk: self.chunk.as_ref().and_then(|n| n.is_valid(i).then(|| n.value(i))),
        }
    }
}

/// Calls `f` with every row of a predictions file, in order, reading one row group at a time.
pub fn for_each_row(path: &Path, mut f: impl FnMut(RowView) -> Result<()>) -> Result<()> {
    for b in row_groups(path)? {
        let b = b?;
        let c = Columns::of(&b, path)?;
        for i in 0..b.num_rows() {
            f(c.row(i))?;
        }
    }
    Ok(())
}

/// Calls `f` with the rows of two predictions files side by side (a model's and its baseline's,
/// written shard by shard over the same rows), failing when they are not the same rows.
pub fn for_each_pair(a: &Path, b: &Path, mut f: impl FnMut(RowView, RowView) -> Result<()>) -> Result<()> {
    let not_same = |index: u64, why: String| {
        anyhow::anyhow!("'{}' and '{}' are not the same rows: {why} (row {index})", a.display(), b.display())
    };
    let mut right = row_groups(b)?;
    let mut index = 0u64;
    for left in row_groups(a)? {
        let left = left?;
        let other = right.next().ok_or_else(|| not_same(index, "the second has fewer rows".into()))??;
        if other.num_rows() != left.num_rows() {
            return Err(not_same(index, "their row groups differ".into()));
        }
        let (lc, rc) = (Columns::of(&left, a)?, Columns::of(&other, b)?);
        for i in 0..left.num_rows() {
            let (l, r) = (lc.row(i), rc.row(i));
            if l.id != r.id {
                return Err(not_same(index, format!("`{}` in one, `{}` in the other", l.id, r.id)));
            }
            f(l, r)?;
            index += 1;
        }
    }
    if right.next().is_some() {
        return Err(not_same(index, "the second has more rows".into()));
    }
    Ok(())
}

/// The columns a predictions file's scoring pass needs first (lengths and noise scores, for the
/// slices' edges), row by row: (label, finite, tokens, noise).
pub fn for_each_length(path: &Path, mut f: impl FnMut(Option<i64>, bool, usize, Option<f32>)) -> Result<()> {
    let file = File::open(path).with_context(|| format!("could not open '{}'", path.display()))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)?;
    let has_noise = builder.schema().column_with_name("noise_score").is_some();
    let mut cols = vec!["label", "finite", "tokens"];
    if has_noise {
        cols.push("noise_score");
    }
    let mask = ProjectionMask::columns(builder.parquet_schema(), cols);
    for b in builder.with_projection(mask).build()? {
        let b = b?;
        let label = b.column_by_name("label").context("label")?.as_primitive::<Int64Type>().clone();
        let finite = b.column_by_name("finite").context("finite")?.as_boolean().clone();
        let tokens = b.column_by_name("tokens").context("tokens")?.as_primitive::<Int32Type>().clone();
        let noise = b.column_by_name("noise_score").map(|c| c.as_primitive::<Float32Type>().clone());
        for i in 0..b.num_rows() {
            f(
                label.is_valid(i).then(|| label.value(i)),
                finite.value(i),
                tokens.value(i).max(0) as usize,
                noise.as_ref().and_then(|n| n.is_valid(i).then(|| n.value(i))),
            );
        }
    }
    Ok(())
}
