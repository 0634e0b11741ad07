//! bertpipe: streaming corpus pipelines for BERT — sources, cleaning steps and Parquet shards —
//! their statistics, and BERT itself: training with candle on those shards (checkpoints in HF
//! layout), ONNX export, and batch evaluation with ONNX Runtime.
//!
//! The data half is a one-way stack; each module imports only from the floors below it:
//!
//! ```text
//! contract                          documents, the Step trait, the manifest, partitions, progress
//! storage                           object storage (s3://, gs://, az://)
//! source · clean · tokenize · sequence   readers and steps
//! sink                              Parquet shards, rejects, the journal
//! config                            the pipeline YAML and the step registry
//! pipeline                          the executor, task arrays, scan and merge
//! shards · stats · vocab            reading shards back, corpus statistics, `vocab train`
//! ```
//!
//! The model half (`model`, `train`, `onnx`, `metrics`) reads shards through [`shards`] and
//! the manifest through [`contract::manifest`]; [`experiment`] (`bertpipe run`) chains the
//! commands of both, `page` draws their results as one self-contained `report.html`, and `cli`
//! and `app` (the command line, which `main` and the Python wheel both run) sit on top.

#[macro_use]
mod tagged;

pub mod app;
pub mod clean;
pub mod cli;
pub mod config;
pub mod contract;
pub mod device;
pub mod doctor;
pub mod experiment;
pub mod fuzz;
pub mod metrics;
pub mod model;
pub mod onnx;
pub mod page;
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
pub mod vocab;
