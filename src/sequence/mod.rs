//! Sequence building: token ids → model inputs.

pub mod classify;
pub mod mask;
pub mod pretrain;
pub mod sentences;

pub use classify::{ClassifySequences, Truncation};
