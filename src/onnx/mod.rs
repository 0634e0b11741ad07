//! BERT out through ONNX: export ([`export`]), ONNX Runtime ([`runtime`]), the export's check
//! against candle ([`verify`]), batch evaluation on shards ([`eval`]), the
//! comparison of two models on the same rows ([`gate`]) and raw-text prediction
//! through a pipeline ([`predict`]).

pub mod eval;
pub mod export;
pub mod gate;
pub mod graph;
pub mod predict;
pub mod proto;
pub mod rows;
pub mod runtime;
pub mod verify;
