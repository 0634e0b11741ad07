//! Reading shards back: open an output folder, verify it against its manifest (missing shard,
//! wrong size or checksum, another vocabulary → an error that says which), iterate rows.
//!
//! ```no_run
//! let shards = bertpipe::shards::ShardSet::open("out/imdb".as_ref())?;
//! shards.verify()?;
//! for row in shards.rows("train")? {
//!     let row = row?;
//!     println!("{} {:?} {} tokens", row.id, row.label, row.input_ids.len());
//! }
//! # anyhow::Ok(())
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use crate::contract::checksum::sha256_file;
use crate::contract::columns::{int_lists, ints, ints_in, required, strings_required};
use crate::contract::manifest::{Manifest, TokenizerInfo, VocabRef};

/// A verified-on-open shard folder.
pub struct ShardSet {
    root: PathBuf,
    pub manifest: Manifest,
}

/// One row of a classification shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifyRow {
    pub id: String,
    pub label: Option<i64>,
    pub input_ids: Vec<i32>,
    pub token_type_ids: Vec<i8>,
    /// With window truncation: the document and this row's place among its windows.
    pub doc_id: Option<String>,
    pub chunk: Option<i32>,
    pub num_chunks: Option<i32>,
}

impl ShardSet {
    /// Reads the manifest and checks that every shard it lists exists with the recorded size.
    ///
    /// A folder in a bucket (`s3://…`) is downloaded once into the local cache, every shard
    /// checked against the manifest's SHA-256 (see [`crate::sink::remote::fetch_shards`]).
    pub fn open(root: &Path) -> Result<ShardSet> {
        if crate::storage::is_remote(root) {
            return ShardSet::open(&crate::sink::remote::fetch_shards(root)?);
        }
        let manifest = Manifest::read(root)?;
        for (split, stats) in &manifest.splits {
            for shard in &stats.shards {
                let path = root.join(&shard.file);
                let meta = std::fs::metadata(&path).with_context(|| {
                    format!("shard '{}' of split `{split}`, listed in the manifest, is missing", path.display())
                })?;
                if meta.len() != shard.bytes {
                    bail!(
                        "shard '{}' has {} bytes, the manifest says {}: it is truncated or was replaced",
                        path.display(),
                        meta.len(),
                        shard.bytes
                    );
                }
            }
        }
        Ok(ShardSet { root: root.to_path_buf(), manifest })
    }

    /// Checks every shard's SHA-256 against the manifest.
    pub fn verify(&self) -> Result<()> {
        for stats in self.manifest.splits.values() {
            for shard in &stats.shards {
                let path = self.root.join(&shard.file);
                let got = sha256_file(&path)?;
                if got != shard.sha256 {
                    bail!(
                        "checksum mismatch for '{}': the manifest says {}, the file hashes to {got}",
                        path.display(),
                        shard.sha256
                    );
                }
                // The rows are a claim too (readers size their work by them): the footer's count.
                let f = File::open(&path).with_context(|| format!("could not open '{}'", path.display()))?;
                let rows = ParquetRecordBatchReaderBuilder::try_new(f)
                    .with_context(|| format!("'{}' is not a Parquet file", path.display()))?
                    .metadata()
                    .file_metadata()
                    .num_rows();
                if rows as u64 != shard.rows {
                    bail!("shard '{}' holds {rows} rows, but the manifest says {}", path.display(), shard.rows);
                }
            }
        }
        Ok(())
    }

    /// The tokenizer the shards were made with; untokenized shards are an error.
    pub fn tokenizer(&self) -> Result<&TokenizerInfo> {
        self.manifest.tokenizer.as_ref().with_context(|| {
            format!(
                "'{}' holds untokenized shards (task `{}`); run a pipeline with a tokenize step",
                self.root.display(),
                self.manifest.task
            )
        })
    }

