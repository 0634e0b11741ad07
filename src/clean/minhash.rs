//! MinHash signatures over word n-gram shingles, LSH bands to find candidate pairs, and the
//! signature's estimate of their Jaccard similarity to verify them — the near-duplicate
//! machinery of corpus tools such as datatrove and NeMo Curator, with their defaults: 5-word
//! shingles, 112 hashes in 14 bands of 8 rows, a verified match at estimated Jaccard ≥ 0.8.
//!
//! Why those numbers: with `b` bands of `r` rows a pair of similarity `s` becomes a candidate
//! with probability `1 − (1 − s^r)^b`; for 14 × 8 that is 0.92 at s = 0.8, 0.99 at 0.9 and 0.03
//! at 0.5, the curve's midpoint `(1/b)^(1/r)` ≈ 0.72 sits just under the threshold, so few true
//! pairs are missed and few far ones cost a verification. 112 hashes estimate s with a standard
//! error of `√(s(1−s)/112)` ≈ 0.04 at 0.8.
//!
//! Words are the text's alphanumeric runs, lowercased; a text shorter than the shingle is one
//! shingle of all its words. Signatures hold 32-bit values (`(a·x + b) mod (2⁶¹ − 1)`, the low
//! 32 bits, as `datasketch` does): 448 bytes per document.

use std::collections::HashMap;

use crate::rng::Rng;

/// The Mersenne prime 2⁶¹ − 1 the permutations work modulo.
const MERSENNE_61: u64 = (1 << 61) - 1;

/// How near-duplicates are found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MinHashParams {
    /// Words per shingle.
    pub ngram: usize,
    pub bands: usize,
    /// Hashes per band.
    pub rows: usize,
    /// The estimated Jaccard similarity at which a candidate is a near-duplicate.
    pub threshold: f64,
    pub seed: u64,
}

impl Default for MinHashParams {
    fn default() -> Self {
        MinHashParams { ngram: 5, bands: 14, rows: 8, threshold: 0.8, seed: 0x6d69_6e68_6173_6821 }
    }
}

impl MinHashParams {
    pub fn hashes(&self) -> usize {
        self.bands * self.rows
    }

    pub fn check(&self) -> Result<(), String> {
        if self.ngram == 0 || self.bands == 0 || self.rows == 0 {
            return Err("ngram, bands and rows must be at least 1".into());
        }
        if self.hashes() > 1024 {
            return Err(format!("{} hashes per document is too many (at most 1024)", self.hashes()));
        }
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(format!("threshold must be in (0, 1] (got {})", self.threshold));
        }
        Ok(())
    }
}

/// A document's signature: the minimum of each permutation over its shingles.
pub type Signature = Vec<u32>;

/// Computes signatures and band keys for one set of parameters.
#[derive(Debug, Clone)]
pub struct MinHasher {
    pub params: MinHashParams,
    a: Vec<u64>,
    b: Vec<u64>,
}

impl MinHasher {
    pub fn new(params: MinHashParams) -> MinHasher {
        let mut rng = Rng::for_key(params.seed, &[params.hashes() as u64]);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..params.hashes() {
            a.push(1 + rng.next_u64() % (MERSENNE_61 - 1));
            b.push(rng.next_u64() % MERSENNE_61);
        }
        MinHasher { params, a, b }
    }

    /// The signature of `text`; `None` when it has no words.
    pub fn signature(&self, text: &str) -> Option<Signature> {
        let words = word_hashes(text);
        if words.is_empty() {
            return None;
        }
        let n = self.params.ngram.min(words.len());
        let mut sig = vec![u32::MAX; self.a.len()];
        for w in words.windows(n) {
            let x = shingle_hash(w) & 0xFFFF_FFFF;
            for (i, s) in sig.iter_mut().enumerate() {
                let h = mul_add_mod(self.a[i], x, self.b[i]) as u32;
                if h < *s {
                    *s = h;
                }
            }
        }
        Some(sig)
    }

    /// One key per band: the band's index and its rows, hashed.
    pub fn band_keys<'a>(&'a self, sig: &'a [u32]) -> impl Iterator<Item = u64> + 'a {
        sig.chunks(self.params.rows).enumerate().map(|(band, rows)| {
            let mut h = mix(band as u64 ^ 0xb5ad_4ece_da1c_e2a9);
            for &r in rows {
                h = mix(h ^ r as u64);
            }
            h
        })
    }
}

