//! Column builders for the shard schemas: documents (cleaned or classification), pretraining
//! rows, and rejects.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, Float32Builder, Int32Builder, Int64Builder, Int8Builder, ListBuilder, StringBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use crate::contract::document::{Document, NoiseComponents, PretrainSequence, Rejected};

/// Rows are handed to the shard writer in batches of this many.
pub const BATCH_ROWS: usize = 1024;

/// Column builders of one shard schema, filled row by row and handed over as record batches.
pub trait RowBuffer {
    fn schema(&self) -> SchemaRef;
    /// Rows buffered.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The buffered rows as a batch; the buffer is empty afterwards.
    fn finish(&mut self) -> RecordBatch;
}

/// Which columns a run writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RowLayout {
    /// The noise columns (a `noise_score` step ran).
    pub scored: bool,
    /// The cleaned `text` column.
    pub keep_text: bool,
    /// `input_ids`, `token_type_ids`, `length` (a `classify_sequences` step ran).
    pub sequences: bool,
    /// `doc_id`, `chunk`, `num_chunks` (window truncation: several rows per document).
    pub windows: bool,
}

/// Builds the shard columns for documents: `id`, `label`, `rating`, then per the layout
/// `input_ids`, `token_type_ids`, `length`, `doc_id`, `chunk`, `num_chunks`, the noise columns
/// and `text`. With sequences, each of a document's sequences is one row.
pub struct DocRows {
    schema: SchemaRef,
    layout: RowLayout,
    id: StringBuilder,
    label: Int64Builder,
    rating: Int8Builder,
    input_ids: ListBuilder<Int32Builder>,
    token_type_ids: ListBuilder<Int8Builder>,
    length: Int32Builder,
    doc_id: StringBuilder,
    chunk: Int32Builder,
    num_chunks: Int32Builder,
    noise: Vec<Float32Builder>,
    text: StringBuilder,
}

impl DocRows {
    pub fn new(layout: RowLayout) -> Self {
        let mut fields = vec![
            Field::new("id", DataType::Utf8, false),
            Field::new("label", DataType::Int64, true),
            Field::new("rating", DataType::Int8, true),
        ];
        if layout.sequences {
            fields.push(list_field("input_ids", DataType::Int32));
            fields.push(list_field("token_type_ids", DataType::Int8));
            fields.push(Field::new("length", DataType::Int32, false));
        }
        if layout.windows {
            fields.push(Field::new("doc_id", DataType::Utf8, false));
            fields.push(Field::new("chunk", DataType::Int32, false));
            fields.push(Field::new("num_chunks", DataType::Int32, false));
        }
        if layout.scored {
            fields.extend(NoiseComponents::COLUMNS.iter().map(|c| Field::new(*c, DataType::Float32, false)));
        }
        if layout.keep_text {
            fields.push(Field::new("text", DataType::Utf8, false));
        }
        DocRows {
            schema: Arc::new(Schema::new(fields)),
            layout,
            id: StringBuilder::new(),
            label: Int64Builder::new(),
            rating: Int8Builder::new(),
            input_ids: int32_list(),
            token_type_ids: int8_list(),
            length: Int32Builder::new(),
            doc_id: StringBuilder::new(),
            chunk: Int32Builder::new(),
            num_chunks: Int32Builder::new(),
            noise: (0..NoiseComponents::COLUMNS.len()).map(|_| Float32Builder::new()).collect(),
            text: StringBuilder::new(),
        }
    }

    /// Adds the document's rows (one per sequence, or one); returns how many.
    pub fn push(&mut self, doc: &Document) -> usize {
        if !self.layout.sequences {
            self.push_row(doc, None, 0, 1);
            return 1;
        }
        let n = doc.sequences.len();
        for (k, seq) in doc.sequences.iter().enumerate() {
            self.push_row(doc, Some(seq), k, n);
        }
        n
    }

    fn push_row(&mut self, doc: &Document, seq: Option<&Vec<u32>>, chunk: usize, num_chunks: usize) {
        if self.layout.windows {
            self.id.append_value(format!("{}#{chunk}", doc.id));
            self.doc_id.append_value(&doc.id);
            self.chunk.append_value(chunk as i32);
            self.num_chunks.append_value(num_chunks as i32);
        } else {
            self.id.append_value(&doc.id);
        }
        self.label.append_option(doc.label);
        self.rating.append_option(doc.rating);
        if let Some(seq) = seq {
            push_ids(&mut self.input_ids, seq);
            self.token_type_ids.values().append_value_n(0, seq.len());
            self.token_type_ids.append(true);
            self.length.append_value(seq.len() as i32);
        }
        if self.layout.scored {
            let values = doc.noise.unwrap_or_default().values();
            for (b, v) in self.noise.iter_mut().zip(values) {
                b.append_value(v);
            }
        }
        if self.layout.keep_text {
            self.text.append_value(&doc.text);
        }
    }
}

impl RowBuffer for DocRows {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn len(&self) -> usize {
        self.id.len()
    }

    fn finish(&mut self) -> RecordBatch {
        let mut cols: Vec<ArrayRef> =
            vec![Arc::new(self.id.finish()), Arc::new(self.label.finish()), Arc::new(self.rating.finish())];
        if self.layout.sequences {
            cols.push(Arc::new(self.input_ids.finish()));
            cols.push(Arc::new(self.token_type_ids.finish()));
            cols.push(Arc::new(self.length.finish()));
        }
        if self.layout.windows {
            cols.push(Arc::new(self.doc_id.finish()));
            cols.push(Arc::new(self.chunk.finish()));
            cols.push(Arc::new(self.num_chunks.finish()));
        }
        if self.layout.scored {
            cols.extend(self.noise.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef));
        }
        if self.layout.keep_text {
            cols.push(Arc::new(self.text.finish()));
        }
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}

