//! The rows `bertpipe train` draws, for a trainer of another program: the Python wheel's
//! `bertpipe.ShardDataset` reads shards through this, so PyTorch gets the trainer's own order,
//! masks and rows — not a second implementation of them.
//!
//! A split is opened as the trainer opens it (the manifest verified, every shard's checksum,
//! the row store of [`super::order`] found or built), and read by position: position `t` of
//! epoch `e` under `seed` is the row [`Permutation`] puts there, which is the row `bertpipe
//! train` draws at that position with `group_by_length: false` (batch `k` of `B` rows: positions
//! `k·B..(k+1)·B`). Pretraining rows of dynamically masked shards are masked by the trainer's
//! [`MaskSpec::mask`], keyed by `(seed, epoch, row)`: the same masks for the same row.

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::data::{Example, LoaderSpec, Order, RowKind, Share, GROUP_BATCHES};
use super::order::{Permutation, RowStore};
use crate::model::config::Family;
use crate::sequence::mask::MaskSpec;
use crate::sequence::pretrain::Masking;
use crate::shards::ShardSet;

/// How pretraining rows of dynamically masked shards are masked.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MaskChoice {
    /// The pipeline's `masked_lm_prob`, else this family's rate (BERT and RoBERTa 15%,
    /// ModernBERT 30%) — what `bertpipe train` does for a model of that family.
    Family(Family),
    /// The pipeline's `masked_lm_prob`, else this rate.
    Rate(f64),
    /// Not masked: the rows' ids as the shards hold them, without labels.
    Off,
}

/// Pretraining rows without dynamic masking: what a kind reads when the rows stay unmasked.
fn unmasked(kind: &RowKind) -> RowKind {
    match kind {
        RowKind::Pretrain { .. } => RowKind::Pretrain { mask: None },
        other => other.clone(),
    }
}

/// One split of a shard folder as `bertpipe train` reads it.
pub struct TrainRows {
    spec: LoaderSpec,
    store: Arc<RowStore>,
    /// `classify` or `pretrain`: the manifest's task.
    pub task: String,
    /// Classification: the class names, in label order.
    pub label_names: Vec<String>,
    /// Pretraining: the masking applied to each row (dynamic masking), if any; `None` for
    /// `MaskChoice::Off`, whose rows are read as the shards hold them.
    pub mask: Option<Arc<MaskSpec>>,
    /// Pretraining shards masked by the pipeline (static): rows carry their masks as they were
    /// written, whatever the [`MaskChoice`].
    pub static_masks: bool,
    pub pad_id: u32,
    pub seed: u64,
    /// What the rows are: the split, its shards' SHA-256s and how rows become examples (the
    /// row store's key) — equal for the same rows, whatever folder holds them.
    pub key: String,
}

