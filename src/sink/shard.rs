//! `ShardWriter`: rows in, `part-NNNNN.parquet` files out, each written under a temporary name,
//! checksummed while it is written, renamed when complete and recorded in the journal.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression as PqCompression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use sha2::{Digest, Sha256};

use super::rows::{RowBuffer, BATCH_ROWS};
use super::{Compression, ParquetSink};
use crate::contract::manifest::{shard_name, ShardInfo};

/// Hashes and counts bytes on their way to disk, so a shard's checksum costs no second read.
struct HashingWriter {
    inner: BufWriter<File>,
    hasher: Sha256,
    bytes: u64,
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct OpenShard {
    writer: ArrowWriter<HashingWriter>,
    tmp: PathBuf,
    rows: usize,
}

/// Writes one folder of shards (one split, or the rejects).
pub struct ShardWriter {
    out_root: PathBuf,
    /// Folder relative to `out_root` (`train`, `_rejects`).
    folder: String,
    schema: SchemaRef,
    props: WriterProperties,
    shard_rows: usize,
    shard_bytes: Option<u64>,
    /// Shards that a previous, interrupted run completed and that verified: their rows are
    /// counted off instead of being written again.
    kept: Vec<ShardInfo>,
    skipped_rows: u64,
    open: Option<OpenShard>,
    pub shards: Vec<ShardInfo>,
}

/// Called with each shard as soon as it is complete on disk.
pub type OnShard<'a> = dyn FnMut(&str, &ShardInfo) -> Result<()> + 'a;

/// With `shard_bytes`, the shard's size is checked after every this many rows.
const SIZE_CHECK_ROWS: usize = 128;

/// Rows per row group. The writer holds a whole row group in memory before it flushes, so
/// this bounds the memory of every open shard (about 3 MB of IMDb text).
const ROW_GROUP_ROWS: usize = 2048;

pub fn writer_properties(sink: &ParquetSink) -> WriterProperties {
    let compression = match sink.compression {
        Compression::Zstd => PqCompression::ZSTD(ZstdLevel::try_new(sink.zstd_level).unwrap_or_default()),
        Compression::Snappy => PqCompression::SNAPPY,
        Compression::None => PqCompression::UNCOMPRESSED,
    };
    WriterProperties::builder()
        .set_compression(compression)
        .set_created_by(format!("bertpipe {} (parquet-rs)", env!("CARGO_PKG_VERSION")))
        .set_max_row_group_row_count(Some(sink.shard_rows.clamp(1, ROW_GROUP_ROWS)))
        // Text, ids and token lists rarely repeat: a dictionary costs time (a fifth of the
        // writer's) and is discarded anyway; zstd does the compressing.
        .set_dictionary_enabled(false)
        .build()
}

impl ShardWriter {
    pub fn new(out_root: &Path, folder: &str, schema: SchemaRef, sink: &ParquetSink, kept: Vec<ShardInfo>) -> Self {
        ShardWriter {
            out_root: out_root.to_path_buf(),
            folder: folder.to_string(),
            schema,
            props: writer_properties(sink),
            shard_rows: sink.shard_rows,
            shard_bytes: sink.shard_bytes,
            kept,
            skipped_rows: 0,
            open: None,
            shards: Vec::new(),
        }
    }

    pub fn rows_written(&self) -> u64 {
        self.shards.iter().map(|s| s.rows).sum::<u64>()
            + self.open.as_ref().map_or(0, |o| o.rows as u64)
            + self.skipped_rows
    }

    pub fn write(&mut self, batch: &RecordBatch, on_shard: &mut OnShard) -> Result<()> {
        let mut offset = 0;
        let n = batch.num_rows();
        while offset < n {
            if let Some(kept) = self.kept.get(self.shards.len()).cloned() {
                let take = ((kept.rows - self.skipped_rows) as usize).min(n - offset);
                self.skipped_rows += take as u64;
                offset += take;
                if self.skipped_rows == kept.rows {
                    self.skipped_rows = 0;
                    self.shards.push(kept);
                }
                continue;
            }
            if self.open.is_none() {
                self.open = Some(self.start()?);
            }
            let open = self.open.as_mut().expect("just opened");
            // With a byte limit, write in small slices so the size is checked often.
            let step = if self.shard_bytes.is_some() { SIZE_CHECK_ROWS } else { usize::MAX };
            let take = (self.shard_rows - open.rows).min(n - offset).min(step);
            open.writer
                .write(&batch.slice(offset, take))
                .with_context(|| format!("could not write to '{}'", open.tmp.display()))?;
            open.rows += take;
            offset += take;
            let full = open.rows >= self.shard_rows
                || self.shard_bytes.is_some_and(|max| {
                    open.writer.bytes_written() as u64 + open.writer.in_progress_size() as u64 >= max
                });
            if full {
                self.close(on_shard)?;
            }
        }
        Ok(())
    }

    /// Hands a full batch of buffered rows over (`BATCH_ROWS`), or all of them with `all`.
    pub fn take(&mut self, rows: &mut impl RowBuffer, all: bool, on_shard: &mut OnShard) -> Result<()> {
        if rows.len() >= BATCH_ROWS || (all && !rows.is_empty()) {
            self.write(&rows.finish(), on_shard)?;
        }
        Ok(())
    }

    /// Completes the open shard, if any.
    pub fn finish(&mut self, on_shard: &mut OnShard) -> Result<()> {
        if self.open.is_some() {
            self.close(on_shard)?;
        }
        Ok(())
    }

    fn start(&self) -> Result<OpenShard> {
        let dir = self.out_root.join(&self.folder);
        std::fs::create_dir_all(&dir).with_context(|| format!("could not create '{}'", dir.display()))?;
        let tmp = dir.join(format!(".{}.tmp", shard_name(self.shards.len())));
        let file = File::create(&tmp).with_context(|| format!("could not create '{}'", tmp.display()))?;
        let sink = HashingWriter { inner: BufWriter::with_capacity(1 << 20, file), hasher: Sha256::new(), bytes: 0 };
        let writer = ArrowWriter::try_new(sink, self.schema.clone(), Some(self.props.clone()))?;
        Ok(OpenShard { writer, tmp, rows: 0 })
    }

    fn close(&mut self, on_shard: &mut OnShard) -> Result<()> {
        let open = self.open.take().expect("a shard is open");
        let mut sink =
            open.writer.into_inner().with_context(|| format!("could not finish '{}'", open.tmp.display()))?;
        // A shard under the buffer's size reaches the disk only here: a full disk shows here.
        sink.flush().with_context(|| format!("could not write '{}'", open.tmp.display()))?;
        sink.inner.get_ref().sync_all().with_context(|| format!("could not sync '{}'", open.tmp.display()))?;
        let name = shard_name(self.shards.len());
        let final_path = self.out_root.join(&self.folder).join(&name);
        crate::contract::kill_point();
        std::fs::rename(&open.tmp, &final_path)
            .with_context(|| format!("could not rename '{}'", open.tmp.display()))?;
        let info = ShardInfo {
            file: format!("{}/{}", self.folder, name),
            rows: open.rows as u64,
            bytes: sink.bytes,
            sha256: hex::encode(sink.hasher.finalize()),
        };
        on_shard(&self.folder, &info)?;
        self.shards.push(info);
        Ok(())
    }
}
