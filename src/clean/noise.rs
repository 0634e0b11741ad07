//! `noise_score`: per-document noise components and a weighted composite.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::{Step, Verdict};
use crate::document::Document;

/// Score how noisy a document is. Each component is kept as its own float32 column; the
/// composite `noise_score` is `w.sent_len_std × std + 100 × Σ w.ratio × ratio`, so the seed's
/// weights (0.4 / 0.3 / 0.3) put typical reviews near 5 and shouting or garbage well past 15.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NoiseScore {
    /// Weight of each component in the composite score.
    pub weights: NoiseWeights,
}

/// Weights of the composite. The seed used the first three; the others default to 0 so the
/// composite stays comparable with it, but are always computed and stored.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NoiseWeights {
    /// Standard deviation of sentence lengths, in words.
    pub sent_len_std: f32,
    /// Punctuation characters / non-space characters.
    pub punct_ratio: f32,
    /// All-caps sentences / sentences.
    pub caps_ratio: f32,
    /// Repeated word trigrams / all word trigrams.
    pub repeat_ratio: f32,
    /// U+FFFD, control characters and mojibake sequences (`Ã©`, `â€`) / characters.
    pub mojibake_ratio: f32,
}

impl Default for NoiseWeights {
    fn default() -> Self {
        NoiseWeights {
            sent_len_std: 0.4,
            punct_ratio: 0.3,
            caps_ratio: 0.3,
            repeat_ratio: 0.0,
            mojibake_ratio: 0.0,
        }
    }
}

/// The measured components and the composite, as stored in the shards.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct NoiseComponents {
    pub score: f32,
    pub sent_len_std: f32,
    pub punct_ratio: f32,
    pub caps_ratio: f32,
    pub repeat_ratio: f32,
    pub mojibake_ratio: f32,
}

impl NoiseComponents {
    /// Shard column names, in the order [`NoiseComponents::values`] returns them.
    pub const COLUMNS: [&'static str; 6] = [
        "noise_score",
        "noise_sent_len_std",
        "noise_punct_ratio",
        "noise_caps_ratio",
        "noise_repeat_ratio",
        "noise_mojibake_ratio",
    ];

    pub fn values(&self) -> [f32; 6] {
        [
            self.score,
            self.sent_len_std,
            self.punct_ratio,
            self.caps_ratio,
            self.repeat_ratio,
            self.mojibake_ratio,
        ]
    }
}

impl Step for NoiseScore {
    fn apply(&self, doc: &mut Document) -> Verdict {
        doc.noise = Some(self.score(&doc.text));
        Verdict::Keep
    }
}

impl NoiseScore {
    pub fn score(&self, text: &str) -> NoiseComponents {
        let (sent_len_std, caps_ratio) = sentence_length_std_and_caps(text);
        let mut c = NoiseComponents {
            sent_len_std,
            caps_ratio,
            punct_ratio: punct_ratio(text),
            repeat_ratio: repeat_ratio(text),
            mojibake_ratio: mojibake_ratio(text),
            score: 0.0,
        };
        let w = &self.weights;
        c.score = w.sent_len_std * c.sent_len_std
            + 100.0
                * (w.punct_ratio * c.punct_ratio
                    + w.caps_ratio * c.caps_ratio
                    + w.repeat_ratio * c.repeat_ratio
                    + w.mojibake_ratio * c.mojibake_ratio);
        c
    }
}

fn is_sentence_end(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '\n' | '…')
}

pub(crate) fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation()
        || matches!(c as u32, 0x2010..=0x2027 | 0x2030..=0x205E | 0x3000..=0x303F | 0xA1 | 0xA7 | 0xAB | 0xB6 | 0xB7 | 0xBB | 0xBF)
}

/// Population standard deviation of words per sentence, and the share of sentences written
/// in capitals (at least three letters, none lower-case).
fn sentence_length_std_and_caps(text: &str) -> (f32, f32) {
    let mut lengths: Vec<u32> = Vec::new();
    let mut caps = 0u32;
    let (mut words, mut in_word, mut upper, mut lower) = (0u32, false, 0u32, 0u32);
    let mut close = |words: &mut u32, upper: &mut u32, lower: &mut u32| {
        if *words > 0 {
            lengths.push(*words);
            if *upper >= 3 && *lower == 0 {
                caps += 1;
            }
        }
        (*words, *upper, *lower) = (0, 0, 0);
    };
    for ch in text.chars() {
        if is_sentence_end(ch) {
            in_word = false;
            close(&mut words, &mut upper, &mut lower);
        } else if ch.is_whitespace() {
            in_word = false;
        } else {
            if !in_word && !is_punct(ch) {
                words += 1;
                in_word = true;
            }
            if ch.is_uppercase() {
                upper += 1;
            } else if ch.is_lowercase() {
                lower += 1;
            }
        }
    }
    close(&mut words, &mut upper, &mut lower);
    let n = lengths.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let mean = lengths.iter().map(|&l| l as f64).sum::<f64>() / n as f64;
    let var = lengths
        .iter()
        .map(|&l| (l as f64 - mean).powi(2))
        .sum::<f64>()
        / n as f64;
    (var.sqrt() as f32, caps as f32 / n as f32)
}