/// The signature's estimate of the Jaccard similarity: the share of positions that agree.
pub fn similarity(a: &[u32], b: &[u32]) -> f64 {
    let same = a.iter().zip(b).filter(|(x, y)| x == y).count();
    same as f64 / a.len().max(1) as f64
}

/// The exact Jaccard similarity of two texts' shingle sets (what the signature estimates).
pub fn jaccard(a: &str, b: &str, ngram: usize) -> f64 {
    let set = |t: &str| -> std::collections::HashSet<u64> {
        let w = word_hashes(t);
        let n = ngram.min(w.len()).max(1);
        w.windows(n).map(shingle_hash).collect()
    };
    let (sa, sb) = (set(a), set(b));
    if sa.is_empty() && sb.is_empty() {
        return 1.0;
    }
    sa.intersection(&sb).count() as f64 / sa.union(&sb).count() as f64
}

/// A key of a text's words (lowercased, punctuation and spacing ignored): equal keys are exact
/// duplicates up to case and punctuation.
pub fn words_key(text: &str) -> u64 {
    let mut h = 0x243f_6a88_85a3_08d3u64;
    for w in word_hashes(text) {
        h = mix(h ^ w);
    }
    h
}

/// Signatures of a reference corpus in LSH buckets, to ask which of its documents a new one
/// nearly repeats.
#[derive(Debug, Default)]
pub struct LshIndex {
    buckets: HashMap<u64, Vec<u32>>,
    signatures: Vec<Signature>,
    exact: HashMap<u64, u32>,
}

/// A document's nearest indexed match.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Match {
    /// The index of the matched document, in insertion order.
    pub index: u32,
    /// Estimated Jaccard similarity (1.0 for an exact match).
    pub similarity: f64,
    /// The words are the same (up to case and punctuation).
    pub exact: bool,
}

impl LshIndex {
    pub fn len(&self) -> usize {
        self.signatures.len()
    }

    pub fn is_empty(&self) -> bool {
        self.signatures.is_empty()
    }

    /// Adds a document (its signature, `None` for a text without words, and its words key);
    /// returns its index.
    pub fn insert(&mut self, hasher: &MinHasher, sig: Option<Signature>, key: u64) -> u32 {
        let index = self.signatures.len() as u32;
        self.exact.entry(key).or_insert(index);
        if let Some(sig) = &sig {
            for k in hasher.band_keys(sig) {
                self.buckets.entry(k).or_default().push(index);
            }
        }
        self.signatures.push(sig.unwrap_or_default());
        index
    }

    /// The best match of a document at or above the threshold: an exact one first, else the
    /// most similar verified candidate (the earliest indexed among equals).
    pub fn best_match(&self, hasher: &MinHasher, sig: Option<&[u32]>, key: u64) -> Option<Match> {
        if let Some(&index) = self.exact.get(&key) {
            return Some(Match { index, similarity: 1.0, exact: true });
        }
        let sig = sig?;
        let mut best: Option<Match> = None;
        let mut seen = std::collections::HashSet::new();
        for k in hasher.band_keys(sig) {
            for &i in self.buckets.get(&k).into_iter().flatten() {
                if !seen.insert(i) {
                    continue;
                }
                let s = similarity(sig, &self.signatures[i as usize]);
                let better = best.is_none_or(|b| s > b.similarity || (s == b.similarity && i < b.index));
                if s >= hasher.params.threshold && better {
                    best = Some(Match { index: i, similarity: s, exact: false });
                }
            }
        }
        best
    }
}