    /// Refuses shards tokenized with another vocabulary than `theirs`, the vocabulary of
    /// `whose` ("the checkpoint's 'x/vocab.txt'", "the model 'm.onnx'"): train from a
    /// checkpoint and eval call it; [`TokenizerInfo::expect_vocab`] words the error.
    pub fn expect_vocab(&self, theirs: &VocabRef, whose: &str) -> Result<&TokenizerInfo> {
        let tok = self.tokenizer()?;
        let file = self.manifest.vocab_file().map_or("their vocabulary".into(), |p| format!("'{}'", p.display()));
        let ours = format!("the shards in '{}' were tokenized with {file}", self.root.display());
        tok.expect_vocab(&ours, theirs, whose)?;
        Ok(tok)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn splits(&self) -> impl Iterator<Item = &str> {
        self.manifest.splits.keys().map(String::as_str)
    }

    /// A split's figures and shards, as the manifest records them.
    pub fn split_stats(&self, split: &str) -> Result<&crate::contract::manifest::SplitStats> {
        self.manifest.splits.get(split).with_context(|| {
            format!(
                "no split `{split}` in '{}'; it has: {}",
                self.root.display(),
                self.splits().collect::<Vec<_>>().join(", ")
            )
        })
    }

    /// Shards in a split, and rows in each (from the manifest).
    pub fn shard_rows(&self, split: &str) -> Result<Vec<u64>> {
        Ok(self.split_stats(split)?.shards.iter().map(|s| s.rows).collect())
    }

    /// Record batches of one shard (`shard`: its index in the split), with only `columns` when
    /// given.
    pub fn shard_batches(
        &self,
        split: &str,
        shard: usize,
        columns: Option<&[&str]>,
    ) -> Result<impl Iterator<Item = Result<RecordBatch>>> {
        let info = self
            .split_stats(split)?
            .shards
            .get(shard)
            .with_context(|| format!("split `{split}` has no shard {shard}"))?;
        let path = self.root.join(&info.file);
        let f = File::open(&path).with_context(|| format!("could not open '{}'", path.display()))?;
        let mut builder = ParquetRecordBatchReaderBuilder::try_new(f)
            .with_context(|| format!("'{}' is not a Parquet file", path.display()))?;
        if let Some(columns) = columns {
            let mask = ProjectionMask::columns(builder.parquet_schema(), columns.iter().copied());
            builder = builder.with_projection(mask);
        }
        let reader = builder.build()?;
        Ok(reader.map(move |b| b.with_context(|| format!("could not read '{}'", path.display()))))
    }

    /// Record batches of one split, shard by shard, in order.
    pub fn batches(&self, split: &str) -> Result<impl Iterator<Item = Result<RecordBatch>> + '_> {
        let n = self.split_stats(split)?.shards.len();
        let split = split.to_string();
        Ok((0..n).flat_map(move |i| {
            let batches: Box<dyn Iterator<Item = Result<RecordBatch>>> = match self.shard_batches(&split, i, None) {
                Ok(reader) => Box::new(reader),
                Err(e) => Box::new(std::iter::once(Err(e))),
            };
            batches
        }))
    }

    /// Classification rows of one split, in order.
    pub fn rows(&self, split: &str) -> Result<impl Iterator<Item = Result<ClassifyRow>> + '_> {
        let vocab = self.vocab_size();
        Ok(self.batches(split)?.flat_map(move |batch| match batch.and_then(|b| classify_rows(&b, vocab)) {
            Ok(rows) => rows.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        }))
    }

    /// Classification rows of one shard.
    pub fn classify_shard(&self, split: &str, shard: usize) -> Result<Vec<ClassifyRow>> {
        let mut out = Vec::new();
        for b in self.shard_batches(split, shard, None)? {
            out.extend(classify_rows(&b?, self.vocab_size()).with_context(|| self.shard_shown(split, shard))?);
        }
        Ok(out)
    }

    /// The vocabulary's size, from the manifest's tokenizer record.
    pub fn vocab_size(&self) -> Option<usize> {
        self.manifest.tokenizer.as_ref().map(|t| t.vocab_size)
    }

    /// "shard 'PATH'", for errors about what is in it.
    pub fn shard_shown(&self, split: &str, shard: usize) -> String {
        let file = self.manifest.splits.get(split).and_then(|s| s.shards.get(shard)).map(|s| s.file.as_str());
        format!("shard '{}'", self.root.join(file.unwrap_or("?")).display())
    }

    /// Pretraining rows of one shard.
    pub fn pretrain_shard(&self, split: &str, shard: usize) -> Result<Vec<PretrainRow>> {
        let mut out = Vec::new();
        for b in self.shard_batches(split, shard, None)? {
            out.extend(pretrain_rows(&b?, self.vocab_size()).with_context(|| self.shard_shown(split, shard))?);
        }
        Ok(out)
    }

    /// The `label` column of a split (null: unlabelled), read without the other columns.
    pub fn labels(&self, split: &str) -> Result<Vec<Option<i64>>> {
        let mut out = Vec::new();
        for i in 0..self.split_stats(split)?.shards.len() {
            for b in self.shard_batches(split, i, Some(&["label"]))? {
                let b = b?;
                out.extend(ints(required(&b, "label")?, "label").with_context(|| self.shard_shown(split, i))?);
            }
        }
        Ok(out)
    }
}

/// One row of a pretraining shard.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PretrainRow {
    pub input_ids: Vec<i32>,
    pub token_type_ids: Vec<i8>,
    /// NSP rows: 0 = B follows A, 1 = B is random (HF convention).
    pub next_sentence_label: Option<i8>,
    /// Static masking: positions and original ids (`input_ids` already masked).
    pub masked_lm_positions: Option<Vec<i32>>,
    pub masked_lm_ids: Option<Vec<i32>>,
    /// Packed rows: where each document starts.
    pub doc_boundaries: Option<Vec<i32>>,
}

/// The id lists of one row: `input_ids` and `token_type_ids` of the same length, at least one
/// token (ids below the vocabulary's size and token types 0 or 1 are the readers' ranges).
fn check_row(i: usize, ids: usize, types: usize) -> Result<()> {
    if ids == 0 {
        bail!("row {i}: `input_ids` is empty (a row holds at least [CLS] and [SEP])");
    }
    if types != ids {
        bail!("row {i}: `token_type_ids` has {types} values, `input_ids` {ids}: they must be the same length");
    }
    Ok(())
}

