//! From shards to batches. Training draws each epoch as a permutation of the whole split (see
//! [`super::order`]: a row store with random access and a keyed permutation, so the order
//! does not depend on how the corpus was stored or sharded), groups rows of similar length
//! within windows of batches, pads each batch to its longest row, and builds batches on a
//! background thread so the model never waits on I/O. Evaluation reads the shards in order.
//!
//! An epoch's batch order is a pure function of `(seed, epoch)`, so a resumed run starts at
//! the batch it stopped at, without reading the ones before.

use std::sync::Arc;

use anyhow::{bail, Result};
use crossbeam_channel::{bounded, Receiver};

use super::order::{Permutation, RowStore};
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
    /// Classification: the row's `id` (empty for pretraining rows, which have none).
    pub id: String,
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
    /// Each row's position in its split, and its id (classification).
    pub indices: Vec<u64>,
    pub ids: Vec<String>,
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
    /// Labels must lie in `0..num_labels`; rows without a label are skipped. `remap`: the
    /// model's class of each of the shards' label ids, when a checkpoint's head has the shards'
    /// label names in another order ([`crate::shards::match_labels`]).
    Classify { num_labels: usize, remap: Option<Arc<Vec<usize>>> },
    /// `mask`: dynamic masking (shards hold unmasked ids).
    Pretrain { mask: Option<Arc<MaskSpec>> },
}

/// The order rows are drawn in.
#[derive(Clone)]
pub enum Order {
    /// Shard by shard, row by row: evaluation.
    InFileOrder,
    /// Training: each epoch a keyed permutation of the whole split, read from its row store.
    Permuted(Arc<RowStore>),
}

/// Everything that decides an epoch's batches.
#[derive(Clone)]
pub struct LoaderSpec {
    pub shards: Arc<ShardSet>,
    pub split: String,
    pub kind: RowKind,
    pub batch_size: usize,
    pub order: Order,
    pub group_by_length: bool,
    /// Pad to this length instead of the longest row.
    pub pad_to: Option<usize>,
    pub pad_id: u32,
    pub seed: u64,
    /// At most this many tokens per batch, when set: a batch ends early rather than exceed it
    /// (evaluation batches: their memory is bounded by tokens, so a 512-token split takes the
    /// memory a 128-token one does; training with `max_tokens_per_batch`: a step's cost is flat
    /// across lengths). Tokens are rows × the padded length, or with `packed` the rows' own.
    pub max_tokens: Option<usize>,
    /// Batches run padding-free: the budget counts real tokens.
    pub packed: bool,
    /// Each row's length by its place in the row store, for counting an epoch's batches under a
    /// token budget without reading the rows (see [`LoaderSpec::batches_in_epoch`]).
    pub lengths: Option<Arc<Vec<u32>>>,
}

/// Row-grouping window for length grouping, in batches (HF's "megabatch" idea).
pub const GROUP_BATCHES: usize = 50;

type Batches<'a> = Box<dyn Iterator<Item = Result<Batch>> + Send + 'a>;
type Steps<'a> = Box<dyn Iterator<Item = Result<Step>> + Send + 'a>;
pub(super) type Groups<'a> = Box<dyn Iterator<Item = Result<Vec<Example>>> + Send + 'a>;

/// How an optimiser step's global batch is shared: among `ranks` data-parallel ranks, each
/// summing `micro` micro-batches (gradient accumulation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    pub rank: usize,
    pub ranks: usize,
    pub micro: usize,
}

impl Share {
    /// One process, one micro-batch: the whole batch.
    pub const WHOLE: Share = Share { rank: 0, ranks: 1, micro: 1 };

    pub fn parts(&self) -> usize {
        (self.ranks * self.micro).max(1)
    }

    /// Part `j` of a global batch of `n` rows: rows `⌊j·n/parts⌋..⌊(j+1)·n/parts⌋`, so the
    /// parts are contiguous, cover the batch once, and differ by at most a row.
    pub fn part(&self, j: usize, n: usize) -> std::ops::Range<usize> {
        let parts = self.parts();
        j * n / parts..(j + 1) * n / parts
    }

    /// The rank that trains row `i` of a global batch of `n` rows.
    pub fn rank_of(&self, i: usize, n: usize) -> usize {
        let j = (0..self.parts()).find(|&j| self.part(j, n).contains(&i)).unwrap_or(0);
        j / self.micro.max(1)
    }

