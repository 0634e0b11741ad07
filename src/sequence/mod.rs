//! Sequence building: token ids → model inputs.

pub mod classify;

pub use classify::{ClassifySequences, Truncation};