/// The largest token id a row may hold: one below the vocabulary's size.
fn max_id(vocab_size: Option<usize>) -> i64 {
    vocab_size.map_or(i32::MAX as i64, |n| (n as i64 - 1).min(i32::MAX as i64))
}

const I32_MAX: i64 = i32::MAX as i64;

fn pretrain_rows(batch: &RecordBatch, vocab_size: Option<usize>) -> Result<Vec<PretrainRow>> {
    let top = max_id(vocab_size);
    let input_ids = int_lists::<i32>(required(batch, "input_ids")?, "input_ids", 0, top)?;
    let types = int_lists::<i8>(required(batch, "token_type_ids")?, "token_type_ids", 0, 1)?;
    let nsp = match batch.column_by_name("next_sentence_label") {
        Some(c) => Some(ints_in(c, "next_sentence_label", 0, 1)?),
        None => None,
    };
    let list = |name: &str, hi: i64| -> Result<Option<Vec<Vec<i32>>>> {
        batch.column_by_name(name).map(|c| int_lists(c, name, 0, hi)).transpose()
    };
    let mut positions = list("masked_lm_positions", I32_MAX)?;
    let mut ids = list("masked_lm_ids", top)?;
    let mut bounds = list("doc_boundaries", I32_MAX)?;
    let mut rows = Vec::with_capacity(batch.num_rows());
    for (i, (input_ids, token_type_ids)) in input_ids.into_iter().zip(types).enumerate() {
        check_row(i, input_ids.len(), token_type_ids.len())?;
        let n = input_ids.len() as i32;
        if let Some(p) = positions.as_ref().and_then(|p| p[i].iter().find(|&&p| p >= n)) {
            bail!("row {i}: `masked_lm_positions` holds {p}, past the row's {n} tokens");
        }
        if let (Some(p), Some(m)) = (&positions, &ids) {
            if p[i].len() != m[i].len() {
                bail!("row {i}: `masked_lm_positions` has {} values, `masked_lm_ids` {}", p[i].len(), m[i].len());
            }
        }
        if let Some(b) = bounds.as_ref().and_then(|b| b[i].iter().find(|&&b| b > n)) {
            bail!("row {i}: `doc_boundaries` holds {b}, past the row's {n} tokens");
        }
        let take = |l: &mut Option<Vec<Vec<i32>>>| l.as_mut().map(|l| std::mem::take(&mut l[i]));
        rows.push(PretrainRow {
            input_ids,
            token_type_ids,
            next_sentence_label: nsp.as_ref().map(|c| c[i] as i8),
            masked_lm_positions: take(&mut positions),
            masked_lm_ids: take(&mut ids),
            doc_boundaries: take(&mut bounds),
        });
    }
    Ok(rows)
}

/// Classification rows of one record batch; with `vocab_size`, every id must be below it.
/// Columns of other Arrow types that mean the same are read as the contract's (see
/// [`crate::contract::columns`]); anything else is an error naming the column and row.
pub fn classify_rows(batch: &RecordBatch, vocab_size: Option<usize>) -> Result<Vec<ClassifyRow>> {
    let ids = strings_required(required(batch, "id")?, "id")?;
    let labels = ints(required(batch, "label")?, "label")?;
    let input_ids = int_lists::<i32>(required(batch, "input_ids")?, "input_ids", 0, max_id(vocab_size))?;
    let types = int_lists::<i8>(required(batch, "token_type_ids")?, "token_type_ids", 0, 1)?;
    let mut doc_id = batch.column_by_name("doc_id").map(|c| strings_required(c, "doc_id")).transpose()?;
    let int32 = |name: &str| -> Result<Option<Vec<i64>>> {
        batch.column_by_name(name).map(|c| ints_in(c, name, 0, I32_MAX)).transpose()
    };
    let (chunk, num_chunks) = (int32("chunk")?, int32("num_chunks")?);
    let mut rows = Vec::with_capacity(batch.num_rows());
    for (i, ((id, input_ids), token_type_ids)) in ids.into_iter().zip(input_ids).zip(types).enumerate() {
        check_row(i, input_ids.len(), token_type_ids.len())?;
        if let Some(l) = labels[i].filter(|&l| !(0..=I32_MAX).contains(&l)) {
            bail!("row {i} (`{id}`): column `label` holds {l}; labels are class indices 0, 1, …");
        }
        rows.push(ClassifyRow {
            id,
            label: labels[i],
            input_ids,
            token_type_ids,
            doc_id: doc_id.as_mut().map(|d| std::mem::take(&mut d[i])),
            chunk: chunk.as_ref().map(|c| c[i] as i32),
            num_chunks: num_chunks.as_ref().map(|c| c[i] as i32),
        });
    }
    Ok(rows)
}