/// Appends one list of ids. Ids are below 2^31 in every vocabulary; the shard contract stores
/// them as int32.
fn push_ids(list: &mut ListBuilder<Int32Builder>, ids: &[u32]) {
    list.values().extend(ids.iter().map(|&i| Some(i as i32)));
    list.append(true);
}

/// Builds pretraining rows: `doc_id`, `input_ids`, `token_type_ids`, `length`, then
/// `next_sentence_label` (NSP), `masked_lm_positions`/`masked_lm_ids` (static masking),
/// `doc_boundaries` (packing).
pub struct PretrainRows {
    schema: SchemaRef,
    nsp: bool,
    masked: bool,
    doc_id: StringBuilder,
    input_ids: ListBuilder<Int32Builder>,
    token_type_ids: ListBuilder<Int8Builder>,
    length: Int32Builder,
    nsp_label: Int8Builder,
    positions: ListBuilder<Int32Builder>,
    labels: ListBuilder<Int32Builder>,
    boundaries: ListBuilder<Int32Builder>,
}

fn list_field(name: &str, item: DataType) -> Field {
    Field::new(name, DataType::List(Arc::new(Field::new("item", item, true))), false)
}

fn int32_list() -> ListBuilder<Int32Builder> {
    ListBuilder::new(Int32Builder::new()).with_field(Arc::new(Field::new("item", DataType::Int32, true)))
}

fn int8_list() -> ListBuilder<Int8Builder> {
    ListBuilder::new(Int8Builder::new()).with_field(Arc::new(Field::new("item", DataType::Int8, true)))
}

impl PretrainRows {
    pub fn new(nsp: bool, masked: bool) -> Self {
        let mut fields = vec![
            Field::new("doc_id", DataType::Utf8, false),
            list_field("input_ids", DataType::Int32),
            list_field("token_type_ids", DataType::Int8),
            Field::new("length", DataType::Int32, false),
        ];
        if nsp {
            fields.push(Field::new("next_sentence_label", DataType::Int8, false));
        }
        if masked {
            fields.push(list_field("masked_lm_positions", DataType::Int32));
            fields.push(list_field("masked_lm_ids", DataType::Int32));
        }
        if !nsp {
            fields.push(list_field("doc_boundaries", DataType::Int32));
        }
        PretrainRows {
            schema: Arc::new(Schema::new(fields)),
            nsp,
            masked,
            doc_id: StringBuilder::new(),
            input_ids: int32_list(),
            token_type_ids: int8_list(),
            length: Int32Builder::new(),
            nsp_label: Int8Builder::new(),
            positions: int32_list(),
            labels: int32_list(),
            boundaries: int32_list(),
        }
    }

    pub fn push(&mut self, row: &PretrainSequence) {
        self.doc_id.append_value(&row.doc_id);
        push_ids(&mut self.input_ids, &row.input_ids);
        self.token_type_ids.values().extend(row.token_type_ids.iter().map(|&t| Some(t as i8)));
        self.token_type_ids.append(true);
        self.length.append_value(row.input_ids.len() as i32);
        if self.nsp {
            self.nsp_label.append_value(row.next_sentence_label.unwrap_or(0));
        }
        if self.masked {
            let (pos, ids) = row.masked.as_ref().expect("static masking sets positions");
            push_ids(&mut self.positions, pos);
            push_ids(&mut self.labels, ids);
        }
        if !self.nsp {
            push_ids(&mut self.boundaries, row.doc_boundaries.as_deref().unwrap_or(&[]));
        }
    }
}

impl RowBuffer for PretrainRows {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn len(&self) -> usize {
        self.doc_id.len()
    }

    fn finish(&mut self) -> RecordBatch {
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(self.doc_id.finish()),
            Arc::new(self.input_ids.finish()),
            Arc::new(self.token_type_ids.finish()),
            Arc::new(self.length.finish()),
        ];
        if self.nsp {
            cols.push(Arc::new(self.nsp_label.finish()));
        }
        if self.masked {
            cols.push(Arc::new(self.positions.finish()));
            cols.push(Arc::new(self.labels.finish()));
        }
        if !self.nsp {
            cols.push(Arc::new(self.boundaries.finish()));
        }
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}

/// Builds `_rejects` rows: `id`, `split`, `step`, `reason`, `origin`, `text` (as read).
pub struct RejectRows {
    schema: SchemaRef,
    cols: [StringBuilder; 6],
}

impl Default for RejectRows {
    fn default() -> Self {
        let fields: Vec<Field> = ["id", "split", "step", "reason", "origin", "text"]
            .iter()
            .map(|n| Field::new(*n, DataType::Utf8, false))
            .collect();
        RejectRows { schema: Arc::new(Schema::new(fields)), cols: Default::default() }
    }
}

impl RejectRows {
    pub fn push(&mut self, r: &Rejected) {
        for (b, v) in self.cols.iter_mut().zip([&r.id, &r.split, &r.step, &r.reason, &r.origin, &r.text]) {
            b.append_value(v);
        }
    }
}

impl RowBuffer for RejectRows {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn len(&self) -> usize {
        self.cols[0].len()
    }

    fn finish(&mut self) -> RecordBatch {
        let cols: Vec<ArrayRef> = self.cols.iter_mut().map(|b| Arc::new(b.finish()) as ArrayRef).collect();
        RecordBatch::try_new(self.schema.clone(), cols).expect("columns match the schema")
    }
}
