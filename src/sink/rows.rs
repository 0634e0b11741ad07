//! Column builders for the shard schemas: cleaned documents and rejects.

use std::sync::Arc;

use arrow_array::builder::{Float32Builder, Int64Builder, Int8Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::clean::noise::NoiseComponents;
use crate::document::{Document, Rejected};

/// Rows are handed to the shard writer in batches of this many.
pub const BATCH_ROWS: usize = 1024;

/// Builds the classification-shard columns for cleaned documents:
/// `id`, `label`, `rating`, the noise columns (when scored) and `text` (when kept).
pub struct DocRows {
    schema: SchemaRef,
    scored: bool,
    keep_text: bool,
    id: StringBuilder,
    label: Int64Builder,
    rating: Int8Builder,
    noise: Vec<Float32Builder>,
    text: StringBuilder,
    len: usize,
}

impl DocRows {
    pub fn new(scored: bool, keep_text: bool) -> Self {
        let mut fields = vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("label", DataType::Int64, true),
            Field::new("rating", DataType::Int8, true),
        ];
        if scored {
            fields.extend(
                NoiseComponents::COLUMNS
                    .iter()
                    .map(|c| Field::new(*c, DataType::Float32, false)),
            );
        }
        if keep_text {
            fields.push(Field::new("text", DataType::Utf8, false));
        }
        DocRows {
            schema: Arc::new(Schema::new(fields)),
            scored,
            keep_text,
            id: StringBuilder::new(),
            label: Int64Builder::new(),
            rating: Int8Builder::new(),
            noise: (0..NoiseComponents::COLUMNS.len())
                .map(|_| Float32Builder::new())
                .collect(),
            text: StringBuilder::new(),
            len: 0,
        }
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, doc: &Document) {
        self.id.append_value(&doc.id);
        self.label.append_option(doc.label);
        self.rating.append_option(doc.rating);
        if self.scored {
            let values = doc.noise.unwrap_or_default().values();
            for (b, v) in self.noise.iter_mut().zip(values) {
                b.append_value(v);
            }
        }
        if self.keep_text {
            self.text.append_value(&doc.text);
        }
        self.len += 1;
    }

    pub fn finish(&mut self) -> RecordBatch {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.id.finish()),
            Arc::new(self.label.finish()),
            Arc::new(self.rating.finish()),
        ];
        if self.scored {
            cols.extend(
                self.noise
                    .iter_mut()
                    .map(|b| Arc::new(b.finish()) as ArrayRef),
            );
        }
        if self.keep_text {
            cols.push(Arc::new(self.text.finish()));
        }
        self.len = 0;
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}

/// Builds `_rejects` rows: `id`, `split`, `step`, `reason`, `origin`, `text` (as read).
pub struct RejectRows {
    schema: SchemaRef,
    cols: [StringBuilder; 6],
    len: usize,
}

impl Default for RejectRows {
    fn default() -> Self {
        let fields: Vec<Field> = ["id", "split", "step", "reason", "origin", "text"]
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, false))
            .collect();
        RejectRows {
            schema: Arc::new(Schema::new(fields)),
            cols: Default::default(),
            len: 0,
        }
    }
}

impl RejectRows {
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, r: &Rejected) {
        for (b, v) in self
            .cols
            .iter_mut()
            .zip([&r.id, &r.split, &r.step, &r.reason, &r.origin, &r.text])
        {
            b.append_value(v);
        }
        self.len += 1;
    }

    pub fn finish(&mut self) -> RecordBatch {
        let cols: Vec<ArrayRef> = self
            .cols
            .iter_mut()
            .map(|b| Arc::new(b.finish()) as ArrayRef)
            .collect();
        self.len = 0;
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}