    /// This rank's micro-batches of a global batch of `n` rows: parts `rank·micro..(rank+1)·micro`.
    pub fn micro_batches(&self, n: usize) -> Vec<std::ops::Range<usize>> {
        (0..self.micro).map(|a| self.part(self.rank * self.micro + a, n)).collect()
    }
}

/// One optimiser step of one rank.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// This rank's micro-batches (none when the global batch has fewer rows than parts left
    /// for it).
    pub micro: Vec<Batch>,
    /// Of the whole global batch, over every rank: what the loss is averaged over.
    pub global: StepTotals,
}

/// Counts over a step's global batch. The loss of a step is its sum over the global batch
/// divided by these (not a mean of micro-batch means), so it is the same however the batch is
/// shared among ranks and micro-batches.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepTotals {
    pub rows: usize,
    /// Real (unpadded) tokens.
    pub tokens: usize,
    /// Token positions padded batches compute: each part's rows × its padded length, over the
    /// parts of every rank (a padding-free step computes `tokens`).
    pub slots: usize,
    /// MLM: masked tokens (the MLM loss's denominator).
    pub mlm_targets: usize,
    /// NSP: rows of the parts whose rows all have an NSP label (the NSP loss's denominator).
    pub nsp_rows: usize,
    /// Classification: rows per class (the denominator of a class-weighted loss).
    pub class_rows: Vec<u64>,
}

