//! Masked-language-model masking, BERT style: 15% of the non-special tokens are chosen
//! (optionally whole words at a time); of those, 80% become [MASK], 10% a random token, 10%
//! stay. A pure function of `(row, seed, epoch, index)`: static masking in the pipeline and
//! dynamic masking in the trainer call the same code and agree exactly.

use serde::{Deserialize, Serialize};

use super::words::Words;
use crate::rng::Rng;

/// How to mask; everything a trainer needs to repeat the pipeline's masking.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MaskSpec {
    /// Share of maskable (non-special) tokens to predict.
    pub masked_lm_prob: f64,
    /// At most this many predictions per row.
    pub max_predictions_per_seq: usize,
    /// Choose whole words (the tokenizer's words, [`Words`]) rather than single tokens.
    pub whole_word_mask: bool,
    pub mask_id: u32,
    /// Never masked, never chosen as a random replacement.
    pub special_ids: Vec<u32>,
    pub vocab_size: u32,
    /// Where the tokenizer's words start (needed for whole-word masking).
    #[serde(skip)]
    pub words: Words,
}

/// What the masking did to one row.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Masked {
    /// The row with the chosen positions replaced.
    pub input_ids: Vec<u32>,
    /// Chosen positions, ascending.
    pub positions: Vec<u32>,
    /// The original ids at those positions (the labels).
    pub labels: Vec<u32>,
    /// How the chosen tokens were treated: [MASK], random, kept.
    pub replaced_mask: u32,
    pub replaced_random: u32,
    pub kept: u32,
}

impl MaskSpec {
    fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    /// Whether the token at `i` continues the word of the token before it.
    fn continues(&self, row: &[u32], i: usize) -> bool {
        self.words.continues(row, i)
    }

    /// Masks `row` deterministically for `(seed, epoch, index)`.
    pub fn mask(&self, row: &[u32], seed: u64, epoch: u64, index: u64) -> Masked {
        let mut rng = Rng::for_key(seed, &[0x4d41_534b, epoch, index]);
        // Candidate groups as (first index, length): single tokens, or whole words (a token
        // and the tokens continuing it; a special token ends a word).
        let mut groups: Vec<(u32, u32)> = Vec::with_capacity(row.len());
        for (i, &id) in row.iter().enumerate() {
            if self.is_special(id) {
                continue;
            }
            let extends = self.whole_word_mask
                && self.continues(row, i)
                && groups.last().is_some_and(|&(s, l)| (s + l) as usize == i);
            match groups.last_mut() {
                Some((_, len)) if extends => *len += 1,
                _ => groups.push((i as u32, 1)),
            }
        }
        let candidates: usize = groups.iter().map(|&(_, l)| l as usize).sum();
        // Stochastic rounding keeps the expected share exactly `masked_lm_prob`; Google's
        // round() biases it by up to half a token per row (15.2% on 125-token rows).
        let exact = candidates as f64 * self.masked_lm_prob;
        let target = exact.floor() as usize + (rng.f64() < exact.fract()) as usize;
        let target = target.min(self.max_predictions_per_seq);
        let target = if candidates > 0 { target.max(1) } else { 0 };
        // Fisher–Yates shuffle of the groups, then take groups while they fit.
        for i in (1..groups.len()).rev() {
            let j = rng.below(i + 1);
            groups.swap(i, j);
        }
        let mut chosen: Vec<usize> = Vec::with_capacity(target);
        for &(start, len) in &groups {
            if chosen.len() >= target {
                break;
            }
            if chosen.len() + len as usize > target {
                continue;
            }
            chosen.extend(start as usize..(start + len) as usize);
        }
        chosen.sort_unstable();
        let mut out = Masked { input_ids: row.to_vec(), ..Default::default() };
        for &pos in &chosen {
            let roll = rng.f64();
            let replacement = if roll < 0.8 {
                out.replaced_mask += 1;
                self.mask_id
            } else if roll < 0.9 {
                out.replaced_random += 1;
                self.random_token(&mut rng)
            } else {
                out.kept += 1;
                row[pos]
            };
            out.input_ids[pos] = replacement;
            out.positions.push(pos as u32);
            out.labels.push(row[pos]);
        }
        out
    }

