//! From shards to batches: rows streamed shard by shard, shuffled per epoch through a bounded
//! buffer (memory does not grow with the corpus), grouped by length, padded to the batch's
//! longest row, and built on a background thread so the model never waits on I/O.
//!
//! An epoch's batch order is a pure function of `(seed, epoch)`, so a resumed run skips the
//! batches it already took and continues exactly where the interrupted one stopped.

use std::sync::Arc;

use anyhow::{bail, Result};
use crossbeam_channel::{bounded, Receiver};

use crate::rng::Rng;
use crate::sequence::mask::MaskSpec;
use crate::shards::ShardSet;

/// One training or evaluation example.
#[derive(Debug, Clone, Default)]
pub struct Example {
    /// Position of the row in its split (keys dynamic masking).
    pub index: u64,
    pub input_ids: Vec<u32>,
    pub token_type_ids: Vec<u32>,
    /// Classification: class index.
    pub label: Option<usize>,
    /// Classification: the document of a windowed row (else the row's id).
    pub doc_id: String,
    /// Pretraining: NSP label, static masks, packing boundaries.
    pub nsp_label: Option<u32>,
    pub masked_positions: Vec<u32>,
    pub masked_ids: Vec<u32>,
    pub doc_boundaries: Vec<u32>,
}

/// A padded batch, row-major `[rows, seq]`, on the host.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub rows: usize,
    pub seq: usize,
    pub input_ids: Vec<u32>,
    pub token_type_ids: Vec<u32>,
    pub attention_mask: Vec<u32>,
    /// Real (unpadded) tokens.
    pub tokens: usize,
    pub labels: Vec<u32>,
    pub doc_ids: Vec<String>,
    /// MLM: flat positions `row · seq + i` and their target ids.
    pub mlm_positions: Vec<u32>,
    pub mlm_labels: Vec<u32>,
    pub nsp_labels: Vec<u32>,
    pub doc_boundaries: Vec<Vec<u32>>,
}

/// How rows become examples.
#[derive(Clone)]
pub enum RowKind {
    /// Label values → class index; rows without a label are counted and skipped.
    Classify,
    /// `mask`: dynamic masking (shards hold unmasked ids).
    Pretrain { mask: Option<Arc<MaskSpec>> },
}

/// Everything that decides an epoch's batches.
#[derive(Clone)]
pub struct LoaderSpec {
    pub shards: Arc<ShardSet>,
    pub split: String,
    pub kind: RowKind,
    pub batch_size: usize,
    pub shuffle: bool,
    pub shuffle_buffer: usize,
    pub group_by_length: bool,
    /// Pad to this length instead of the longest row.
    pub pad_to: Option<usize>,
    pub pad_id: u32,
    pub seed: u64,
}

/// Row-grouping window for length grouping, in batches (HF's "megabatch" idea).
const GROUP_BATCHES: usize = 50;

