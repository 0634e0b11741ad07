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
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, Int8Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ProjectionMask;

use crate::contract::checksum::sha256_file;
use crate::contract::manifest::{Manifest, TokenizerInfo};

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

    /// Refuses shards tokenized with another vocabulary than `vocab_sha256`, the vocabulary of
    /// `whose` ("the checkpoint's 'x/vocab.txt'", "the model 'm.onnx'"): train from a
    /// checkpoint and eval call it; [`TokenizerInfo::expect_vocab`] words the error.
    pub fn expect_vocab(&self, vocab_sha256: &str, whose: &str) -> Result<&TokenizerInfo> {
        let tok = self.tokenizer()?;
        let file = self.manifest.vocab_file().map_or("their vocabulary".into(), |p| format!("'{}'", p.display()));
        let ours = format!("the shards in '{}' were tokenized with {file}", self.root.display());
        tok.expect_vocab(&ours, vocab_sha256, whose)?;
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
        Ok(self.batches(split)?.flat_map(|batch| match batch.and_then(|b| classify_rows(&b)) {
            Ok(rows) => rows.into_iter().map(Ok).collect::<Vec<_>>(),
            Err(e) => vec![Err(e)],
        }))
    }

    /// Classification rows of one shard.
    pub fn classify_shard(&self, split: &str, shard: usize) -> Result<Vec<ClassifyRow>> {
        let mut out = Vec::new();
        for b in self.shard_batches(split, shard, None)? {
            out.extend(classify_rows(&b?)?);
        }
        Ok(out)
    }

    /// Pretraining rows of one shard.
    pub fn pretrain_shard(&self, split: &str, shard: usize) -> Result<Vec<PretrainRow>> {
        let mut out = Vec::new();
        for b in self.shard_batches(split, shard, None)? {
            out.extend(pretrain_rows(&b?)?);
        }
        Ok(out)
    }

    /// The `label` column of a split (null: unlabelled), read without the other columns.
    pub fn labels(&self, split: &str) -> Result<Vec<Option<i64>>> {
        let mut out = Vec::new();
        for i in 0..self.split_stats(split)?.shards.len() {
            for b in self.shard_batches(split, i, Some(&["label"]))? {
                let b = b?;
                let col = b.column_by_name("label").context("shard has no `label` column")?;
                let labels = col.as_primitive::<Int64Type>();
                out.extend((0..labels.len()).map(|i| (!labels.is_null(i)).then(|| labels.value(i))));
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

fn pretrain_rows(batch: &RecordBatch) -> Result<Vec<PretrainRow>> {
    let col = |name: &str| batch.column_by_name(name).with_context(|| format!("shard has no `{name}` column"));
    let input_ids = col("input_ids")?.as_list::<i32>();
    let types = col("token_type_ids")?.as_list::<i32>();
    let nsp = batch.column_by_name("next_sentence_label").map(|c| c.as_primitive::<Int8Type>().clone());
    let list = |name: &str| batch.column_by_name(name).map(|c| c.as_list::<i32>().clone());
    let (positions, ids, bounds) = (list("masked_lm_positions"), list("masked_lm_ids"), list("doc_boundaries"));
    let ints = |l: &Option<arrow_array::ListArray>, i: usize| {
        l.as_ref().map(|l| l.value(i).as_primitive::<Int32Type>().values().to_vec())
    };
    Ok((0..batch.num_rows())
        .map(|i| PretrainRow {
            input_ids: input_ids.value(i).as_primitive::<Int32Type>().values().to_vec(),
            token_type_ids: types.value(i).as_primitive::<Int8Type>().values().to_vec(),
            next_sentence_label: nsp.as_ref().map(|c| c.value(i)),
            masked_lm_positions: ints(&positions, i),
            masked_lm_ids: ints(&ids, i),
            doc_boundaries: ints(&bounds, i),
        })
        .collect())
}

/// Classification rows of one record batch.
pub fn classify_rows(batch: &RecordBatch) -> Result<Vec<ClassifyRow>> {
    let col = |name: &str| batch.column_by_name(name).with_context(|| format!("shard has no `{name}` column"));
    let ids = col("id")?.as_string::<i32>();
    let labels = col("label")?.as_primitive::<Int64Type>();
    let input_ids = col("input_ids")?.as_list::<i32>();
    let types = col("token_type_ids")?.as_list::<i32>();
    let doc_id = batch.column_by_name("doc_id").map(|c| c.as_string::<i32>().clone());
    let chunk = batch.column_by_name("chunk").map(|c| c.as_primitive::<Int32Type>().clone());
    let num_chunks = batch.column_by_name("num_chunks").map(|c| c.as_primitive::<Int32Type>().clone());
    Ok((0..batch.num_rows())
        .map(|i| ClassifyRow {
            id: ids.value(i).to_string(),
            label: (!labels.is_null(i)).then(|| labels.value(i)),
            input_ids: input_ids.value(i).as_primitive::<Int32Type>().values().to_vec(),
            token_type_ids: types.value(i).as_primitive::<Int8Type>().values().to_vec(),
            doc_id: doc_id.as_ref().map(|c| c.value(i).to_string()),
            chunk: chunk.as_ref().map(|c| c.value(i)),
            num_chunks: num_chunks.as_ref().map(|c| c.value(i)),
        })
        .collect())
}
