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
    /// Labels must lie in `0..num_labels`; rows without a label are skipped.
    Classify { num_labels: usize },
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
    /// Examples of the split, shard by shard in `shard_order`; every row keeps its index in
    /// the split (which keys dynamic masking).
    fn rows(&self, shard_order: &[usize], epoch: u64) -> Result<Box<dyn Iterator<Item = Result<Example>> + Send + '_>> {
        let sizes = self.shards.shard_rows(&self.split)?;
        let offsets: Vec<u64> = sizes.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
        let order = shard_order.to_vec();
        Ok(Box::new(order.into_iter().flat_map(move |i| match self.shard_examples(i, offsets[i], epoch) {
            Ok(rows) => rows.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        })))
    }

    /// One shard's rows as examples.
    fn shard_examples(&self, shard: usize, offset: u64, epoch: u64) -> Result<Vec<Example>> {
        let widen = |xs: &[i32]| xs.iter().map(|&x| x as u32).collect::<Vec<u32>>();
        let types = |xs: &[i8]| xs.iter().map(|&x| x as u32).collect::<Vec<u32>>();
        let mut out = Vec::new();
        match &self.kind {
            RowKind::Classify { num_labels } => {
                for (i, row) in self.shards.classify_shard(&self.split, shard)?.into_iter().enumerate() {
                    let Some(label) = row.label else { continue };
                    if label < 0 || label as usize >= *num_labels {
                        bail!(
                            "'{}' row {i} (id {}): label {label} is outside 0..{num_labels}; the model has {num_labels} classes",
                            self.shard_file(shard).display(),
                            row.id
                        );
                    }
                    out.push(Example {
                        index: offset + i as u64,
                        input_ids: widen(&row.input_ids),
                        token_type_ids: types(&row.token_type_ids),
                        label: Some(label as usize),
                        doc_id: row.doc_id.unwrap_or(row.id),
                        ..Default::default()
                    });
                }
            }
            RowKind::Pretrain { mask } => {
                for (i, row) in self.shards.pretrain_shard(&self.split, shard)?.into_iter().enumerate() {
                    let index = offset + i as u64;
                    let mut e = Example {
                        index,
                        input_ids: widen(&row.input_ids),
                        token_type_ids: types(&row.token_type_ids),
                        nsp_label: row.next_sentence_label.map(|l| l as u32),
                        doc_boundaries: row.doc_boundaries.as_deref().map(widen).unwrap_or_default(),
                        ..Default::default()
                    };
                    match (mask, &row.masked_lm_positions, &row.masked_lm_ids) {
                        (Some(spec), _, _) => {
                            let m = spec.mask(&e.input_ids, self.seed, epoch, index);
                            (e.input_ids, e.masked_positions, e.masked_ids) = (m.input_ids, m.positions, m.labels);
                        }
                        (None, Some(p), Some(ids)) => (e.masked_positions, e.masked_ids) = (widen(p), widen(ids)),
                        _ => bail!(
                            "'{}' has no masked_lm_positions/masked_lm_ids and its pipeline's masking is not dynamic",
                            self.shard_file(shard).display()
                        ),
                    }
                    out.push(e);
                }
            }
        }
        Ok(out)
    }

    fn shard_file(&self, shard: usize) -> std::path::PathBuf {
        let file = &self.shards.manifest.splits[&self.split].shards[shard].file;
        self.shards.root().join(file)
    }

    /// The batches of `epoch`, in training order.
    pub fn epoch(&self, epoch: u64) -> Result<impl Iterator<Item = Result<Batch>> + Send + '_> {
        let mut order: Vec<usize> = (0..self.shards.shard_rows(&self.split)?.len()).collect();
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

    /// Number of batches an epoch of `rows` usable rows yields.
    pub fn batches_per_epoch(&self, rows: u64) -> u64 {
        let window =
            if self.group_by_length { (self.batch_size * GROUP_BATCHES) as u64 } else { self.batch_size as u64 };
        let per_window = window.div_ceil(self.batch_size as u64);
        (rows / window) * per_window + (rows % window).div_ceil(self.batch_size as u64)
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