impl LoaderSpec {
    /// Examples of the split in shard order (no shuffling); unlabelled classification rows
    /// are skipped, `skipped` counts them.
    fn rows(&self, shard_order: &[usize], epoch: u64) -> Result<Box<dyn Iterator<Item = Result<Example>> + Send + '_>> {
        let stats = self.shards.manifest.splits.get(&self.split).ok_or_else(|| {
            anyhow::anyhow!(
                "no split `{}` in '{}'; it has: {}",
                self.split,
                self.shards.root().display(),
                self.shards.splits().collect::<Vec<_>>().join(", ")
            )
        })?;
        // Row offsets of each shard, so every row keeps its index in the split.
        let mut offsets = Vec::with_capacity(stats.shards.len());
        let mut total = 0u64;
        for s in &stats.shards {
            offsets.push(total);
            total += s.rows;
        }
        let root = self.shards.root().to_path_buf();
        let files: Vec<(std::path::PathBuf, u64)> =
            shard_order.iter().map(|&i| (root.join(&stats.shards[i].file), offsets[i])).collect();
        let kind = self.kind.clone();
        let seed = self.seed;
        Ok(Box::new(files.into_iter().flat_map(move |(path, offset)| {
            let rows = read_shard(&path, &kind, offset, seed, epoch);
            match rows {
                Ok(rows) => rows.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            }
        })))
    }

    /// The batches of `epoch`, in training order.
    pub fn epoch(&self, epoch: u64) -> Result<impl Iterator<Item = Result<Batch>> + Send + '_> {
        let n_shards = self.shards.manifest.splits.get(&self.split).map(|s| s.shards.len()).unwrap_or(0);
        let mut order: Vec<usize> = (0..n_shards).collect();
        let mut rng = Rng::for_key(self.seed, &[0x5348_5546, epoch]);
        if self.shuffle {
            shuffle(&mut order, &mut rng);
        }
        let rows = self.rows(&order, epoch)?;
        let rows: Box<dyn Iterator<Item = Result<Example>> + Send> = if self.shuffle {
            Box::new(ShuffleBuffer {
                inner: rows,
                buffer: Vec::new(),
                cap: self.shuffle_buffer,
                rng: Rng::for_key(self.seed, &[0x4255_4646, epoch]),
            })
        } else {
            rows
        };
        let window = if self.group_by_length { self.batch_size * GROUP_BATCHES } else { self.batch_size };
        let spec = self.clone();
        let mut group_rng = Rng::for_key(self.seed, &[0x4752_4f55, epoch]);
        Ok(Chunks { inner: rows, size: window }.flat_map(move |chunk| {
            let mut chunk = match chunk {
                Ok(c) => c,
                Err(e) => return vec![Err(e)],
            };
            if spec.group_by_length {
                chunk.sort_by_key(|e| std::cmp::Reverse(e.input_ids.len()));
            }
            let mut batches: Vec<Result<Batch>> =
                chunk.chunks(spec.batch_size).map(|rows| Ok(spec.collate(rows))).collect();
            if spec.group_by_length && spec.shuffle {
                shuffle(&mut batches, &mut group_rng);
            }
            batches
        }))
    }

    /// Pads a set of examples into one batch.
    pub fn collate(&self, rows: &[Example]) -> Batch {
        let longest = rows.iter().map(|e| e.input_ids.len()).max().unwrap_or(0);
        let seq = self.pad_to.unwrap_or(longest).max(longest);
        let mut b = Batch { rows: rows.len(), seq, ..Default::default() };
        b.input_ids.resize(rows.len() * seq, self.pad_id);
        b.token_type_ids.resize(rows.len() * seq, 0);
        b.attention_mask.resize(rows.len() * seq, 0);
        for (r, e) in rows.iter().enumerate() {
            let at = r * seq;
            let n = e.input_ids.len();
            b.input_ids[at..at + n].copy_from_slice(&e.input_ids);
            b.token_type_ids[at..at + n].copy_from_slice(&e.token_type_ids);
            b.attention_mask[at..at + n].iter_mut().for_each(|m| *m = 1);
            b.tokens += n;
            if let Some(l) = e.label {
                b.labels.push(l as u32);
            }
            b.doc_ids.push(e.doc_id.clone());
            for (&p, &id) in e.masked_positions.iter().zip(&e.masked_ids) {
                b.mlm_positions.push((at + p as usize) as u32);
                b.mlm_labels.push(id);
            }
            if let Some(l) = e.nsp_label {
                b.nsp_labels.push(l);
            }
            b.doc_boundaries.push(e.doc_boundaries.clone());
        }
        b
    }

    /// Number of batches an epoch yields (counts rows; no tensors are built).
    pub fn batches_per_epoch(&self) -> Result<u64> {
        let n_shards = self.shards.manifest.splits.get(&self.split).map(|s| s.shards.len()).unwrap_or(0);
        let order: Vec<usize> = (0..n_shards).collect();
        let mut rows = 0u64;
        for e in self.rows(&order, 0)? {
            e?;
            rows += 1;
        }
        if rows == 0 {
            bail!("split `{}` of '{}' has no usable rows", self.split, self.shards.root().display());
        }
        let window =
            if self.group_by_length { (self.batch_size * GROUP_BATCHES) as u64 } else { self.batch_size as u64 };
        let full = rows / window;
        let rest = rows % window;
        let per_window = window.div_ceil(self.batch_size as u64);
        Ok(full * per_window + rest.div_ceil(self.batch_size as u64))
    }

    /// Runs [`LoaderSpec::epoch`] on a background thread, skipping the first `skip` batches;
    /// the channel holds a few batches ahead.
    pub fn spawn(&self, epoch: u64, skip: u64) -> Receiver<Result<Batch>> {
        let (tx, rx) = bounded(4);
        let spec = self.clone();
        std::thread::Builder::new()
            .name("bertpipe-loader".into())
            .spawn(move || {
                let batches = match spec.epoch(epoch) {
                    Ok(b) => b,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                for b in batches.skip(skip as usize) {
                    if tx.send(b).is_err() {
                        return;
                    }
                }
            })
            .expect("spawn the loader thread");
        rx
    }
}