fn punct_ratio(text: &str) -> f32 {
    let (mut punct, mut visible) = (0u32, 0u32);
    for ch in text.chars().filter(|c| !c.is_whitespace()) {
        visible += 1;
        punct += is_punct(ch) as u32;
    }
    if visible == 0 {
        0.0
    } else {
        punct as f32 / visible as f32
    }
}

fn repeat_ratio(text: &str) -> f32 {
    let hashes: Vec<u64> = text.split_whitespace().map(fnv1a).collect();
    if hashes.len() < 3 {
        return 0.0;
    }
    let total = hashes.len() - 2;
    let mut seen = HashSet::with_capacity(total);
    let mut repeats = 0usize;
    for w in hashes.windows(3) {
        let key = w[0].rotate_left(42) ^ w[1].rotate_left(21) ^ w[2];
        if !seen.insert(key) {
            repeats += 1;
        }
    }
    repeats as f32 / total as f32
}

fn fnv1a(word: &str) -> u64 {
    word.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn mojibake_ratio(text: &str) -> f32 {
    let (mut bad, mut total) = (0u32, 0u32);
    let mut prev = '\0';
    for ch in text.chars() {
        total += 1;
        let control = ch.is_control() && !matches!(ch, '\n' | '\t' | '\r');
        // UTF-8 read as Latin-1/cp1252: `Ã` + a continuation-range char, or `â€`.
        let sequence =
            (prev == 'Ã' && ('\u{80}'..='\u{BF}').contains(&ch)) || (prev == 'â' && ch == '€');
        if ch == '\u{FFFD}' || control {
            bad += 1;
        } else if sequence {
            bad += 2;
        }
        prev = ch;
    }
    if total == 0 {
        0.0
    } else {
        (bad as f32 / total as f32).min(1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(t: &str) -> NoiseComponents {
        NoiseScore::default().score(t)
    }

    #[test]
    fn components_on_known_text() {
        // Sentences of 2 and 4 words: mean 3, population std 1.
        let c = score("Good film. I liked it all");
        assert!((c.sent_len_std - 1.0).abs() < 1e-6, "{c:?}");
        assert_eq!(c.caps_ratio, 0.0);
        // 1 punctuation char out of 20 visible characters.
        assert!((c.punct_ratio - 1.0 / 20.0).abs() < 1e-6, "{c:?}");
        let want = 0.4 * 1.0 + 100.0 * 0.3 * (1.0 / 20.0);
        assert!((c.score - want).abs() < 1e-4, "{c:?}");
    }

    #[test]
    fn shouting_scores_high() {
        let calm = score("This was a fine film. The acting was good. I would watch it again.");
        let loud = score("THIS WAS THE WORST FILM EVER! I HATED IT! NEVER AGAIN!");
        assert_eq!(loud.caps_ratio, 1.0);
        assert!(
            loud.score > 15.0 && calm.score < 10.0,
            "calm {calm:?} loud {loud:?}"
        );
    }

    #[test]
    fn repeats_and_mojibake_are_measured() {
        let c = score("buy now buy now buy now buy now");
        assert!(c.repeat_ratio > 0.6, "{c:?}");
        let m = score("cafÃ© â€œniceâ€\u{FFFD}");
        assert!(m.mojibake_ratio > 0.3, "{m:?}");
        assert_eq!(score("plain words here").mojibake_ratio, 0.0);
    }

    #[test]
    fn empty_and_single_sentence_are_zero_std() {
        assert_eq!(score("").score, 0.0);
        assert_eq!(score("one sentence only").sent_len_std, 0.0);
    }

    #[test]
    fn weights_apply() {
        let s = NoiseScore {
            weights: NoiseWeights {
                sent_len_std: 0.0,
                punct_ratio: 0.0,
                caps_ratio: 0.0,
                repeat_ratio: 1.0,
                mojibake_ratio: 0.0,
            },
        };
        let c = s.score("a b c a b c");
        assert!((c.score - 100.0 * c.repeat_ratio).abs() < 1e-4);
    }
}
