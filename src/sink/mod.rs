//! Sinks: Parquet shards per split, the rejects, and the manifest written last.

pub mod journal;
pub mod remote;
pub mod rows;
pub mod shard;

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::{Deserialize, Serialize};

tagged_enum! {
    /// Where the rows go (`sink:` in the pipeline YAML).
    pub enum Sink {
        "parquet" => Parquet(ParquetSink),
    }
}

impl Sink {
    pub fn path(&self) -> &Path {
        match self {
            Sink::Parquet(s) => &s.path,
        }
    }

    pub fn path_mut(&mut self) -> &mut PathBuf {
        match self {
            Sink::Parquet(s) => &mut s.path,
        }
    }

    pub fn check(&self) -> Vec<(&'static str, String)> {
        match self {
            Sink::Parquet(s) => s.check(),
        }
    }
}

/// Parquet shards: `<path>/<split>/part-NNNNN.parquet`, `<path>/_rejects/part-NNNNN.parquet`,
/// `<path>/manifest.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ParquetSink {
    /// Output folder.
    pub path: PathBuf,
    /// Most rows per shard.
    #[serde(default = "default_shard_rows")]
    pub shard_rows: usize,
    /// Close a shard once its size (written bytes plus the estimated size of buffered rows)
    /// reaches this many bytes; checked every 128 rows.
    #[serde(default)]
    pub shard_bytes: Option<u64>,
    /// `zstd` (default), `snappy` or `none`.
    #[serde(default)]
    pub compression: Compression,
    /// zstd level, 1–22.
    #[serde(default = "default_zstd_level")]
    pub zstd_level: i32,
    /// Write the cleaned `text` column.
    #[serde(default = "yes")]
    pub keep_text: bool,
    /// `auto` (default): when the output has an evaluation split (`test`, `validation`,
    /// `valid`, `dev`, `eval`) and other splits, the manifest says how many of its documents
    /// those splits hold, exactly or nearly; `off`: not measured.
    #[serde(default)]
    pub leakage: LeakageCheck,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum LeakageCheck {
    #[default]
    Auto,
    Off,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Zstd,
    Snappy,
    None,
}

fn default_shard_rows() -> usize {
    10_000
}

fn default_zstd_level() -> i32 {
    3
}

fn yes() -> bool {
    true
}

impl ParquetSink {
    fn check(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.shard_rows == 0 {
            problems.push(("shard_rows", "must be at least 1".into()));
        }
        if self.shard_bytes == Some(0) {
            problems.push(("shard_bytes", "must be at least 1".into()));
        }
        if !(1..=22).contains(&self.zstd_level) {
            problems.push(("zstd_level", format!("must be 1–22, got {}", self.zstd_level)));
        }
        if self.path.as_os_str().is_empty() {
            problems.push(("path", "must not be empty".into()));
        }
        problems
    }
}
