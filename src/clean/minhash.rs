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
//! shingle of all its words. Each shingle is a 32-bit value `x`, and hash `i` is
//! Dietzfelbinger's multiply-add-shift `(aᵢ·x + bᵢ) >> 32` over 64-bit words (a 2-universal
//! family onto 32 bits, as good for MinHash as `datasketch`'s `(a·x + b) mod (2⁶¹ − 1)` and
//! several times faster: no 128-bit products, so the 112 lanes vectorise). Signatures are
//! 448 bytes per document.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::rng::Rng;

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
    a: Vec<u32>,
    b: Vec<u32>,
}

impl MinHasher {
    pub fn new(params: MinHashParams) -> MinHasher {
        let mut rng = Rng::for_key(params.seed, &[params.hashes() as u64]);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..params.hashes() {
            a.push((rng.next_u64() >> 32) as u32 | 1);
            b.push((rng.next_u64() >> 32) as u32);
        }
        MinHasher { params, a, b }
    }

    /// The signature of `text`; `None` when it has no words.
    pub fn signature(&self, text: &str) -> Option<Signature> {
        self.signature_of(&word_hashes(text))
    }

    /// The signature and the [`words_key`] of `text`, from one pass over its words.
    pub fn sign(&self, text: &str) -> (Option<Signature>, u64) {
        let words = word_hashes(text);
        (self.signature_of(&words), key_of(&words))
    }

    fn signature_of(&self, words: &[u64]) -> Option<Signature> {
        if words.is_empty() {
            return None;
        }
        let n = self.params.ngram.min(words.len());
        let mut sig = vec![u32::MAX; self.a.len()];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512 F, checked just above.
            unsafe { fold_avx512(words, n, &self.a, &self.b, &mut sig) };
            return Some(sig);
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { fold_avx2(words, n, &self.a, &self.b, &mut sig) };
            return Some(sig);
        }
        fold(words, n, &self.a, &self.b, &mut sig);
        Some(sig)
    }
}

/// Folds every shingle of `words` into `sig`, four shingles per pass over the hashes (the
/// signature and the coefficients are loaded once for four). One lane per hash and no
/// branches, so the compiler vectorises the inner loop: 4 lanes of 32-bit products with
/// SSE4/AVX2's `pmulld`… 8 with AVX2, 16 with AVX-512.
#[inline(always)]
fn fold(words: &[u64], n: usize, a: &[u32], b: &[u32], sig: &mut [u32]) {
    let xs: Vec<u32> = words.windows(n).map(|w| shingle_hash(w) as u32).collect();
    let mut quads = xs.chunks_exact(4);
    for q in &mut quads {
        let (x0, x1, x2, x3) = (q[0], q[1], q[2], q[3]);
        for ((s, &a), &b) in sig.iter_mut().zip(a).zip(b) {
            let h0 = a.wrapping_mul(x0).wrapping_add(b);
            let h1 = a.wrapping_mul(x1).wrapping_add(b);
            let h2 = a.wrapping_mul(x2).wrapping_add(b);
            let h3 = a.wrapping_mul(x3).wrapping_add(b);
            *s = (*s).min(h0.min(h1).min(h2.min(h3)));
        }
    }
    for &x in quads.remainder() {
        for ((s, &a), &b) in sig.iter_mut().zip(a).zip(b) {
            *s = (*s).min(a.wrapping_mul(x).wrapping_add(b));
        }
    }
}

/// [`fold`] compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn fold_avx512(words: &[u64], n: usize, a: &[u32], b: &[u32], sig: &mut [u32]) {
    fold(words, n, a, b, sig)
}

/// [`fold`] compiled for AVX2 (the build targets baseline x86-64; chosen at run time).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fold_avx2(words: &[u64], n: usize, a: &[u32], b: &[u32], sig: &mut [u32]) {
    fold(words, n, a, b, sig)
}

