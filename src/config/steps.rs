//! The step registry: [`PipelineStep`], the `type:`-tagged list a pipeline YAML names —
//! cleaning, tokenisation and sequence building. Each variant is the step itself (its YAML
//! struct is what runs), so adding a step is one line here and a module in its room.
//!
//! The steps' code is independent (each imports only `contract`), but a pipeline's steps
//! depend on each other through the document they share: `filter`'s noise limits read what
//! `noise_score` wrote, the sequence steps read `tokenize`'s ids and need its special ids,
//! which `pipeline::prepare_steps` hands them. Validation (`config`) checks that order.

use crate::clean::{Dedup, Filter, HtmlStrip, Lowercase, NearDedup, NoiseScore, Punctuation, UnicodeNormalize};
use crate::contract::Step;
use crate::sequence::{ClassifySequences, PretrainSequences};
use crate::tokenize::Tokenize;

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
        "near_dedup" => NearDedup(NearDedup),
        "tokenize" => Tokenize(Tokenize),
        "classify_sequences" => ClassifySequences(ClassifySequences),
        "pretrain_sequences" => PretrainSequences(PretrainSequences),
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
            PipelineStep::NearDedup(s) => s,
            PipelineStep::Tokenize(s) => s,
            PipelineStep::ClassifySequences(s) => s,
            PipelineStep::PretrainSequences(s) => s,
        }
    }

    pub fn as_tokenize(&self) -> Option<&Tokenize> {
        match self {
            PipelineStep::Tokenize(t) => Some(t),
            _ => None,
        }
    }

    pub fn as_classify(&self) -> Option<&ClassifySequences> {
        match self {
            PipelineStep::ClassifySequences(c) => Some(c),
            _ => None,
        }
    }

    pub fn as_pretrain(&self) -> Option<&PretrainSequences> {
        match self {
            PipelineStep::PretrainSequences(p) => Some(p),
            _ => None,
        }
    }

    /// The longest row of a sequence step (`max_len`), specials included.
    pub fn max_len(&self) -> Option<usize> {
        match self {
            PipelineStep::ClassifySequences(c) => Some(c.max_len),
            PipelineStep::PretrainSequences(p) => Some(p.max_len),
            _ => None,
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
