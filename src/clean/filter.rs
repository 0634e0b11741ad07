//! `filter`: rejects documents by length and noise, each with a reason.

use serde::{Deserialize, Serialize};

use super::{Step, Verdict};
use crate::document::Document;

/// Reject documents outside length bounds or above a noise threshold. Every bound is optional.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Filter {
    /// Fewest whitespace-separated words a document may have.
    pub min_words: Option<usize>,
    /// Most words a document may have.
    pub max_words: Option<usize>,
    /// Fewest characters (Unicode scalar values).
    pub min_chars: Option<usize>,
    /// Most characters.
    pub max_chars: Option<usize>,
    /// Highest `noise_score` kept. Needs a `noise_score` step before this one.
    pub max_noise: Option<f32>,
    /// Keep documents whose `noise_score` is at most this quantile (0–1) of the scores of all
    /// documents that reach this step, computed exactly in a first pass (linear interpolation,
    /// as numpy's default). `0.95` drops the noisiest 5%.
    pub max_noise_quantile: Option<f64>,
    /// The score threshold `max_noise_quantile` resolved to; set by the executor's first pass.
    #[serde(skip)]
    pub resolved_quantile_threshold: Option<f32>,
}

impl Step for Filter {
    fn apply(&self, doc: &mut Document) -> Verdict {
        let needs_words = self.min_words.is_some() || self.max_words.is_some();
        if needs_words {
            let words = count_words(&doc.text);
            if let Some(min) = self.min_words.filter(|&m| words < m) {
                return Verdict::Reject(format!("min_words:{words}<{min}"));
            }
            if let Some(max) = self.max_words.filter(|&m| words > m) {
                return Verdict::Reject(format!("max_words:{words}>{max}"));
            }
        }
        if self.min_chars.is_some() || self.max_chars.is_some() {
            let chars = doc.text.chars().count();
            if let Some(min) = self.min_chars.filter(|&m| chars < m) {
                return Verdict::Reject(format!("min_chars:{chars}<{min}"));
            }
            if let Some(max) = self.max_chars.filter(|&m| chars > m) {
                return Verdict::Reject(format!("max_chars:{chars}>{max}"));
            }
        }
        let score = doc.noise.map(|n| n.score);
        if let (Some(max), Some(score)) = (self.max_noise, score) {
            if score > max {
                return Verdict::Reject(format!("max_noise:{score:.3}>{max}"));
            }
        }
        if let (Some(max), Some(score)) = (self.resolved_quantile_threshold, score) {
            if score > max {
                return Verdict::Reject(format!("max_noise_quantile:{score:.3}>{max:.3}"));
            }
        }
        Verdict::Keep
    }
}

/// Whitespace-separated words, as `split_whitespace().count()`, with an ASCII fast path that
/// counts word starts 64 bytes at a time with bit masks.
pub fn count_words(text: &str) -> usize {
    if !text.is_ascii() {
        return text.split_whitespace().count();
    }
    let ws = |x: u8| (x == b' ') | (x.wrapping_sub(b'\t') < 5);
    let mut words = 0usize;
    let mut carry = 1u64; // the start of the text counts as whitespace
    let mut count = |mask: u64, carry: &mut u64| {
        words += (!mask & ((mask << 1) | *carry)).count_ones() as usize;
        *carry = mask >> 63;
    };
    let chunks = text.as_bytes().chunks_exact(64);
    let rest = chunks.remainder();
    for chunk in chunks {
        let mut mask = 0u64;
        for (i, &x) in chunk.iter().enumerate() {
            mask |= (ws(x) as u64) << i;
        }
        count(mask, &mut carry);
    }
    if !rest.is_empty() {
        let mut mask = !0u64 << rest.len(); // padding counts as whitespace
        for (i, &x) in rest.iter().enumerate() {
            mask |= (ws(x) as u64) << i;
        }
        count(mask, &mut carry);
    }
    words
}

/// Exact quantile with linear interpolation between closest ranks (numpy's default, `R-7`).
/// `sorted` must be ascending and non-empty.
pub fn quantile_linear(sorted: &[f32], q: f64) -> f32 {
    let h = (sorted.len() - 1) as f64 * q.clamp(0.0, 1.0);
    let lo = h.floor() as usize;
    let hi = h.ceil() as usize;
    let frac = h - lo as f64;
    (sorted[lo] as f64 + (sorted[hi] as f64 - sorted[lo] as f64) * frac) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clean::noise::NoiseComponents;

    fn doc(text: &str, noise: Option<f32>) -> Document {
        Document {
            text: text.into(),
            noise: noise.map(|score| NoiseComponents { score, ..Default::default() }),
            ..Default::default()
        }
    }

    #[test]
    fn table() {
        let f = Filter {
            min_words: Some(3),
            max_words: Some(6),
            min_chars: Some(10),
            max_chars: Some(40),
            max_noise: Some(15.0),
            ..Default::default()
        };
        let cases: &[(&str, Option<f32>, Option<&str>)] = &[
            ("too short", None, Some("min_words:2<3")),
            ("one two three four five six seven", None, Some("max_words:7>6")),
            ("a b c d", None, Some("min_chars:7<10")),
            ("abcdefghij abcdefghij abcdefghij abcdefghij", None, Some("max_chars:43>40")),
            ("a fine review here", Some(16.5), Some("max_noise:16.500>15")),
            ("a fine review here", Some(15.0), None),
            ("a fine review here", None, None),
        ];
        for (text, noise, want) in cases {
            let got = match f.apply(&mut doc(text, *noise)) {
                Verdict::Keep => None,
                Verdict::Reject(r) => Some(r),
            };
            assert_eq!(got.as_deref(), *want, "text {text:?}");
        }
    }

    #[test]
    fn word_count_fast_path_agrees() {
        let long = "word  ".repeat(40) + "tail\tend ";
        for t in [
            long.as_str(),
            &long[1..],
            &long[..127],
            &long[..128],
            &long[..129],
            "",
            "a\u{b}b",
            "  a  b\tc\n",
            "one",
            "non-ascii café  x",
            " \u{3000}wide\u{3000}space ",
        ] {
            assert_eq!(count_words(t), t.split_whitespace().count(), "{t:?}");
        }
    }

    #[test]
    fn quantile_matches_numpy_linear() {
        // numpy.quantile([1, 2, 3, 4], [0, .25, .5, .9, 1]) = [1, 1.75, 2.5, 3.7, 4]
        let v = [1.0, 2.0, 3.0, 4.0];
        for (q, want) in [(0.0, 1.0), (0.25, 1.75), (0.5, 2.5), (0.9, 3.7), (1.0, 4.0)] {
            assert!((quantile_linear(&v, q) - want).abs() < 1e-6, "q={q}");
        }
        assert_eq!(quantile_linear(&[7.0], 0.3), 7.0);
    }

    #[test]
    fn resolved_quantile_threshold_rejects_above() {
        let f = Filter { max_noise_quantile: Some(0.9), resolved_quantile_threshold: Some(3.0), ..Default::default() };
        assert!(
            matches!(f.apply(&mut doc("x", Some(3.5))), Verdict::Reject(r) if r.starts_with("max_noise_quantile:"))
        );
        assert!(matches!(f.apply(&mut doc("x", Some(3.0))), Verdict::Keep));
    }
}
