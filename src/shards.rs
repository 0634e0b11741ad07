//! Reading shards back: open an output folder, verify it against its manifest (missing shard,
//! wrong size or checksum, another vocabulary → an error that says which), iterate rows; and
//! the one label check: the shards' class names ([`class_names`]) matched to a model's by name
//! ([`match_labels`]), so a model is never scored or trained on labels that mean other classes.
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

use std::collections::BTreeMap;
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
    /// checked against the manifest's SHA-256 (see [`crate::sink::remote::fetch_shards`]),
    /// showing its progress: [`ShardSet::open_with`] takes the command's `--quiet`.
    pub fn open(root: &Path) -> Result<ShardSet> {
        ShardSet::open_with(root, false)
    }

    /// As [`ShardSet::open`], a bucket's download silent with `quiet`.
    pub fn open_with(root: &Path, quiet: bool) -> Result<ShardSet> {
        if crate::storage::is_remote(root) {
            return ShardSet::open_with(&crate::sink::remote::fetch_shards_with(root, quiet)?, quiet);
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
                let f = crate::contract::reads::open(&path)
                    .with_context(|| format!("could not open '{}'", path.display()))?;
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
        let f = crate::contract::reads::open(&path).with_context(|| format!("could not open '{}'", path.display()))?;
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

    /// The shards' class names in label order ([`class_names`]); empty when their labels are
    /// numbers.
    pub fn class_names(&self) -> Vec<String> {
        class_names(&self.manifest.config, &self.manifest.id2label)
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

/// Class names in label order, as the shards' pipeline gives them (`config`: the manifest's
/// resolved pipeline; `id2label`: the manifest's): an inverted `label_map` whose ids are 0, 1,
/// …, aclImdb's `neg` and `pos`, or the names the pipeline found in the corpus. Empty when the
/// labels are numbers, or a `label_map` numbers them otherwise. Training names a model's classes
/// with these; eval and a checkpoint's head are matched to them ([`match_labels`]).
pub fn class_names(config: &serde_json::Value, id2label: &BTreeMap<i64, String>) -> Vec<String> {
    let source = config.get("source");
    if let Some(map) = source.and_then(|s| s.get("label_map")).and_then(|m| m.as_object()) {
        let mut pairs: Vec<(i64, String)> = map.iter().filter_map(|(k, v)| Some((v.as_i64()?, k.clone()))).collect();
        pairs.sort();
        if pairs.iter().enumerate().all(|(i, (id, _))| *id == i as i64) {
            return pairs.into_iter().map(|(_, n)| n).collect();
        }
        return Vec::new();
    }
    if source.and_then(|s| s.get("type")).and_then(|t| t.as_str()) == Some("aclimdb") {
        return vec!["neg".into(), "pos".into()];
    }
    if id2label.keys().copied().eq(0..id2label.len() as i64) {
        return id2label.values().cloned().collect();
    }
    Vec::new()
}

/// Whether names say nothing of their classes: none at all, or HF's defaults `LABEL_0`,
/// `LABEL_1`, … in order (what a config without `id2label` gets, and many checkpoints keep).
pub fn unnamed(names: &[String]) -> bool {
    names.iter().enumerate().all(|(i, n)| *n == format!("LABEL_{i}"))
}

/// How the shards' labels become a model's classes ([`match_labels`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LabelMatch {
    /// The model's class of each of the shards' label ids, when they were matched by name;
    /// `None` when by number (label `i` is class `i`).
    pub by_name: Option<Vec<usize>>,
    /// The shards' class names in label order (empty: numbers).
    pub shard_names: Vec<String>,
    /// The model's class names in class order.
    pub model_names: Vec<String>,
    /// How the two were matched when it is not plain (other names, another order, names on one
    /// side only): a line for the user.
    pub note: Option<String>,
}

impl LabelMatch {
    /// The model's class of the shards' label `label`, or why it has none (“label 3, but …”).
    pub fn class_of(&self, label: i64) -> std::result::Result<usize, String> {
        let l = usize::try_from(label).ok();
        match &self.by_name {
            Some(ids) => l.and_then(|l| ids.get(l).copied()).ok_or_else(|| {
                format!(
                    "label {label}, which the shards' manifest names no class for (it names {})",
                    numbered(&self.shard_names)
                )
            }),
            None => l.filter(|&l| l < self.model_names.len()).ok_or_else(|| {
                format!(
                    "label {label}, but the model has {} classes ({})",
                    self.model_names.len(),
                    self.model_names.join(", ")
                )
            }),
        }
    }

    /// The model's class of each of the shards' label ids when that is not the label itself
    /// (matched by name, in another order); `None` when every label is its own class.
    pub fn remap(&self) -> Option<Vec<usize>> {
        self.by_name.clone().filter(|ids| ids.iter().enumerate().any(|(i, &c)| i != c))
    }
}

/// `0 neg, 1 pos`.
fn numbered(names: &[String]) -> String {
    names.iter().enumerate().map(|(i, n)| format!("{i} {n}")).collect::<Vec<_>>().join(", ")
}

/// The class called `name`: the same name, else the one name that differs from it only in case.
fn find_class(names: &[String], name: &str) -> Option<usize> {
    if let Some(i) = names.iter().position(|n| n == name) {
        return Some(i);
    }
    let folded: Vec<usize> =
        names.iter().enumerate().filter(|(_, n)| n.to_lowercase() == name.to_lowercase()).map(|(i, _)| i).collect();
    match folded[..] {
        [i] => Some(i),
        _ => None,
    }
}

/// Matches the shards' labels (`shard_names`, in label order; empty when they are numbers) to a
/// model's classes (`model_names`, in class order). When both sides have names, by name: every
/// name of the shards must be one of the model's (the same, or the only one that differs in
/// case), in any order, and the model may have more. When a side has none (no names, or only
/// `LABEL_0`, `LABEL_1`, …), by number, and a model without names only when the shards name as
/// many classes as it has. Anything else is refused, naming both lists: scoring or training
/// across it would count one class as another. `shards` and `model` say whose labels they are
/// (“the shards in 'out/x'”, “the model 'm.onnx'”); `fix` ends a refusal with what to do.
pub fn match_labels(
    shard_names: &[String],
    model_names: &[String],
    shards: &str,
    model: &str,
    fix: &str,
) -> Result<LabelMatch> {
    let mut m =
        LabelMatch { by_name: None, shard_names: shard_names.to_vec(), model_names: model_names.to_vec(), note: None };
    match (unnamed(shard_names), unnamed(model_names)) {
        (true, true) => {}
        (true, false) => {
            m.note = Some(format!(
                "{shards} do not name their labels: label i is taken as class i of {model} ({})",
                numbered(model_names)
            ));
        }
        (false, true) => {
            if shard_names.len() != model_names.len() {
                bail!(
                    "{model} does not name its {} classes [{}] and {shards} name {} [{}]: with no names to match and other counts, there is no telling which class is which ({fix})",
                    model_names.len(),
                    model_names.join(", "),
                    shard_names.len(),
                    shard_names.join(", ")
                );
            }
            m.note = Some(format!(
                "{model} does not name its classes: the labels of {shards} are taken by number ({})",
                shard_names.iter().zip(model_names).map(|(s, c)| format!("{s} → {c}")).collect::<Vec<_>>().join(", ")
            ));
        }
        (false, false) => {
            let mut ids = Vec::with_capacity(shard_names.len());
            let mut missing = Vec::new();
            for name in shard_names {
                match find_class(model_names, name) {
                    Some(c) => ids.push(c),
                    None => missing.push(format!("`{name}`")),
                }
            }
            if !missing.is_empty() {
                bail!(
                    "{shards} have the labels [{}] and {model} the labels [{}]: {} {} not among the model's, so rows labelled so cannot be matched to its classes ({fix})",
                    shard_names.join(", "),
                    model_names.join(", "),
                    missing.join(", "),
                    if missing.len() == 1 { "is" } else { "are" }
                );
            }
            let plain = ids.iter().enumerate().all(|(i, &c)| i == c && shard_names[i] == model_names[c]);
            if !plain {
                m.note = Some(format!(
                    "the labels of {shards} are matched to the classes of {model} by name: {}",
                    ids.iter()
                        .enumerate()
                        .map(|(i, &c)| format!("{i} {} → {c} {}", shard_names[i], model_names[c]))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            m.by_name = Some(ids);
        }
    }
    Ok(m)
}

#[cfg(test)]
mod label_tests {
    use super::*;

    fn names(s: &[&str]) -> Vec<String> {
        s.iter().map(|n| n.to_string()).collect()
    }

    fn matched(shards: &[&str], model: &[&str]) -> Result<LabelMatch> {
        match_labels(&names(shards), &names(model), "the shards in 'd'", "the model 'm.onnx'", "relabel")
    }

    #[test]
    fn names_the_model_has_are_matched_by_name_in_any_order() {
        // The audit's case: a three-class model, shards with two of its classes.
        let m = matched(&["negative", "positive"], &["negative", "neutral", "positive"]).unwrap();
        assert_eq!(m.by_name, Some(vec![0, 2]));
        assert_eq!((m.class_of(0), m.class_of(1)), (Ok(0), Ok(2)));
        assert_eq!(m.remap(), Some(vec![0, 2]));
        assert!(m.note.as_deref().unwrap().contains("1 positive → 2 positive"), "{:?}", m.note);
        let m = matched(&["neg", "pos"], &["pos", "neg"]).unwrap();
        assert_eq!(m.by_name, Some(vec![1, 0]));
        // Case alone does not part two names (HF's POSITIVE / NEGATIVE).
        let m = matched(&["negative", "positive"], &["NEGATIVE", "POSITIVE"]).unwrap();
        assert_eq!(m.by_name, Some(vec![0, 1]));
        assert!(m.note.is_some() && m.remap().is_none());
        // The same names in the same order: nothing to say, nothing to remap.
        let m = matched(&["neg", "pos"], &["neg", "pos"]).unwrap();
        assert_eq!((m.by_name, m.note), (Some(vec![0, 1]), None));
        let m = matched(&["neg", "pos"], &["neg", "pos", "LABEL_2"]).unwrap();
        assert_eq!(m.by_name, Some(vec![0, 1]));
        assert!(m.class_of(2).unwrap_err().contains("names no class for (it names 0 neg, 1 pos)"));
    }

    #[test]
    fn a_name_the_model_lacks_is_refused_naming_both_lists() {
        let e = matched(&["neg", "pos"], &["negative", "neutral", "positive"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "the shards in 'd' have the labels [neg, pos] and the model 'm.onnx' the labels [negative, neutral, positive]: `neg`, `pos` are not among the model's, so rows labelled so cannot be matched to its classes (relabel)"
        );
        let e = matched(&["negative", "neutral", "positive"], &["negative", "positive"]).unwrap_err().to_string();
        assert!(e.contains("`neutral` is not among"), "{e}");
        // Two names that differ from it only in case: no telling which.
        assert!(matched(&["pos"], &["POS", "Pos"]).is_err());
    }

    #[test]
    fn without_names_on_a_side_labels_are_numbers() {
        let m = matched(&[], &[]).unwrap();
        assert_eq!((m.by_name.clone(), m.note.clone()), (None, None));
        assert_eq!(m.class_of(1), Err("label 1, but the model has 0 classes ()".into()));
        let m = matched(&["LABEL_0", "LABEL_1"], &["LABEL_0", "LABEL_1"]).unwrap();
        assert_eq!((m.by_name.clone(), m.note.clone(), m.class_of(1)), (None, None, Ok(1)));
        assert_eq!(m.class_of(2), Err("label 2, but the model has 2 classes (LABEL_0, LABEL_1)".into()));
        assert_eq!(m.class_of(-1).unwrap_err(), "label -1, but the model has 2 classes (LABEL_0, LABEL_1)");
        // Numbered shards, a model with names: by number, said.
        let m = matched(&[], &["neg", "pos"]).unwrap();
        assert_eq!((m.by_name.clone(), m.class_of(1)), (None, Ok(1)));
        assert!(m.note.unwrap().contains("do not name their labels"));
        // A model without names: by number when the counts agree, else refused.
        let m = matched(&["neg", "pos"], &["LABEL_0", "LABEL_1"]).unwrap();
        assert_eq!(m.by_name, None);
        assert!(m.note.unwrap().contains("neg → LABEL_0, pos → LABEL_1"));
        let e = matched(&["neg", "pos"], &["LABEL_0", "LABEL_1", "LABEL_2"]).unwrap_err().to_string();
        assert!(e.contains("does not name its 3 classes") && e.contains("name 2 [neg, pos]"), "{e}");
        // `LABEL_i` out of place is a name.
        assert!(!unnamed(&names(&["LABEL_1", "LABEL_0"])) && unnamed(&[]));
    }

    #[test]
    fn class_names_come_from_the_label_map_aclimdb_or_the_names_found() {
        let found: BTreeMap<i64, String> = [(0, "negative".to_string()), (1, "positive".to_string())].into();
        let csv = serde_json::json!({"source": {"type": "csv"}});
        assert_eq!(class_names(&csv, &found), ["negative", "positive"]);
        assert!(class_names(&csv, &BTreeMap::new()).is_empty());
        let mapped = serde_json::json!({"source": {"type": "csv", "label_map": {"good": 1, "bad": 0}}});
        assert_eq!(class_names(&mapped, &found), ["bad", "good"]);
        let shared = serde_json::json!({"source": {"type": "csv", "label_map": {"good": 1, "fine": 1, "bad": 0}}});
        assert!(class_names(&shared, &found).is_empty(), "ids not 0, 1, … name nothing");
        let imdb = serde_json::json!({"source": {"type": "aclimdb"}});
        assert_eq!(class_names(&imdb, &BTreeMap::new()), ["neg", "pos"]);
        let gap: BTreeMap<i64, String> = [(1, "only".to_string())].into();
        assert!(class_names(&csv, &gap).is_empty());
    }
}
