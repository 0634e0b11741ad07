//! `filter`: rejects documents by length and noise, each with a reason.

use serde::{Deserialize, Serialize};

use crate::contract::document::Document;
use crate::contract::{Step, Verdict};

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
            let chars = count_chars(&doc.text);
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

/// Unicode scalar values in `text` (Python's `len`), as `chars().count()`: every byte that is
/// not a UTF-8 continuation byte starts a character.
pub fn count_chars(text: &str) -> usize {
    text.len() - text.bytes().filter(|&b| (b as i8) < -0x40).count()
}

/// Whitespace-separated words, as `split_whitespace().count()`, 64 bytes at a time with bit
/// masks. Every multi-byte whitespace character (U+0085, U+00A0, U+1680, U+2000–U+205F, U+3000)
/// starts with byte C2, E1, E2 or E3; a block without those bytes is exact on the mask path
/// (other non-ASCII bytes are never whitespace), and only a block that has one is walked char
/// by char. Accented reviews stay on the fast path.
pub fn count_words(text: &str) -> usize {
    let bytes = text.as_bytes();
    let ws = |x: u8| (x == b' ') | (x.wrapping_sub(b'\t') < 5);
    let ws_lead = |x: u8| (x == 0xC2) | (x.wrapping_sub(0xE1) < 3);
    let mut words = 0usize;
    let mut prev_ws = true; // the start of the text counts as whitespace
    let mut i = 0usize;
    while i < bytes.len() {
        let end = (i + 64).min(bytes.len());
        let block = &bytes[i..end];
        let mask = if let Ok(full) = <&[u8; 64]>::try_from(block) {
            let (mask, leads) = block_masks(full);
            (!leads).then_some(mask)
        } else if !block.iter().any(|&x| ws_lead(x)) {
            // The short last block; bits past its end count as whitespace.
            let mut mask = !0u64 << block.len();
            for (k, &x) in block.iter().enumerate() {
                mask |= (ws(x) as u64) << k;
            }
            Some(mask)
        } else {
            None
        };
        if let Some(mask) = mask {
            words += (!mask & ((mask << 1) | prev_ws as u64)).count_ones() as usize;
            prev_ws = (mask >> (block.len() - 1)) & 1 == 1;
            i = end;
            continue;
        }
        // Char by char to the end of the block, finishing a character that straddles it. The
        // block may start inside a character the mask path left (never a whitespace one).
        while i < end {
            let b = bytes[i];
            let (is_ws, len) = if b < 0x80 {
                (ws(b), 1)
            } else if b & 0xC0 == 0x80 {
                (false, 1)
            } else {
                let c = text[i..].chars().next().expect("a lead byte starts a char");
                (c.is_whitespace(), c.len_utf8())
            };
            words += (prev_ws & !is_ws) as usize;
            prev_ws = is_ws;
            i += len;
        }
    }
    words
}

/// For 64 bytes: bit k set when byte k is ASCII whitespace (space, \\t \\n \\v \\f \\r), and
/// whether any byte is C2, E1, E2 or E3 (a possible multi-byte whitespace character).
#[cfg(target_arch = "x86_64")]
fn block_masks(b: &[u8; 64]) -> (u64, bool) {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline; loads are unaligned and stay inside `b`.
    unsafe {
        let space = _mm_set1_epi8(b' ' as i8);
        let tab = _mm_set1_epi8(b'\t' as i8);
        let c2 = _mm_set1_epi8(0xC2u8 as i8);
        let e1 = _mm_set1_epi8(0xE1u8 as i8);
        // `x ≤ n` unsigned, as `min(x, n) == x`.
        let at_most = |x: __m128i, n: i8| _mm_cmpeq_epi8(_mm_min_epu8(x, _mm_set1_epi8(n)), x);
        let mut ws = 0u64;
        let mut leads = 0i32;
        for j in 0..4 {
            let v = _mm_loadu_si128(b.as_ptr().add(16 * j) as *const __m128i);
            let is_ws = _mm_or_si128(_mm_cmpeq_epi8(v, space), at_most(_mm_sub_epi8(v, tab), 4));
            ws |= (_mm_movemask_epi8(is_ws) as u32 as u64) << (16 * j);
            let is_lead = _mm_or_si128(_mm_cmpeq_epi8(v, c2), at_most(_mm_sub_epi8(v, e1), 2));
            leads |= _mm_movemask_epi8(is_lead);
        }
        (ws, leads != 0)
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn block_masks(b: &[u8; 64]) -> (u64, bool) {
    block_masks_scalar(b)
}

#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn block_masks_scalar(b: &[u8; 64]) -> (u64, bool) {
    let mut ws = 0u64;
    let mut leads = false;
    for (k, &x) in b.iter().enumerate() {
        ws |= (((x == b' ') | (x.wrapping_sub(b'\t') < 5)) as u64) << k;
        leads |= (x == 0xC2) | (x.wrapping_sub(0xE1) < 3);
    }
    (ws, leads)
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
    use crate::contract::document::NoiseComponents;

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
    fn counts_chars_like_python_len() {
        assert_eq!(count_chars(""), 0);
        assert_eq!(count_chars("abc"), 3);
        assert_eq!(count_chars("héllo wörld"), 11);
        assert_eq!(count_chars("日本語 🎬"), 5);
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
    fn block_masks_match_the_scalar_definition() {
        let mut rng = crate::rng::Rng(5);
        for round in 0..2000 {
            let mut b = [0u8; 64];
            for x in b.iter_mut() {
                // Half the rounds: any byte; the others: bytes near the interesting values.
                *x = if round % 2 == 0 {
                    rng.next_u64() as u8
                } else {
                    [8, 9, 10, 13, 14, 31, 32, 33, 0xC1, 0xC2, 0xC3, 0xE0, 0xE1, 0xE3, 0xE4, 0x85, 0xA0][rng.below(17)]
                };
            }
            assert_eq!(block_masks(&b), block_masks_scalar(&b), "{b:?}");
        }
    }

    #[test]
    fn word_count_agrees_on_random_mixed_text() {
        // ASCII, accented letters, CJK, emoji and every kind of whitespace, at every alignment.
        let pieces = [
            "a", "word", "é", "日本", "🎬", " ", "  ", "\t", "\n", "\u{b}", "\u{c}", "\r", "\u{85}", "\u{a0}",
            "\u{1680}", "\u{2002}", "\u{200a}", "\u{2028}", "\u{2029}", "\u{202f}", "\u{205f}", "\u{3000}", "\u{200b}",
            "\u{1c}",
        ];
        let mut rng = crate::rng::Rng(11);
        for _ in 0..3000 {
            let n = rng.below(200);
            let t: String = (0..n).map(|_| rng.pick(&pieces)).collect();
            assert_eq!(count_words(&t), t.split_whitespace().count(), "{t:?}");
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