/// Hashes of the text's words, lowercased.
fn word_hashes(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut h = FNV_OFFSET;
    let mut in_word = false;
    for c in text.chars() {
        if c.is_alphanumeric() {
            for l in c.to_lowercase() {
                let mut buf = [0u8; 4];
                for &byte in l.encode_utf8(&mut buf).as_bytes() {
                    h = (h ^ byte as u64).wrapping_mul(FNV_PRIME);
                }
            }
            in_word = true;
        } else if in_word {
            out.push(mix(h));
            h = FNV_OFFSET;
            in_word = false;
        }
    }
    if in_word {
        out.push(mix(h));
    }
    out
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn shingle_hash(words: &[u64]) -> u64 {
    words.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, &w| mix(h.rotate_left(17) ^ w))
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `(a·x + b) mod (2⁶¹ − 1)`.
fn mul_add_mod(a: u64, x: u64, b: u64) -> u64 {
    let v = (a as u128) * (x as u128) + b as u128;
    let lo = (v as u64) & MERSENNE_61;
    let hi = (v >> 61) as u64;
    let mut r = lo + (hi & MERSENNE_61) + (hi >> 61);
    while r >= MERSENNE_61 {
        r -= MERSENNE_61;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` words of a seeded vocabulary of 2,000.
    fn text(seed: u64, n: usize) -> Vec<String> {
        let mut r = Rng::for_key(seed, &[]);
        (0..n).map(|_| format!("w{}", r.below(2000))).collect()
    }

    #[test]
    fn mersenne_arithmetic_matches_u128_modulo() {
        let mut r = Rng::for_key(1, &[]);
        for _ in 0..10_000 {
            let (a, x, b) = (r.next_u64() % MERSENNE_61, r.next_u64(), r.next_u64() % MERSENNE_61);
            let want = ((a as u128 * x as u128 + b as u128) % MERSENNE_61 as u128) as u64;
            assert_eq!(mul_add_mod(a, x, b), want);
        }
    }

    #[test]
    fn words_ignore_case_and_punctuation_and_the_estimate_tracks_exact_jaccard() {
        assert_eq!(words_key("The film, the FILM!"), words_key("the film the film"));
        assert_ne!(words_key("the film"), words_key("the films"));
        let h = MinHasher::new(MinHashParams::default());
        assert!(h.signature(" ... !!").is_none());
        assert_eq!(h.signature("one two").unwrap().len(), 112);
        // Planted pairs: a 300-word text with k of its words replaced, across similarities.
        let mut worst: f64 = 0.0;
        for (seed, k) in [(1, 0), (2, 3), (3, 8), (4, 15), (5, 30), (6, 60), (7, 120)] {
            let a = text(seed, 300);
            let mut b = a.clone();
            let mut r = Rng::for_key(seed, &[99]);
            for _ in 0..k {
                let i = r.below(300);
                b[i] = format!("x{}", r.below(1_000_000));
            }
            let (a, b) = (a.join(" "), b.join(" "));
            let exact = jaccard(&a, &b, 5);
            let est = similarity(&h.signature(&a).unwrap(), &h.signature(&b).unwrap());
            worst = worst.max((est - exact).abs());
            assert!((est - exact).abs() < 0.15, "k {k}: exact {exact:.3}, estimate {est:.3}");
        }
        assert!(worst > 0.0, "estimates are estimates");
    }

    #[test]
    fn the_index_finds_near_copies_at_the_threshold_and_not_far_below_it() {
        let h = MinHasher::new(MinHashParams::default());
        let mut index = LshIndex::default();
        let originals: Vec<String> = (0..200).map(|s| text(1000 + s, 250).join(" ")).collect();
        for t in &originals {
            index.insert(&h, h.signature(t), words_key(t));
        }
        let (mut near_found, mut far_found) = (0, 0);
        for (i, t) in originals.iter().enumerate() {
            let mut w: Vec<String> = t.split(' ').map(String::from).collect();
            // Near: 2 words changed (Jaccard ≈ 0.92); far: every fourth word changed (≈ 0.2).
            let mut near = w.clone();
            near[50] = "changed".into();
            near[180] = "again".into();
            let near = near.join(" ");
            if let Some(m) = index.best_match(&h, h.signature(&near).as_deref(), words_key(&near)) {
                assert!(!m.exact && m.similarity >= 0.8);
                near_found += (m.index as usize == i) as usize;
            }
            for (j, x) in w.iter_mut().enumerate() {
                if j % 4 == 0 {
                    *x = format!("far{j}");
                }
            }
            let far = w.join(" ");
            far_found += index.best_match(&h, h.signature(&far).as_deref(), words_key(&far)).is_some() as usize;
            // The original itself, recased and repunctuated, is an exact match.
            let same = t.to_uppercase().replace(' ', ", ");
            let m = index.best_match(&h, h.signature(&same).as_deref(), words_key(&same)).unwrap();
            assert_eq!((m.index as usize, m.exact), (i, true));
        }
        assert!(near_found >= 196, "{near_found} of 200 near copies found");
        assert_eq!(far_found, 0, "no far copy matches");
    }
}