fn read_shard(path: &std::path::Path, kind: &RowKind, offset: u64, seed: u64, epoch: u64) -> Result<Vec<Example>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type, Int8Type};
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("could not open '{}': {e}", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(f)?.build()?;
    let mut out = Vec::new();
    let mut index = offset;
    for batch in reader {
        let batch = batch?;
        let col = |name: &str| {
            batch.column_by_name(name).ok_or_else(|| anyhow::anyhow!("'{}' has no `{name}` column", path.display()))
        };
        let ids = col("input_ids")?.as_list::<i32>().clone();
        let types = col("token_type_ids")?.as_list::<i32>().clone();
        let list = |name: &str| batch.column_by_name(name).map(|c| c.as_list::<i32>().clone());
        let ints = |l: &arrow_array::ListArray, i: usize| -> Vec<u32> {
            l.value(i).as_primitive::<Int32Type>().values().iter().map(|&x| x as u32).collect()
        };
        match kind {
            RowKind::Classify => {
                let id = col("id")?.as_string::<i32>().clone();
                let label = col("label")?.as_primitive::<Int64Type>().clone();
                let doc = batch.column_by_name("doc_id").map(|c| c.as_string::<i32>().clone());
                for i in 0..batch.num_rows() {
                    let row_index = index;
                    index += 1;
                    if label.is_null(i) {
                        continue;
                    }
                    let l = label.value(i);
                    if l < 0 {
                        bail!("'{}' row {}: label {l} is negative", path.display(), i);
                    }
                    out.push(Example {
                        index: row_index,
                        input_ids: ints(&ids, i),
                        token_type_ids: types
                            .value(i)
                            .as_primitive::<Int8Type>()
                            .values()
                            .iter()
                            .map(|&t| t as u32)
                            .collect(),
                        label: Some(l as usize),
                        doc_id: doc.as_ref().map(|d| d.value(i).to_string()).unwrap_or_else(|| id.value(i).to_string()),
                        ..Default::default()
                    });
                }
            }
            RowKind::Pretrain { mask } => {
                let nsp = batch.column_by_name("next_sentence_label").map(|c| c.as_primitive::<Int8Type>().clone());
                let (pos, mids, bounds) = (list("masked_lm_positions"), list("masked_lm_ids"), list("doc_boundaries"));
                for i in 0..batch.num_rows() {
                    let mut e = Example {
                        index,
                        input_ids: ints(&ids, i),
                        token_type_ids: types
                            .value(i)
                            .as_primitive::<Int8Type>()
                            .values()
                            .iter()
                            .map(|&t| t as u32)
                            .collect(),
                        nsp_label: nsp.as_ref().map(|c| c.value(i) as u32),
                        doc_boundaries: bounds.as_ref().map(|b| ints(b, i)).unwrap_or_default(),
                        ..Default::default()
                    };
                    match (mask, &pos, &mids) {
                        (Some(spec), _, _) => {
                            let m = spec.mask(&e.input_ids, seed, epoch, index);
                            e.input_ids = m.input_ids;
                            e.masked_positions = m.positions;
                            e.masked_ids = m.labels;
                        }
                        (None, Some(p), Some(m)) => {
                            e.masked_positions = ints(p, i);
                            e.masked_ids = ints(m, i);
                        }
                        _ => bail!(
                            "'{}' has no masked_lm_positions/masked_lm_ids and the pipeline's masking is not dynamic",
                            path.display()
                        ),
                    }
                    index += 1;
                    out.push(e);
                }
            }
        }
    }
    Ok(out)
}

fn shuffle<T>(xs: &mut [T], rng: &mut Rng) {
    for i in (1..xs.len()).rev() {
        let j = rng.below(i + 1);
        xs.swap(i, j);
    }
}

/// A bounded shuffle buffer: fill to `cap`, then emit a random element for each one read.
struct ShuffleBuffer<I> {
    inner: I,
    buffer: Vec<Example>,
    cap: usize,
    rng: Rng,
}

impl<I: Iterator<Item = Result<Example>>> Iterator for ShuffleBuffer<I> {
    type Item = Result<Example>;
    fn next(&mut self) -> Option<Result<Example>> {
        while self.buffer.len() < self.cap {
            match self.inner.next() {
                Some(Ok(e)) => self.buffer.push(e),
                Some(Err(e)) => return Some(Err(e)),
                None => break,
            }
        }
        if self.buffer.is_empty() {
            return None;
        }
        let j = self.rng.below(self.buffer.len());
        Some(Ok(self.buffer.swap_remove(j)))
    }
}

/// Groups an iterator of results into vectors of `size` (the last may be shorter).
struct Chunks<I> {
    inner: I,
    size: usize,
}

impl<I: Iterator<Item = Result<Example>>> Iterator for Chunks<I> {
    type Item = Result<Vec<Example>>;
    fn next(&mut self) -> Option<Result<Vec<Example>>> {
        let mut chunk = Vec::with_capacity(self.size);
        for e in self.inner.by_ref() {
            match e {
                Ok(e) => chunk.push(e),
                Err(e) => return Some(Err(e)),
            }
            if chunk.len() == self.size {
                break;
            }
        }
        (!chunk.is_empty()).then_some(Ok(chunk))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_buffer_is_a_bounded_permutation() {
        let items: Vec<Result<Example>> = (0..1000).map(|i| Ok(Example { index: i, ..Default::default() })).collect();
        let out: Vec<u64> = ShuffleBuffer { inner: items.into_iter(), buffer: Vec::new(), cap: 64, rng: Rng(3) }
            .map(|e| e.unwrap().index)
            .collect();
        let mut sorted = out.clone();
        sorted.sort();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(out, (0..1000).collect::<Vec<_>>());
        // Bounded: an item can come out at most `cap - 1` places before it went in.
        for (pos, &i) in out.iter().enumerate() {
            assert!(i as usize <= pos + 63, "item {i} at {pos}");
        }
    }
}