impl LoaderSpec {
    /// Examples of the split, shard by shard, in file order; every row keeps its index in the
    /// split (which keys dynamic masking).
    fn rows_in_file_order(&self, epoch: u64) -> Result<Box<dyn Iterator<Item = Result<Example>> + Send + '_>> {
        let sizes = self.shards.shard_rows(&self.split)?;
        let offsets: Vec<u64> = sizes.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
        Ok(Box::new((0..sizes.len()).flat_map(move |i| match self.shard_examples(i, offsets[i]) {
            Ok(rows) => rows.into_iter().map(|e| self.masked(e, epoch)).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        })))
    }

    /// One shard's rows as examples, before dynamic masking.
    pub fn shard_examples(&self, shard: usize, offset: u64) -> Result<Vec<Example>> {
        let widen = |xs: &[i32]| xs.iter().map(|&x| x as u32).collect::<Vec<u32>>();
        let types = |xs: &[i8]| xs.iter().map(|&x| x as u32).collect::<Vec<u32>>();
        let mut out = Vec::new();
        match &self.kind {
            RowKind::Classify { num_labels, remap } => {
                for (i, row) in self.shards.classify_shard(&self.split, shard)?.into_iter().enumerate() {
                    let Some(label) = row.label else { continue };
                    let class = match remap {
                        Some(ids) => usize::try_from(label).ok().and_then(|l| ids.get(l).copied()),
                        None => usize::try_from(label).ok(),
                    };
                    let Some(class) = class.filter(|c| c < num_labels) else {
                        bail!(
                            "'{}' row {i} (id {}): label {label} is outside 0..{}; the model has {num_labels} classes",
                            self.shard_file(shard).display(),
                            row.id,
                            remap.as_ref().map_or(*num_labels, |ids| ids.len())
                        );
                    };
                    out.push(Example {
                        index: offset + i as u64,
                        input_ids: widen(&row.input_ids),
                        token_type_ids: types(&row.token_type_ids),
                        label: Some(class),
                        doc_id: row.doc_id.unwrap_or_else(|| row.id.clone()),
                        id: row.id,
                        ..Default::default()
                    });
                }
            }
            RowKind::Pretrain { mask } => {
                for (i, row) in self.shards.pretrain_shard(&self.split, shard)?.into_iter().enumerate() {
                    let mut e = Example {
                        index: offset + i as u64,
                        input_ids: widen(&row.input_ids),
                        token_type_ids: types(&row.token_type_ids),
                        nsp_label: row.next_sentence_label.map(|l| l as u32),
                        doc_boundaries: row.doc_boundaries.as_deref().map(widen).unwrap_or_default(),
                        ..Default::default()
                    };
                    match (mask, &row.masked_lm_positions, &row.masked_lm_ids) {
                        (Some(_), _, _) => {}
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

    /// Dynamic masking, keyed by `(seed, epoch, row)`; other examples pass unchanged.
    pub(super) fn masked(&self, mut e: Example, epoch: u64) -> Result<Example> {
        if let RowKind::Pretrain { mask: Some(spec) } = &self.kind {
            let m = spec.mask(&e.input_ids, self.seed, epoch, e.index);
            (e.input_ids, e.masked_positions, e.masked_ids) = (m.input_ids, m.positions, m.labels);
        }
        Ok(e)
    }

    fn shard_file(&self, shard: usize) -> std::path::PathBuf {
        let file = &self.shards.manifest.splits[&self.split].shards[shard].file;
        self.shards.root().join(file)
    }

    /// What the row store of this split is keyed by, beside the shards' digests.
    pub fn store_kind(&self) -> String {
        match &self.kind {
            RowKind::Classify { num_labels, remap: None } => format!("classify:{num_labels}"),
            // The row store holds the remapped labels: another mapping is another store.
            RowKind::Classify { num_labels, remap: Some(ids) } => {
                format!("classify:{num_labels}:{}", ids.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","))
            }
            RowKind::Pretrain { mask: Some(_) } => "pretrain:dynamic".into(),
            RowKind::Pretrain { mask: None } => "pretrain:static".into(),
        }
    }

    /// This split's row store (see [`super::order`]): found in bertpipe's cache when these
    /// shards were trained on before, else written there now, in one pass over the split.
    pub fn row_store(&self, quiet: bool) -> Result<RowStore> {
        let infos = &self.shards.split_stats(&self.split)?.shards;
        let digests: Vec<&str> = infos.iter().map(|s| s.sha256.as_str()).collect();
        let key = super::order::store_key(&self.split, &digests, &self.store_kind());
        let base = crate::contract::cache_dir().join("rows");
        let total: u64 = infos.iter().map(|s| s.rows).sum();
        RowStore::open_or_build(&base, &key, (self.shards.root(), &self.split), |put| {
            let bar = crate::contract::progress::Counter::new(
                quiet,
                total,
                4,
                "rows [{elapsed_precise}] {wide_bar:.cyan/blue} {human_pos}/{human_len} rows copied for shuffled reads",
                "row store",
                "rows",
            );
            let mut offset = 0;
            for (i, info) in infos.iter().enumerate() {
                for e in self.shard_examples(i, offset)? {
                    put(&e)?;
                }
                offset += info.rows;
                bar.inc(info.rows);
                super::order::pause_point(i + 1);
            }
            bar.finish();
            Ok(())
        })
    }

    /// Rows per window: the rows sorted by length together (with `group_by_length`), else one
    /// batch. Only a window's rows are held in memory.
    pub fn window_rows(&self) -> usize {
        if self.group_by_length {
            self.batch_size * GROUP_BATCHES
        } else {
            self.batch_size
        }
    }

    /// The batches of `epoch`, in training order.
    pub fn epoch(&self, epoch: u64) -> Result<Batches<'_>> {
        self.epoch_from(epoch, 0)
    }

    /// The batches of `epoch` from batch `skip` on — the same batches `epoch(epoch)` yields
    /// after its first `skip`, without reading the rows of the windows before.
    pub fn epoch_from(&self, epoch: u64, skip: u64) -> Result<Batches<'_>> {
        Ok(Box::new(self.groups_from(epoch, skip)?.map(|g| g.map(|rows| self.collate(&rows)))))
    }

    /// Training's optimiser steps of `epoch` from step `skip` on: each of the epoch's batches
    /// (`batch_size` is the global batch) cut into `share`'s parts, of which this rank takes
    /// its own as micro-batches, with the totals of the whole global batch.
    pub fn steps_from(&self, epoch: u64, skip: u64, share: Share) -> Result<Steps<'_>> {
        Ok(Box::new(self.groups_from(epoch, skip)?.map(move |g| g.map(|rows| self.step(&rows, share)))))
    }

    /// The rows of each batch of `epoch` from batch `skip` on, in training order.
    pub(super) fn groups_from(&self, epoch: u64, skip: u64) -> Result<Groups<'_>> {
        match &self.order {
            Order::InFileOrder => {
                let rows = self.rows_in_file_order(epoch)?;
                let spec = self.clone();
                let groups = Chunks { inner: rows, size: self.window_rows() }.flat_map(move |chunk| match chunk {
                    Ok(chunk) => spec.window_groups(chunk, None).into_iter().map(Ok).collect::<Vec<_>>(),
                    Err(e) => vec![Err(e)],
                });
                Ok(Box::new(groups.skip(skip as usize)))
            }
            Order::Permuted(store) => {
                let perm = Permutation::new(store.rows(), self.seed, epoch);
                let window = self.window_rows() as u64;
                // The window holding batch `skip`, and the batches of it before that one.
                let (first, mut drop) = match self.window_batches(epoch) {
                    Some(counts) => {
                        let (mut w, mut before) = (0, 0);
                        while w < counts.len() && before + counts[w] <= skip {
                            before += counts[w];
                            w += 1;
                        }
                        (w as u64, (skip - before) as usize)
                    }
                    None => {
                        let per_window = window.div_ceil(self.batch_size as u64);
                        (skip / per_window, (skip % per_window) as usize)
                    }
                };
                let windows = store.rows().div_ceil(window);
                let (spec, store) = (self.clone(), store.clone());
                Ok(Box::new((first..windows).flat_map(move |w| {
                    let span = w * window..((w + 1) * window).min(perm.len());
                    let chunk: Result<Vec<Example>> =
                        span.map(|t| store.get(perm.at(t)).and_then(|e| spec.masked(e, epoch))).collect();
                    let mut rng = Rng::for_key(spec.seed, &[0x4752_4f55, epoch, w]);
                    let groups: Vec<Result<Vec<Example>>> = match chunk {
                        Ok(chunk) => spec.window_groups(chunk, Some(&mut rng)).into_iter().map(Ok).collect(),
                        Err(e) => vec![Err(e)],
                    };
                    let skipped = std::mem::take(&mut drop).min(groups.len());
                    groups.into_iter().skip(skipped)
                })))
            }
        }
    }

    /// One window's batches of rows: sorted longest first when grouping by length, cut into
    /// batches, and (training) the batches of the window shuffled.
    fn window_groups(&self, mut chunk: Vec<Example>, rng: Option<&mut Rng>) -> Vec<Vec<Example>> {
        if self.group_by_length {
            chunk.sort_by_key(|e| std::cmp::Reverse(e.input_ids.len()));
        }
        let ranges = self.ranges(chunk.iter().map(|e| e.input_ids.len()));
        let mut rest = chunk.into_iter();
        let mut groups: Vec<Vec<Example>> = ranges.iter().map(|r| rest.by_ref().take(r.len()).collect()).collect();
        if let (true, Some(rng)) = (self.group_by_length, rng) {
            shuffle(&mut groups, rng);
        }
        groups
    }

    /// A global batch's rows as one optimiser step of this rank: the rows are cut into
    /// `share.parts()` contiguous parts as evenly as they go (part `j` holds rows
    /// `⌊j·n/parts⌋..⌊(j+1)·n/parts⌋`, so a full batch gives every part `per_device` rows);
    /// rank `r` takes parts `r·micro..(r+1)·micro`, each padded as a batch of its own. Parts
    /// without rows (the last, short batch of an epoch) are left out.
    pub fn step(&self, rows: &[Example], share: Share) -> Step {
        let n = rows.len();
        let mut global = StepTotals { rows: n, ..Default::default() };
        for j in 0..share.parts() {
            let p = &rows[share.part(j, n)];
            if p.iter().all(|e| e.nsp_label.is_some()) {
                global.nsp_rows += p.len();
            }
            let longest = p.iter().map(|e| e.input_ids.len()).max().unwrap_or(0);
            global.slots += p.len() * self.pad_to.unwrap_or(longest).max(longest);
        }
        for e in rows {
            global.tokens += e.input_ids.len();
            global.mlm_targets += e.masked_positions.len();
            if let Some(l) = e.label {
                if global.class_rows.len() <= l {
                    global.class_rows.resize(l + 1, 0);
                }
                global.class_rows[l] += 1;
            }
        }
        let micro =
            share.micro_batches(n).into_iter().filter(|r| !r.is_empty()).map(|r| self.collate(&rows[r])).collect();
        Step { micro, global }
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
            b.indices.push(e.index);
            b.ids.push(e.id.clone());
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

    /// Number of batches an epoch of `rows` usable rows yields by row count alone.
    pub fn batches_per_epoch(&self, rows: u64) -> u64 {
        let window = self.window_rows() as u64;
        let per_window = window.div_ceil(self.batch_size as u64);
        (rows / window) * per_window + (rows % window).div_ceil(self.batch_size as u64)
    }

    /// Number of batches epoch `epoch` yields: by row count, or — under a token budget, where
    /// it depends on which rows share a window — by cutting each window of the epoch's
    /// permutation as [`LoaderSpec::groups_from`] does, from the rows' lengths alone.
    /// Training loaders only (they draw epochs from a row store); 0 for another.
    pub fn batches_in_epoch(&self, epoch: u64) -> u64 {
        let Order::Permuted(store) = &self.order else {
            return 0;
        };
        match self.window_batches(epoch) {
            Some(counts) => counts.iter().sum(),
            None => self.batches_per_epoch(store.rows()),
        }
    }

    /// Under a token budget, the batches each window of epoch `epoch` is cut into (they depend
    /// on its rows' lengths); `None` when every window has `⌈window / batch⌉`.
    fn window_batches(&self, epoch: u64) -> Option<Vec<u64>> {
        let (Order::Permuted(store), Some(_), Some(lengths)) = (&self.order, self.max_tokens, &self.lengths) else {
            return None;
        };
        let perm = Permutation::new(store.rows(), self.seed, epoch);
        let window = self.window_rows() as u64;
        let counts = (0..store.rows().div_ceil(window))
            .map(|w| {
                let mut lens: Vec<usize> = (w * window..((w + 1) * window).min(perm.len()))
                    .map(|t| lengths[perm.at(t) as usize] as usize)
                    .collect();
                if self.group_by_length {
                    lens.sort_by_key(|&l| std::cmp::Reverse(l));
                }
                self.ranges(lens.into_iter()).len() as u64
            })
            .collect();
        Some(counts)
    }

    /// Optimiser steps in `epochs` epochs (fractional: the last one's share of its batches,
    /// rounded up), from epoch 0.
    pub fn steps_in_epochs(&self, epochs: f64) -> u64 {
        let whole = epochs.floor() as u64;
        let mut steps: u64 = (0..whole).map(|e| self.batches_in_epoch(e)).sum();
        let part = epochs - whole as f64;
        if part > 0.0 {
            steps += (part * self.batches_in_epoch(whole) as f64).ceil() as u64;
        }
        steps
    }

    /// The epochs `steps` optimiser steps cover from epoch 0 (fractional), the inverse of
    /// [`LoaderSpec::steps_in_epochs`]. Without a token budget every epoch has as many batches;
    /// with one they are counted epoch by epoch (the 10,000th's count stands for the rest).
    pub fn epochs_in_steps(&self, steps: u64) -> f64 {
        let (mut epochs, mut left) = (0.0, steps);
        for e in 0u64.. {
            let n = self.batches_in_epoch(e).max(1);
            if left <= n || self.max_tokens.is_none() || e >= 10_000 {
                return epochs + left as f64 / n as f64;
            }
            (epochs, left) = (epochs + 1.0, left - n);
        }
        unreachable!("the loop returns by epoch 10,000")
    }

    /// How rows of these lengths, in order, are cut into this loader's batches.
    fn ranges(&self, lens: impl Iterator<Item = usize>) -> Vec<std::ops::Range<usize>> {
        let cost = if self.packed { Cost::Tokens } else { Cost::Padded(self.pad_to) };
        batch_ranges(lens, self.batch_size, self.max_tokens, cost)
    }

    /// Runs [`LoaderSpec::steps_from`] on a background thread; the channel holds a few steps
    /// ahead.
    pub fn spawn_steps(&self, epoch: u64, skip: u64, share: Share) -> Receiver<Result<Step>> {
        let (tx, rx) = bounded(4);
        let spec = self.clone();
        std::thread::Builder::new()
            .name("bertpipe-loader".into())
            .spawn(move || {
                let steps = match spec.steps_from(epoch, skip, share) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                for s in steps {
                    if tx.send(s).is_err() {
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

/// What a batch's tokens are, against a token budget.
#[derive(Debug, Clone, Copy)]
enum Cost {
    /// Rows × the longest row (or the length every row is padded to).
    Padded(Option<usize>),
    /// The rows' own tokens (padding-free).
    Tokens,
}

/// How rows of these lengths are cut into batches, in order: `batch_size` rows each, or fewer
/// where `max_tokens` (counted as `cost` says) would be exceeded; a row longer than the budget
/// is a batch of its own.
fn batch_ranges(
    lens: impl Iterator<Item = usize>,
    batch_size: usize,
    max_tokens: Option<usize>,
    cost: Cost,
) -> Vec<std::ops::Range<usize>> {
    let lens: Vec<usize> = lens.collect();
    let (batch_size, budget) = (batch_size.max(1), max_tokens.unwrap_or(usize::MAX));
    let pad_to = match cost {
        Cost::Padded(p) => p.unwrap_or(0),
        Cost::Tokens => 0,
    };
    let mut out = Vec::new();
    let mut start = 0;
    while start < lens.len() {
        let (mut end, mut longest, mut tokens) = (start, pad_to, 0usize);
        while end < lens.len() && end - start < batch_size {
            let l = longest.max(lens[end]);
            let t = tokens + lens[end];
            let spent = match cost {
                Cost::Padded(_) => l.saturating_mul(end - start + 1),
                Cost::Tokens => t,
            };
            if end > start && spent > budget {
                break;
            }
            (longest, tokens) = (l, t);
            end += 1;
        }
        out.push(start..end);
        start = end;
    }
    out
}

#[cfg(test)]
mod batch_tests {
    use super::{batch_ranges, Cost, Share};

    #[test]
    fn a_global_batch_is_shared_once_among_ranks_and_micro_batches() {
        // One process, one micro-batch: the whole batch, as before ranks existed.
        let one = |r: std::ops::Range<usize>| vec![r];
        assert_eq!(Share::WHOLE.micro_batches(16), one(0..16));
        // 2 ranks × 8: the halves; 2 ranks × 2 micro-batches × 4.
        let of = |rank, ranks, micro, n| Share { rank, ranks, micro }.micro_batches(n);
        assert_eq!((of(0, 2, 1, 16), of(1, 2, 1, 16)), (one(0..8), one(8..16)));
        assert_eq!((of(0, 2, 2, 16), of(1, 2, 2, 16)), (vec![0..4, 4..8], vec![8..12, 12..16]));
        // A short last batch: every row once, the parts within a row of each other, some empty.
        for n in 0..20 {
            for (ranks, micro) in [(1, 1), (2, 1), (3, 2), (4, 4)] {
                let mut seen = vec![0; n];
                for rank in 0..ranks {
                    for r in of(rank, ranks, micro, n) {
                        assert!(r.len() <= n.div_ceil(ranks * micro));
                        for i in r {
                            seen[i] += 1;
                            assert_eq!(Share { rank: 0, ranks, micro }.rank_of(i, n), rank);
                        }
                    }
                }
                assert!(seen.iter().all(|&c| c == 1), "n {n}, {ranks} ranks × {micro}: {seen:?}");
            }
        }
    }

    #[test]
    fn batches_are_bounded_by_rows_and_by_tokens() {
        let lens = [10, 10, 10, 10, 10];
        assert_eq!(batch_ranges(lens.into_iter(), 2, None, Cost::Padded(None)), [0..2, 2..4, 4..5]);
        // 512-token rows under 8192 tokens: 16 per batch; 128-token rows: the 64 rows asked.
        assert_eq!(
            batch_ranges(std::iter::repeat_n(512, 40), 64, Some(8192), Cost::Padded(None)),
            [0..16, 16..32, 32..40]
        );
        let one = batch_ranges(std::iter::repeat_n(128, 64), 64, Some(8192), Cost::Padded(None));
        assert_eq!((one.len(), one[0].clone()), (1, 0..64));
        // The padded length is the longest so far: a long row closes the batch before it.
        assert_eq!(batch_ranges([4, 4, 4, 20, 4].into_iter(), 8, Some(40), Cost::Padded(None)), [0..3, 3..5]);
        // A row over the budget alone; `pad_to` pads every row.
        assert_eq!(batch_ranges([100, 5].into_iter(), 8, Some(50), Cost::Padded(None)), [0..1, 1..2]);
        assert_eq!(batch_ranges([5, 5, 5].into_iter(), 8, Some(40), Cost::Padded(Some(20))), [0..2, 2..3]);
        // Padding-free: the rows' own tokens count; the long row costs what it holds.
        assert_eq!(batch_ranges([4, 4, 4, 20, 10].into_iter(), 8, Some(40), Cost::Tokens), [0..4, 4..5]);
        assert_eq!(batch_ranges([4, 4, 4, 20, 4].into_iter(), 8, Some(40), Cost::Tokens), vec![(0..5)]);
        assert_eq!(batch_ranges([30, 5, 5, 1].into_iter(), 8, Some(40), Cost::Tokens), [0..3, 3..4]);
        assert_eq!(batch_ranges([100, 5].into_iter(), 8, Some(50), Cost::Tokens), [0..1, 1..2]);
    }
}
