//! Decisions that need the whole corpus before the first document is written: the score at a
//! `max_noise_quantile` filter's quantile (a first pass through the steps before it).
//!
//! They live with the executor, not in the steps, because a step sees one document at a time
//! and knows nothing of the source, the threads or a task array; the executor owns all three,
//! and a task of an array takes the same figures from the scan phase ([`super::tasks`])
//! instead of computing them. Dedup's rule — which fingerprint was seen first — stays beside the
//! step in `clean::dedup` ([`crate::clean::dedup::DedupIndex`]); here only its input order is
//! kept, by [`super::parallel`]'s ordered consumer.

use anyhow::Result;

use super::parallel::{self, CorpusPart, Outcome};
use crate::config::PipelineStep;
use crate::contract::progress::{Progress, Total};

/// Resolves each filter's `max_noise_quantile` to a score with a first pass over the corpus,
/// through the steps before that filter.
pub(crate) fn resolve_noise_quantiles(
    source: &crate::source::Source,
    seed: u64,
    steps: &mut [PipelineStep],
    threads: usize,
    quiet: bool,
) -> Result<()> {
    for i in 0..steps.len() {
        let PipelineStep::Filter(f) = &steps[i] else {
            continue;
        };
        let Some(q) = f.max_noise_quantile else {
            continue;
        };
        let scores = noise_scores(CorpusPart::whole(source, seed, &steps[..i]), &steps[..i], threads, quiet)?;
        if let PipelineStep::Filter(f) = &mut steps[i] {
            f.resolved_quantile_threshold = Some(quantile_threshold(scores, q));
        }
    }
    Ok(())
}

/// The first pass of a `max_noise_quantile` filter: the noise score of every document the
/// `steps` before it keep (0 for one that was not scored).
pub(crate) fn noise_scores(input: CorpusPart, steps: &[PipelineStep], threads: usize, quiet: bool) -> Result<Vec<f32>> {
    let progress = Progress::new(quiet, "noise quantile pass");
    let mut scores: Vec<f32> = Vec::new();
    let set_total = |t: Total| progress.set_total(t);
    parallel::process(input, steps, threads, &set_total, |outcome| {
        progress.advance(outcome.input_bytes(), 1);
        if let Outcome::Kept(doc) = outcome {
            scores.push(doc.noise.map_or(0.0, |n| n.score));
        }
        Ok(())
    })?;
    progress.finish();
    Ok(scores)
}

/// The score at quantile `q` of `scores` (in any order); nothing is cut when there are none.
pub(crate) fn quantile_threshold(mut scores: Vec<f32>, q: f64) -> f32 {
    scores.sort_by(f32::total_cmp);
    if scores.is_empty() {
        f32::INFINITY
    } else {
        crate::clean::filter::quantile_linear(&scores, q)
    }
}
