//! bertpipe: streaming corpus pipelines for BERT — sources, cleaning steps and Parquet shards —
//! and BERT itself: training with candle on those shards, checkpoints in HF layout.

#[macro_use]
mod tagged;

pub mod clean;
pub mod cli;
pub mod config;
pub mod document;
pub mod metrics;
pub mod model;
pub mod onnx;
pub mod pipeline;
pub mod rng;
pub mod sequence;
pub mod shards;
pub mod sink;
pub mod source;
pub mod stats;
pub mod storage;
pub mod synth;
pub mod tokenize;
pub mod train;

/// bertpipe's cache folder — ONNX Runtime installed by `doctor --install`, object-storage
/// staging and fetched shard folders: `$BERTPIPE_CACHE_DIR`, else `$XDG_CACHE_HOME/bertpipe`,
/// else `~/.cache/bertpipe`.
pub fn cache_dir() -> std::path::PathBuf {
    use std::path::PathBuf;
    if let Some(d) = std::env::var_os("BERTPIPE_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("bertpipe");
    }
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    home.join(".cache").join("bertpipe")
}
