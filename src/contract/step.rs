//! The [`Step`] trait every document stage implements, and its [`Verdict`].

use super::document::Document;

/// What a step decided about a document.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Keep,
    /// `key` or `key:detail`.
    Reject(String),
}

/// One stage of document processing. Steps run on worker threads, one document at a time,
/// and must be deterministic.
pub trait Step: Send + Sync {
    fn apply(&self, doc: &mut Document) -> Verdict;
}
