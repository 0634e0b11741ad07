//! Sequence building: token ids → model inputs.

pub mod classify;
pub mod mask;
pub mod pretrain;
pub mod words;

pub use classify::{ClassifySequences, Truncation};
pub use pretrain::PretrainSequences;