/// One key per band of `sig` (`rows` hashes each): the band's index, `salt` and its rows,
/// hashed. Documents share a bucket when a band of theirs is equal under the same salt.
pub fn band_keys(sig: &[u32], rows: usize, salt: u64) -> impl Iterator<Item = u64> + '_ {
    sig.chunks(rows).enumerate().map(move |(band, rows)| {
        let mut h = mix(band as u64 ^ 0xb5ad_4ece_da1c_e2a9 ^ salt.rotate_left(32));
        for &r in rows {
            h = mix(h ^ r as u64);
        }
        h
    })
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
    key_of(&word_hashes(text))
}

fn key_of(words: &[u64]) -> u64 {
    words.iter().fold(0x243f_6a88_85a3_08d3u64, |h, &w| mix(h ^ w))
}

/// Signatures in LSH buckets, to ask which indexed document a new one nearly repeats.
///
/// Laid out for size, since it holds every kept document: the signatures in one flat array
/// (4 bytes per hash), and each bucket as a chain through the documents — a table from band key
/// to the bucket's latest document, and per document and band the one before it — so a
/// document costs its signature, one `u32` per band, and about 16 bytes per band of table
/// (about 0.8 KB with the default 14 × 8, measured in the README).
#[derive(Debug)]
pub struct LshIndex {
    rows: usize,
    bands: usize,
    threshold: f64,
    heads: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    /// `next[doc * bands + band]`: the previous document in that band's bucket (`NONE`: none).
    next: Vec<u32>,
    signatures: Vec<u32>,
    exact: HashMap<u64, u32, BuildHasherDefault<KeyHasher>>,
    len: u32,
}

const NONE: u32 = u32::MAX;

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
    pub fn new(params: &MinHashParams) -> LshIndex {
        LshIndex {
            rows: params.rows,
            bands: params.bands,
            threshold: params.threshold,
            heads: HashMap::default(),
            next: Vec::new(),
            signatures: Vec::new(),
            exact: HashMap::default(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a document — its signature (`None` for a text without words: it can then only be
    /// matched exactly), its words key and its salt — and returns its index.
    pub fn insert(&mut self, sig: Option<&[u32]>, words: u64, salt: u64) -> u32 {
        let index = self.len;
        self.len = self.len.checked_add(1).expect("fewer than 4 billion indexed documents");
        self.exact.entry(exact_key(words, salt)).or_insert(index);
        let hashes = self.rows * self.bands;
        match sig {
            Some(sig) => {
                assert_eq!(sig.len(), hashes, "a signature of the index's parameters");
                for key in band_keys(sig, self.rows, salt) {
                    let prev = self.heads.insert(key, index).unwrap_or(NONE);
                    self.next.push(prev);
                }
                self.signatures.extend_from_slice(sig);
            }
            None => {
                self.next.extend(std::iter::repeat_n(NONE, self.bands));
                self.signatures.extend(std::iter::repeat_n(0, hashes));
            }
        }
        index
    }

    fn signature(&self, index: u32) -> &[u32] {
        let n = self.rows * self.bands;
        &self.signatures[index as usize * n..(index as usize + 1) * n]
    }

    /// The best match of a document at or above the threshold: an exact one first, else the
    /// most similar verified candidate (the earliest indexed among equals).
    pub fn best_match(&self, sig: Option<&[u32]>, words: u64, salt: u64) -> Option<Match> {
        if let Some(&index) = self.exact.get(&exact_key(words, salt)) {
            return Some(Match { index, similarity: 1.0, exact: true });
        }
        let sig = sig?;
        let mut best: Option<Match> = None;
        let mut seen: Vec<u32> = Vec::new();
        for (band, key) in band_keys(sig, self.rows, salt).enumerate() {
            let mut i = self.heads.get(&key).copied().unwrap_or(NONE);
            while i != NONE {
                if !seen.contains(&i) {
                    seen.push(i);
                    let s = similarity(sig, self.signature(i));
                    let better = best.is_none_or(|b| s > b.similarity || (s == b.similarity && i < b.index));
                    if s >= self.threshold && better {
                        best = Some(Match { index: i, similarity: s, exact: false });
                    }
                }
                i = self.next[i as usize * self.bands + band];
            }
        }
        best
    }
}

fn exact_key(words: u64, salt: u64) -> u64 {
    mix(words ^ salt.rotate_left(17))
}

/// Band and words keys are splitmix outputs already: their low bits are a good hash.
#[derive(Default)]
pub struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().take(8) {
            self.0 = (self.0 << 8) | b as u64;
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// Hashes of the text's words (alphanumeric runs), lowercased. Bytes are read as they come,
/// ASCII without decoding; a word's bytes are packed 8 at a time into one word of state, mixed
/// once per 8 bytes rather than once per byte.
fn word_hashes(text: &str) -> Vec<u64> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / 5);
    let mut w = WordHash::default();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b < 0x80 {
            match ASCII_WORD[b as usize] {
                0 => w.end(&mut out),
                l => w.push(l),
            }
            i += 1;
        } else {
            let c = text[i..].chars().next().expect("a character starts here");
            i += c.len_utf8();
            if c.is_alphanumeric() {
                for l in c.to_lowercase() {
                    let mut buf = [0u8; 4];
                    for &byte in l.encode_utf8(&mut buf).as_bytes() {
                        w.push(byte);
                    }
                }
            } else {
                w.end(&mut out);
            }
        }
    }
    w.end(&mut out);
    out
}

/// Per ASCII byte: its lowercase form when it belongs to a word, 0 when it separates words.
const ASCII_WORD: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            t[b] = c.to_ascii_lowercase();
        }
        b += 1;
    }
    t
};

