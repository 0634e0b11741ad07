//! BERT out through ONNX: export ([`export`]; ModernBERT's graph in [`modernbert`]), ONNX Runtime ([`runtime`]), the export's check
//! against candle ([`verify`]), batch evaluation on shards ([`eval`]: inference in [`infer`]
//! into [`predictions`] files, scored in bounded memory by [`score`]), the comparison of two
//! models on the same rows ([`gate`]) and raw-text prediction through a pipeline ([`predict`]).

pub mod eval;
pub mod export;
pub mod gate;
pub mod graph;
pub mod infer;
pub mod modernbert;
pub mod predict;
pub mod predictions;
pub mod proto;
pub mod runtime;
pub mod score;
pub mod verify;
