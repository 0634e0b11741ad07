//! The step registry: the [`Step`] trait every stage implements and [`PipelineStep`], the
//! `type:`-tagged list a pipeline YAML names — cleaning, tokenisation and sequence building.
//! It lives beside the executor that runs it, so `clean`, `tokenize` and `sequence` depend on
//! this module and not on each other.

use crate::clean::{Dedup, Filter, HtmlStrip, Lowercase, NoiseScore, Punctuation, UnicodeNormalize};
use crate::document::Document;

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

tagged_enum! {
    /// A step as written in the pipeline YAML (`type: <name>` plus its options).
    pub enum PipelineStep {
        "html_strip" => HtmlStrip(HtmlStrip),
        "unicode_normalize" => UnicodeNormalize(UnicodeNormalize),
        "punctuation" => Punctuation(Punctuation),
        "lowercase" => Lowercase(Lowercase),
        "noise_score" => NoiseScore(NoiseScore),
        "filter" => Filter(Filter),
        "dedup" => Dedup(Dedup),
        "tokenize" => Tokenize(crate::tokenize::Tokenize),
        "classify_sequences" => ClassifySequences(crate::sequence::ClassifySequences),
        "pretrain_sequences" => PretrainSequences(crate::sequence::pretrain::PretrainSequences),
    }
}

impl PipelineStep {
    pub fn as_step(&self) -> &dyn Step {
        match self {
            PipelineStep::HtmlStrip(s) => s,
            PipelineStep::UnicodeNormalize(s) => s,
            PipelineStep::Punctuation(s) => s,
            PipelineStep::Lowercase(s) => s,
            PipelineStep::NoiseScore(s) => s,
            PipelineStep::Filter(s) => s,
            PipelineStep::Dedup(s) => s,
            PipelineStep::Tokenize(s) => s,
            PipelineStep::ClassifySequences(s) => s,
            PipelineStep::PretrainSequences(s) => s,
        }
    }

    /// Paths in the step's options (resolved against the pipeline file's folder).
    pub fn paths_mut(&mut self) -> Vec<(&'static str, &mut std::path::PathBuf)> {
        match self {
            PipelineStep::Tokenize(t) => {
                let mut v = Vec::new();
                if let Some(p) = t.vocab.as_mut() {
                    v.push(("vocab", p));
                }
                if let Some(p) = t.tokenizer.as_mut() {
                    v.push(("tokenizer", p));
                }
                v
            }
            _ => Vec::new(),
        }
    }
}
