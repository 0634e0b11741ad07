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