impl TrainRows {
    /// Opens `split` of the shard folder `data` (a path or a bucket URL), every shard's checksum
    /// verified (`verify`: a copy of a reader that verified them already may skip it; the
    /// shards' sizes are checked always), with training's masks under `seed`; the row store is
    /// built once (a pass over the split) and found in the cache after. `quiet` silences the
    /// progress of that pass.
    pub fn open(data: &Path, split: &str, seed: u64, mask: MaskChoice, verify: bool, quiet: bool) -> Result<TrainRows> {
        let shards = Arc::new(ShardSet::open_with(data, quiet)?);
        if verify {
            shards.verify()?;
        }
        let m = &shards.manifest;
        if !m.splits.contains_key(split) {
            bail!(
                "no split `{split}` in '{}'; it has: {}",
                data.display(),
                m.splits.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let tokenizer = shards.tokenizer()?.clone();
        let steps = super::setup::pipeline_of(m).map(|p| p.steps).unwrap_or_default();
        let (kind, label_names, static_masks) = match m.task.as_str() {
            "classify" => {
                let labels: Vec<i64> = shards.labels(split)?.into_iter().flatten().collect();
                if labels.is_empty() {
                    bail!("split `{split}` of '{}' has no labelled rows", data.display());
                }
                let max_label = labels.iter().copied().max().unwrap_or(0).max(0) as usize;
                let names = super::setup::label_names(m, max_label);
                (RowKind::Classify { num_labels: names.len(), remap: None }, names, false)
            }
            "pretrain" => {
                use crate::config::PipelineStep;
                let step = steps
                    .iter()
                    .find_map(PipelineStep::as_pretrain)
                    .context("the shards' pipeline has no pretrain_sequences step")?;
                let dynamic = step.masking == Masking::Dynamic;
                if let (Some(theirs), MaskChoice::Rate(r)) = (step.masked_lm_prob, mask) {
                    if dynamic && theirs != r {
                        bail!(
                            "'{}' is masked at its pipeline's masked_lm_prob {theirs}, as `bertpipe train` masks it; a rate of {r} would not be the trainer's masks: leave the rate out (mask=True)",
                            data.display()
                        );
                    }
                }
                if let (false, MaskChoice::Rate(_)) = (dynamic, mask) {
                    bail!(
                        "'{}' was masked by its pipeline (masking: static): its rows carry their masks, so a masking rate cannot be chosen here; leave mask unset",
                        data.display()
                    );
                }
                let spec = super::setup::dynamic_mask(&steps, |_| match mask {
                    MaskChoice::Family(f) => Ok(f.masked_lm_prob()),
                    // Rows read unmasked: the spec only says the shards are masked at training
                    // time (and keys the same row store as the trainer's).
                    MaskChoice::Off => Ok(Family::Bert.masked_lm_prob()),
                    MaskChoice::Rate(r) if r > 0.0 && r < 1.0 => Ok(r),
                    MaskChoice::Rate(r) => bail!("a masking rate is a fraction in (0, 1), got {r}"),
                })?;
                (RowKind::Pretrain { mask: spec }, Vec::new(), !dynamic)
            }
            other => bail!(
                "'{}' holds `{other}` shards; ShardDataset reads the shards of a classify_sequences or pretrain_sequences pipeline",
                data.display()
            ),
        };
        let mask = match &kind {
            RowKind::Pretrain { mask: spec } if mask != MaskChoice::Off => spec.clone(),
            _ => None,
        };
        let mut spec = LoaderSpec {
            shards: shards.clone(),
            split: split.to_string(),
            kind,
            batch_size: 1,
            order: Order::InFileOrder,
            group_by_length: false,
            pad_to: None,
            pad_id: tokenizer.special_ids.pad,
            seed,
            max_tokens: None,
            packed: false,
            lengths: None,
        };
        let store = Arc::new(spec.row_store(quiet)?);
        spec.order = Order::Permuted(store.clone());
        let digests: Vec<&str> = shards.split_stats(split)?.shards.iter().map(|s| s.sha256.as_str()).collect();
        let key = super::order::store_key(split, &digests, &spec.store_kind());
        Ok(TrainRows {
            spec,
            store,
            task: m.task.clone(),
            label_names,
            mask,
            static_masks,
            pad_id: tokenizer.special_ids.pad,
            seed,
            key,
        })
    }

    /// Rows of the split training draws from (classification: the labelled ones).
    pub fn len(&self) -> u64 {
        self.store.rows()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Epoch `epoch`'s order: position → row.
    pub fn order(&self, epoch: u64) -> Permutation {
        Permutation::new(self.len(), self.seed, epoch)
    }

    /// Windows of an epoch of length-grouped global batches of `global_batch` rows (each of
    /// [`GROUP_BATCHES`] global batches, the last window fewer).
    pub fn windows(&self, global_batch: usize) -> u64 {
        self.len().div_ceil((global_batch * GROUP_BATCHES) as u64)
    }

    /// Rank `rank`'s part of each global batch of window `window` of `epoch`, with rows grouped
    /// by length as `bertpipe train` draws them with `group_by_length` and a global batch of
    /// `global_batch` rows: the window's rows sorted by length, cut into global batches,
    /// the batches shuffled — the trainer's own code ([`LoaderSpec`]), so the same batches.
    /// A part is the trainer's ([`Share::part`]), cut to `⌊s / ranks⌋` rows of a batch of `s`
    /// so every rank has as many.
    pub fn grouped_window(
        &self,
        epoch: u64,
        window: u64,
        global_batch: usize,
        rank: usize,
        ranks: usize,
    ) -> Result<Vec<Vec<Example>>> {
        if global_batch == 0 || ranks == 0 || rank >= ranks {
            bail!("rank {rank} of {ranks} with a global batch of {global_batch} rows");
        }
        let spec = LoaderSpec { batch_size: global_batch, group_by_length: true, ..self.spec.clone() };
        let spec = match &self.mask {
            Some(_) => spec,
            // Rows read unmasked: no masks drawn while grouping (lengths do not change).
            None => LoaderSpec { kind: unmasked(&spec.kind), ..spec },
        };
        let per_window = GROUP_BATCHES as u64;
        let share = Share { rank, ranks, micro: 1 };
        let parts = spec
            .groups_from(epoch, window * per_window)?
            .take(per_window as usize)
            .map(|g| {
                let mut rows = g?;
                let s = rows.len();
                let part = share.part(rank, s);
                Ok(rows.drain(part.start..part.start + s / ranks).collect())
            })
            .collect();
        parts
    }

    /// Row `row` (`0..len`) as training reads it in `epoch`: masked for that epoch when the
    /// masking is dynamic. `Example::index` is the row's position in its split.
    pub fn example(&self, row: u64, epoch: u64) -> Result<Example> {
        if row >= self.len() {
            bail!("row {row} is past the split's {} rows", self.len());
        }
        let e = self.store.get(row)?;
        match self.mask {
            Some(_) => self.spec.masked(e, epoch),
            // Dynamically masked shards read unmasked (`MaskChoice::Off`); others as stored.
            None => Ok(e),
        }
    }
}