    fn random_token(&self, rng: &mut Rng) -> u32 {
        loop {
            let id = rng.below(self.vocab_size as usize) as u32;
            if !self.is_special(id) {
                return id;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLS: u32 = 101;
    const SEP: u32 = 102;

    fn spec(whole_word: bool) -> MaskSpec {
        // ids ≥ 20000 are `##` continuations in this toy vocabulary.
        MaskSpec {
            masked_lm_prob: 0.15,
            max_predictions_per_seq: 20,
            whole_word_mask: whole_word,
            mask_id: 103,
            special_ids: vec![0, 100, CLS, SEP, 103],
            vocab_size: 30522,
            words: Words::continuation_prefix((0..30522u32).map(|i| (if i >= 20000 { "##x" } else { "x" }, i)), "##"),
        }
    }

    /// Rows like pretraining rows: [CLS] A [SEP] B [SEP], 128 tokens, ~30% continuations.
    fn rows(n: usize) -> Vec<Vec<u32>> {
        let mut rng = Rng(7);
        (0..n)
            .map(|_| {
                let mut r = vec![CLS];
                for i in 1..127 {
                    r.push(if i == 60 {
                        SEP
                    } else if rng.chance(0.3) {
                        20000 + rng.below(10000) as u32
                    } else {
                        1000 + rng.below(19000) as u32
                    });
                }
                r.push(SEP);
                r
            })
            .collect()
    }

    #[test]
    fn fractions_over_a_million_tokens() {
        for whole_word in [false, true] {
            let s = spec(whole_word);
            let (mut candidates, mut masked, mut m, mut r, mut k) = (0usize, 0usize, 0u32, 0u32, 0u32);
            for (i, row) in rows(8000).iter().enumerate() {
                let out = s.mask(row, 42, 0, i as u64);
                candidates += row.iter().filter(|&&t| !s.is_special(t)).count();
                masked += out.positions.len();
                (m, r, k) = (m + out.replaced_mask, r + out.replaced_random, k + out.kept);
                for &p in &out.positions {
                    assert!(!s.is_special(row[p as usize]), "a special token was masked");
                }
            }
            assert!(candidates >= 1_000_000, "{candidates}");
            let frac = masked as f64 / candidates as f64;
            assert!((frac - 0.15).abs() <= 0.002, "whole_word {whole_word}: masked fraction {frac}");
            let total = (m + r + k) as f64;
            for (share, want) in [(m as f64 / total, 0.8), (r as f64 / total, 0.1), (k as f64 / total, 0.1)] {
                assert!((share - want).abs() <= 0.005, "whole_word {whole_word}: {share} vs {want}");
            }
        }
    }

    #[test]
    fn whole_word_masking_takes_whole_words_only() {
        let s = spec(true);
        for (i, row) in rows(2000).iter().enumerate() {
            let out = s.mask(row, 1, 0, i as u64);
            let chosen: std::collections::HashSet<u32> = out.positions.iter().copied().collect();
            for &p in &out.positions {
                let p = p as usize;
                // the word's continuation after it is chosen too…
                if p + 1 < row.len() && s.continues(row, p + 1) && !s.is_special(row[p + 1]) {
                    assert!(chosen.contains(&(p as u32 + 1)), "row {i}: word cut after {p}");
                }
                // …and so is its start before it.
                if s.continues(row, p) && !s.is_special(row[p - 1]) {
                    assert!(chosen.contains(&(p as u32 - 1)), "row {i}: word cut before {p}");
                }
            }
        }
    }

    #[test]
    fn deterministic_per_key_and_different_across_epochs() {
        let s = spec(false);
        let row = &rows(1)[0];
        assert_eq!(s.mask(row, 5, 0, 9), s.mask(row, 5, 0, 9));
        assert_ne!(s.mask(row, 5, 0, 9).positions, s.mask(row, 5, 1, 9).positions);
        let out = s.mask(row, 5, 0, 9);
        assert!(out.positions.len() <= s.max_predictions_per_seq);
        for (p, l) in out.positions.iter().zip(&out.labels) {
            assert_eq!(row[*p as usize], *l);
        }
    }
}