/// One word's hash as its bytes arrive.
#[derive(Default)]
struct WordHash {
    h: u64,
    acc: u64,
    len: u64,
}

impl WordHash {
    #[inline(always)]
    fn push(&mut self, b: u8) {
        self.acc = (self.acc << 8) | b as u64;
        self.len += 1;
        if self.len % 8 == 0 {
            self.h = mix(self.h ^ self.acc ^ FNV_OFFSET);
            self.acc = 0;
        }
    }

    #[inline(always)]
    fn end(&mut self, out: &mut Vec<u64>) {
        if self.len > 0 {
            out.push(mix(self.h ^ self.acc ^ self.len.rotate_right(8)));
            *self = WordHash::default();
        }
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn shingle_hash(words: &[u64]) -> u64 {
    words.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, &w| mix(h.rotate_left(17) ^ w))
}

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
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
        let mut index = LshIndex::new(&h.params);
        let originals: Vec<String> = (0..200).map(|s| text(1000 + s, 250).join(" ")).collect();
        for t in &originals {
            index.insert(h.signature(t).as_deref(), words_key(t), 0);
        }
        let (mut near_found, mut far_found) = (0, 0);
        for (i, t) in originals.iter().enumerate() {
            let mut w: Vec<String> = t.split(' ').map(String::from).collect();
            // Near: 2 words changed (Jaccard ≈ 0.92); far: every fourth word changed (≈ 0.2).
            let mut near = w.clone();
            near[50] = "changed".into();
            near[180] = "again".into();
            let near = near.join(" ");
            if let Some(m) = index.best_match(h.signature(&near).as_deref(), words_key(&near), 0) {
                assert!(!m.exact && m.similarity >= 0.8);
                near_found += (m.index as usize == i) as usize;
            }
            for (j, x) in w.iter_mut().enumerate() {
                if j % 4 == 0 {
                    *x = format!("far{j}");
                }
            }
            let far = w.join(" ");
            far_found += index.best_match(h.signature(&far).as_deref(), words_key(&far), 0).is_some() as usize;
            // The original itself, recased and repunctuated, is an exact match.
            let same = t.to_uppercase().replace(' ', ", ");
            let m = index.best_match(h.signature(&same).as_deref(), words_key(&same), 0).unwrap();
            assert_eq!((m.index as usize, m.exact), (i, true));
        }
        assert!(near_found >= 196, "{near_found} of 200 near copies found");
        assert_eq!(far_found, 0, "no far copy matches");
    }
}
