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
//! shingle of all its words. A word is hashed 8 bytes per multiply (a bijection for words of
//! up to 8 bytes); a shingle of words `w₀…wₙ₋₁` is `x = hi32(fin(Σ wᵢ·kᵢ))` with odd per-position
//! constants `kᵢ` — order-sensitive, and `n` independent products rather than a chain of `n`
//! mixes. Hash `i` of a shingle is `(aᵢ·x + bᵢ) mod 2³²` with `aᵢ` odd: a permutation of the
//! 32-bit values, as `datasketch` applies `(a·x + b) mod (2⁶¹ − 1)`, but in 32-bit lanes, so
//! the 112 hashes of 8 shingles at a time vectorise (16 lanes with AVX-512). The estimates are
//! checked against exact Jaccard in the tests and against `datasketch` in
//! `benches/near_dedup.sh`. A worker's [`Sketch`] of a document is 504 bytes (the 448-byte
//! signature and 14 band keys, one allocation); [`LshIndex`] keeps 224 bytes of it.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::contract::document::Sketch;
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

/// Computes signatures and band keys for one set of parameters.
#[derive(Debug, Clone)]
pub struct MinHasher {
    pub params: MinHashParams,
    a: Vec<u32>,
    b: Vec<u32>,
    /// Per position in a shingle, the odd multiplier of its word.
    k: Vec<u64>,
}

impl MinHasher {
    pub fn new(params: MinHashParams) -> MinHasher {
        let mut rng = Rng::for_key(params.seed, &[params.hashes() as u64]);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..params.hashes() {
            a.push((rng.next_u64() >> 32) as u32 | 1);
            b.push((rng.next_u64() >> 32) as u32);
        }
        let k = (0..params.ngram as u64).map(|i| mix(0x5348_494e_474c_4553 ^ i) | 1).collect();
        MinHasher { params, a, b, k }
    }

    /// The signature of `text` with its band keys under `salt` (an empty sketch when it has
    /// no words), and its [`words_key`], from one pass over its words. The words go to a
    /// per-thread scratch buffer and the shingles are made and folded a block at a time, so a
    /// document costs one allocation: its sketch.
    pub fn sketch(&self, text: &str, salt: u64) -> (Sketch, u64) {
        SCRATCH.with_borrow_mut(|scratch| {
            word_hashes_into(text, scratch);
            let words = &scratch.words;
            let key = key_of(words);
            if words.is_empty() {
                return (Sketch::default(), key);
            }
            let (hashes, rows) = (self.a.len(), self.params.rows);
            let mut values = Vec::with_capacity(hashes + self.params.bands);
            values.resize(hashes, u32::MAX);
            self.fold_words(words, &mut values);
            let salt = band_salt(salt);
            for band in 0..self.params.bands {
                let key = band_key(&values[band * rows..(band + 1) * rows], band, salt);
                values.push(key);
            }
            (Sketch::new(values, hashes), key)
        })
    }

    /// Folds every shingle of `words` (one of all of them when there are fewer than `ngram`)
    /// into `sig`, with the widest vectors the CPU has.
    fn fold_words(&self, words: &[u64], sig: &mut [u32]) {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") && std::arch::is_x86_feature_detected!("avx512dq") {
            // SAFETY: the CPU has AVX-512 F and DQ, checked just above.
            unsafe { fold_words_avx512(words, &self.k, &self.a, &self.b, sig) };
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2, checked just above.
            unsafe { fold_words_avx2(words, &self.k, &self.a, &self.b, sig) };
            return;
        }
        fold_words(words, &self.k, &self.a, &self.b, sig)
    }
}

/// What [`MinHasher::sketch`] reuses from one document to the next on a thread: the bitmaps, a
/// buffer for lowercasing words beyond ASCII, the word hashes.
#[derive(Default)]
struct Scratch {
    bits: Vec<u64>,
    high: Vec<u64>,
    lowered: Vec<u8>,
    words: Vec<u64>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// Shingles made and folded per block of this many.
const SHINGLE_BLOCK: usize = 64;

/// The shingle values of `words`, [`SHINGLE_BLOCK`] at a time into a buffer on the stack,
/// each block folded into `sig`. A full block is computed position by position over the
/// block (`acc[j] += w[j + i]·kᵢ`), which vectorises (64-bit products with AVX-512 DQ).
#[inline(always)]
fn fold_words(words: &[u64], k: &[u64], a: &[u32], b: &[u32], sig: &mut [u32]) {
    let n = k.len().min(words.len());
    let k = &k[..n];
    let shingles = words.len() - n + 1;
    let mut xs = [0u32; SHINGLE_BLOCK];
    let mut j = 0;
    while j < shingles {
        let m = SHINGLE_BLOCK.min(shingles - j);
        if m == SHINGLE_BLOCK {
            let mut acc = [0u64; SHINGLE_BLOCK];
            for (i, &ki) in k.iter().enumerate() {
                let w: &[u64; SHINGLE_BLOCK] = words[j + i..j + i + SHINGLE_BLOCK].try_into().expect("a full block");
                for (h, &w) in acc.iter_mut().zip(w) {
                    *h = h.wrapping_add(w.wrapping_mul(ki));
                }
            }
            for (x, &h) in xs.iter_mut().zip(&acc) {
                *x = finish_shingle(h);
            }
        } else {
            for (q, x) in xs[..m].iter_mut().enumerate() {
                *x = shingle_value(&words[j + q..j + q + n], k);
            }
        }
        fold(&xs[..m], a, b, sig);
        j += m;
    }
}

/// [`fold_words`] compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
unsafe fn fold_words_avx512(words: &[u64], k: &[u64], a: &[u32], b: &[u32], sig: &mut [u32]) {
    fold_words(words, k, a, b, sig)
}

/// [`fold_words`] compiled for AVX2 (the build targets baseline x86-64; chosen at run time).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fold_words_avx2(words: &[u64], k: &[u64], a: &[u32], b: &[u32], sig: &mut [u32]) {
    fold_words(words, k, a, b, sig)
}

/// A shingle's value: `Σ wᵢ·kᵢ` (independent products), one multiply of finalising, the high
/// 32 bits.
#[inline(always)]
fn shingle_value(words: &[u64], k: &[u64]) -> u32 {
    finish_shingle(words.iter().zip(k).fold(0u64, |h, (&w, &k)| h.wrapping_add(w.wrapping_mul(k))))
}

#[inline(always)]
fn finish_shingle(h: u64) -> u32 {
    ((h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 32) as u32
}

/// Folds every shingle value into `sig`, eight shingles per pass over the hashes (the
/// signature and the coefficients are loaded once for eight; four, then one at a time, for
/// the rest). One lane per hash and no branches, so the compiler vectorises the inner loop: 4
/// lanes of 32-bit products with SSE4's `pmulld`, 8 with AVX2, 16 with AVX-512.
#[inline(always)]
fn fold(xs: &[u32], a: &[u32], b: &[u32], sig: &mut [u32]) {
    let mut octs = xs.chunks_exact(8);
    for q in &mut octs {
        let q: &[u32; 8] = q.try_into().expect("chunks of 8");
        for ((s, &a), &b) in sig.iter_mut().zip(a).zip(b) {
            let h = q.map(|x| a.wrapping_mul(x).wrapping_add(b));
            let m = h[0].min(h[1]).min(h[2].min(h[3])).min(h[4].min(h[5]).min(h[6].min(h[7])));
            *s = (*s).min(m);
        }
    }
    let mut quads = octs.remainder().chunks_exact(4);
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

/// One key per band of `sig` (`rows` hashes each): the band's index, `salt` and its rows,
/// hashed, cut to 32 bits. Documents share a bucket when a band of theirs is equal under the
/// same salt (or, once in 2³² pairs of bands, when two keys collide: one more candidate,
/// still verified).
pub fn band_keys(sig: &[u32], rows: usize, salt: u64) -> Vec<u32> {
    let salt = band_salt(salt);
    sig.chunks(rows).enumerate().map(|(band, rows)| band_key(rows, band, salt)).collect()
}

fn band_salt(salt: u64) -> u64 {
    mix(salt ^ 0xb5ad_4ece_da1c_e2a9)
}

/// A band's key: a sum of independent products (no chain of mixes), finalised once.
#[inline]
fn band_key(rows: &[u32], band: usize, salt: u64) -> u32 {
    let h = rows.iter().enumerate().fold(salt ^ (band as u64) << 48, |h, (i, &r)| {
        h.wrapping_add((r as u64 | (i as u64) << 32).wrapping_mul(0x9e37_79b9_7f4a_7c15 ^ (i as u64) << 1))
    });
    mix(h) as u32
}

/// The exact Jaccard similarity of two texts' shingle sets (what the signature estimates).
pub fn jaccard(a: &str, b: &str, ngram: usize) -> f64 {
    let set = |t: &str| -> std::collections::HashSet<u64> {
        let w = word_hashes(t);
        let n = ngram.min(w.len()).max(1);
        w.windows(n).map(|s| s.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, &x| mix(h.rotate_left(17) ^ x))).collect()
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

/// A polynomial over the word hashes (order-sensitive), in four interleaved lanes so that the
/// multiply-adds do not wait on each other, finalised with the count.
fn key_of(words: &[u64]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [0x243f_6a88_85a3_08d3u64, 0x1319_8a2e_0370_7344, 0xa409_3822_299f_31d0, 0x082e_fa98_ec4e_6c89];
    let mut quads = words.chunks_exact(4);
    for q in &mut quads {
        for (l, &w) in lanes.iter_mut().zip(q) {
            *l = l.wrapping_mul(K).wrapping_add(w);
        }
    }
    let tail = quads.remainder().iter().fold(words.len() as u64, |h, &w| h.wrapping_mul(K).wrapping_add(w));
    mix(lanes.iter().fold(tail, |h, &l| mix(h ^ l)))
}

/// Signatures in LSH buckets, to ask which indexed document a new one nearly repeats.
///
/// Laid out for size, since it holds every kept document: the signatures in flat blocks,
/// each hash cut to its low 16 bits (b-bit MinHash: two different minima agree on 16 bits with
/// probability 2⁻¹⁶, which moves an estimate by less than 0.002 over 112 hashes), and each
/// bucket as a chain through the documents — a table from a band key to the bucket's latest
/// document, and per document and band the one before it. A document costs 224 bytes of
/// signature, one `u32` per band, and its share of the table (about 0.5 KB in all with the
/// default 14 × 8, measured in docs/pipelines.md). Band keys come with the caller's [`Sketch`]
/// ([`MinHasher::sketch`]), from the pipeline's workers rather than its ordered stage.
#[derive(Debug)]
pub struct LshIndex {
    rows: usize,
    bands: usize,
    threshold: f64,
    heads: Heads,
    /// `next[doc * bands + band]`: the previous document in that band's bucket (`NONE`: none).
    next: Blocks<u32>,
    signatures: Blocks<u16>,
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
            heads: Heads::new(),
            next: Blocks::new(params.bands),
            signatures: Blocks::new(params.hashes()),
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

    /// Adds a document — its sketch (empty for a text without words: it can then only be
    /// matched exactly; band keys computed here when it has none), its words key and its
    /// salt — and returns its index.
    pub fn insert(&mut self, sketch: &Sketch, words: u64, salt: u64) -> u32 {
        let index = self.len;
        self.len = self.len.checked_add(1).expect("fewer than 4 billion indexed documents");
        self.exact.entry(exact_key(words, salt)).or_insert(index);
        let sig = sketch.signature();
        if sig.is_empty() {
            // Never a candidate (no band links); its record keeps the indices aligned.
            self.next.push().fill(NONE);
            self.signatures.push();
            return index;
        }
        assert_eq!(sig.len(), self.rows * self.bands, "a signature of the index's parameters");
        let keys = self.keys_of(sketch, salt);
        self.heads.link(&keys, index, self.next.push());
        for (stored, &h) in self.signatures.push().iter_mut().zip(sig) {
            *stored = h as u16;
        }
        index
    }

    /// The sketch's band keys, computed here when it came without them (read back from a file).
    fn keys_of<'a>(&self, sketch: &'a Sketch, salt: u64) -> std::borrow::Cow<'a, [u32]> {
        let keys: std::borrow::Cow<[u32]> = match sketch.bands() {
            [] => band_keys(sketch.signature(), self.rows, salt).into(),
            keys => keys.into(),
        };
        assert_eq!(keys.len(), self.bands, "one key per band");
        keys
    }

    fn signature(&self, index: u32) -> &[u16] {
        self.signatures.get(index)
    }

    /// The best match of a document at or above the threshold: an exact one first, else the
    /// most similar verified candidate (the earliest indexed among equals).
    pub fn best_match(&self, sketch: &Sketch, words: u64, salt: u64) -> Option<Match> {
        if let Some(&index) = self.exact.get(&exact_key(words, salt)) {
            return Some(Match { index, similarity: 1.0, exact: true });
        }
        let sig = sketch.signature();
        if sig.is_empty() {
            return None;
        }
        let keys = self.keys_of(sketch, salt);
        // Every band's bucket first, in a loop of independent lookups whose cache misses the
        // CPU overlaps; then the chains, nearly always empty.
        let mut heads = BandSlots::new(keys.len());
        for (head, &key) in heads.get().iter_mut().zip(keys.iter()) {
            *head = self.heads.get(key);
        }
        self.best_candidate(sig, heads.get())
    }

    /// The most similar document at or above the threshold (the earliest indexed among
    /// equals) in the buckets whose latest documents are `heads`, one per band.
    fn best_candidate(&self, sig: &[u32], heads: &[u32]) -> Option<Match> {
        let mut best: Option<Match> = None;
        let mut seen: Vec<u32> = Vec::new();
        for (band, &head) in heads.iter().enumerate() {
            let mut i = head;
            while i != NONE {
                if !seen.contains(&i) {
                    seen.push(i);
                    let stored = self.signature(i);
                    let same = sig.iter().zip(stored).filter(|(&x, &y)| x as u16 == y).count();
                    let s = same as f64 / sig.len().max(1) as f64;
                    let better = best.is_none_or(|b| s > b.similarity || (s == b.similarity && i < b.index));
                    if s >= self.threshold && better {
                        best = Some(Match { index: i, similarity: s, exact: false });
                    }
                }
                i = self.next.get(i)[band];
            }
        }
        best
    }
}

/// One `u32` per band, on the stack for up to 32 bands.
struct BandSlots {
    stack: [u32; 32],
    heap: Vec<u32>,
    len: usize,
}

impl BandSlots {
    fn new(len: usize) -> BandSlots {
        let heap = if len > 32 { vec![NONE; len] } else { Vec::new() };
        BandSlots { stack: [NONE; 32], heap, len }
    }

    fn get(&mut self) -> &mut [u32] {
        if self.len > self.stack.len() {
            &mut self.heap
        } else {
            &mut self.stack[..self.len]
        }
    }
}

/// The bucket table: a band key → the bucket's latest document, in 256 tables
/// by the key's top byte. One table of a million entries grows by doubling, each time into
/// fresh memory while the old table is freed — and the first touches of fresh pages were the
/// index's largest cost (`perf`: the kernel clearing pages). 256 small tables grow one at a
/// time, into the blocks the allocator just got back from another's growth.
#[derive(Debug)]
struct Heads(Vec<HashMap<u32, u32, BuildHasherDefault<KeyHasher>>>);

impl Heads {
    fn new() -> Heads {
        Heads((0..256).map(|_| HashMap::default()).collect())
    }

    /// Makes `index` the latest document of `key`'s bucket; returns the one before (`NONE`).
    #[inline]
    fn insert(&mut self, key: u32, index: u32) -> u32 {
        self.0[(key >> 24) as usize].insert(key, index).unwrap_or(NONE)
    }

    #[inline]
    fn get(&self, key: u32) -> u32 {
        self.0[(key >> 24) as usize].get(&key).copied().unwrap_or(NONE)
    }

    /// Makes `index` the latest document of each band's bucket, `links[band]` ← the one before.
    /// Two bands of one document under one key (a 32-bit collision, once in 2³² pairs) share a
    /// bucket: the later band's link continues the earlier one's chain, never pointing back at
    /// the document itself, so every chain runs to strictly earlier documents and ends.
    fn link(&mut self, keys: &[u32], index: u32, links: &mut [u32]) {
        for (band, &key) in keys.iter().enumerate() {
            let before = self.insert(key, index);
            links[band] = if before == index {
                links[keys.iter().position(|&k| k == key).expect("an earlier band of this key")]
            } else {
                before
            };
        }
    }
}

/// One fixed-size record per document, in blocks of 4,096 records: growing never copies or
/// reallocates what is stored (a doubling `Vec` touches about twice the memory it keeps, and
/// first touches of fresh pages are much of the index's cost).
#[derive(Debug)]
struct Blocks<T> {
    width: usize,
    blocks: Vec<Vec<T>>,
}

const BLOCK_RECORDS: usize = 4096;

impl<T: Copy + Default> Blocks<T> {
    fn new(width: usize) -> Self {
        Blocks { width, blocks: Vec::new() }
    }

    /// A new record, zeroed (`T::default()`), to fill in.
    fn push(&mut self) -> &mut [T] {
        let cap = self.width * BLOCK_RECORDS;
        if self.blocks.last().is_none_or(|b| b.len() == cap) {
            self.blocks.push(Vec::with_capacity(cap));
        }
        let block = self.blocks.last_mut().expect("a block with room");
        let start = block.len();
        block.resize(start + self.width, T::default());
        &mut block[start..]
    }

    fn get(&self, index: u32) -> &[T] {
        let (b, r) = (index as usize / BLOCK_RECORDS, index as usize % BLOCK_RECORDS);
        &self.blocks[b][r * self.width..(r + 1) * self.width]
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

    /// A 32-bit key cut from a splitmix output: spread over all 64 bits (hashbrown takes its
    /// tags from the top ones).
    fn write_u32(&mut self, v: u32) {
        self.0 = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Hashes of the text's words (alphanumeric runs), lowercased: [`word_hashes_into`] with
/// buffers of its own.
fn word_hashes(text: &str) -> Vec<u64> {
    let mut scratch = Scratch::default();
    word_hashes_into(text, &mut scratch);
    scratch.words
}

/// `scratch.words` ← the hashes of the text's words (alphanumeric runs), lowercased. A bitmap
/// of the bytes that may belong to a word — ASCII letters and digits, and every byte beyond
/// ASCII — is built 64 bytes at a time (vectorised, no branches), and its runs of set bits are
/// walked with bit scans, so a word costs no mispredicted byte-loop exit. A run of ASCII bytes
/// is a word, hashed 8 bytes per step and lowercased with one OR (`| 0x20` lowercases ASCII
/// letters and leaves digits as they are); a run with other characters is split into words
/// character by character and each lowercased into a buffer and hashed the same way, so both
/// paths give an ASCII word the same hash.
fn word_hashes_into(text: &str, scratch: &mut Scratch) {
    let Scratch { bits, high, lowered, words: out } = scratch;
    bitmap_into(text.as_bytes(), bits, high);
    out.clear();
    let mut word = |start: usize, end: usize| {
        if !any_bit(high, start, end) {
            out.push(hash_word(text.as_bytes(), start, end, 0x2020_2020_2020_2020));
        } else {
            beyond_ascii(text, start, end, lowered, out);
        }
    };
    // Runs start and end where a bit differs from the one before it: those edges are taken
    // off each word of the bitmap with one bit scan each, starts and ends in turn.
    let (mut carry, mut start) = (0u64, None);
    // One more, empty word after the bitmap ends a run that reaches the text's end (the last
    // chunk is padded with bytes of no word, so a run ends inside it otherwise), and keeps
    // `word` to one call site, inlined.
    for (i, &w) in bits.iter().chain([&0]).enumerate() {
        let mut edges = w ^ (w << 1 | carry);
        carry = w >> 63;
        while edges != 0 {
            let at = i * 64 + edges.trailing_zeros() as usize;
            edges &= edges - 1;
            match start.take() {
                None => start = Some(at),
                Some(s) => word(s, at),
            }
        }
    }
}

/// The words of a run that holds characters beyond ASCII (all their bytes are in the run):
/// split at characters that are not alphanumeric, each lowercased into `lowered` and hashed.
#[inline(never)]
fn beyond_ascii(text: &str, start: usize, end: usize, lowered: &mut Vec<u8>, out: &mut Vec<u64>) {
    let table = two_byte_lowercase();
    lowered.clear();
    let mut buf = [0u8; 4];
    for c in text[start..end].chars() {
        match lowercase_of(c, table) {
            Lowered::One(l) => lowered.extend_from_slice(l.encode_utf8(&mut buf).as_bytes()),
            Lowered::Std => {
                for l in c.to_lowercase() {
                    lowered.extend_from_slice(l.encode_utf8(&mut buf).as_bytes());
                }
            }
            Lowered::NotAlphanumeric => {
                if !lowered.is_empty() {
                    out.push(hash_word(lowered, 0, lowered.len(), 0));
                    lowered.clear();
                }
            }
        }
    }
    if !lowered.is_empty() {
        out.push(hash_word(lowered, 0, lowered.len(), 0));
    }
}

/// What a character of a word becomes: `char::is_alphanumeric` and `char::to_lowercase`, with
/// the characters below U+0800 from a table made of those two functions once.
#[derive(Debug, PartialEq)]
enum Lowered {
    NotAlphanumeric,
    One(char),
    /// Alphanumeric, lowercased by `to_lowercase` itself.
    Std,
}

#[inline(always)]
fn lowercase_of(c: char, table: &[u16; TWO_BYTE]) -> Lowered {
    match c as u32 {
        0..0x80 if c.is_ascii_alphanumeric() => Lowered::One(c.to_ascii_lowercase()),
        0..0x80 => Lowered::NotAlphanumeric,
        cp @ 0x80..0x800 => match table[cp as usize - 0x80] {
            NOT_ALPHANUMERIC => Lowered::NotAlphanumeric,
            ASK_STD => Lowered::Std,
            l => Lowered::One(char::from_u32(l as u32).expect("a table of chars")),
        },
        // General Punctuation (spaces, dashes, quotes, ellipsis): none alphanumeric (tested).
        0x2000..0x2070 => Lowered::NotAlphanumeric,
        _ if c.is_alphanumeric() => Lowered::Std,
        _ => Lowered::NotAlphanumeric,
    }
}

/// The characters of two UTF-8 bytes, U+0080 to U+07FF (Latin-1 and Latin Extended, the
/// combining marks NFKD leaves, Greek, Cyrillic, Hebrew, Arabic).
const TWO_BYTE: usize = 0x800 - 0x80;
const NOT_ALPHANUMERIC: u16 = 0;
const ASK_STD: u16 = u16::MAX;

/// Per two-byte character: [`NOT_ALPHANUMERIC`], its lowercase when that is one character
/// below U+FFFF, else [`ASK_STD`] — from `char`'s own methods, so they agree by construction.
fn two_byte_lowercase() -> &'static [u16; TWO_BYTE] {
    static TABLE: std::sync::OnceLock<Box<[u16; TWO_BYTE]>> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Box::new([NOT_ALPHANUMERIC; TWO_BYTE]);
        for (i, e) in t.iter_mut().enumerate() {
            let c = char::from_u32(0x80 + i as u32).expect("no surrogates below U+0800");
            if c.is_alphanumeric() {
                let mut l = c.to_lowercase();
                *e = match (l.next(), l.next()) {
                    (Some(one), None) if (one as u32) < ASK_STD as u32 => one as u16,
                    _ => ASK_STD,
                };
            }
        }
        t
    })
}

/// Two bitmaps of `bytes`, bit `i % 64` of word `i / 64` for byte `i`: whether it may belong
/// to a word (an ASCII letter or digit, or beyond ASCII), and whether it is beyond ASCII.
#[cfg(test)]
fn word_bitmap(bytes: &[u8]) -> (Vec<u64>, Vec<u64>) {
    let (mut bits, mut high) = (Vec::new(), Vec::new());
    bitmap_into(bytes, &mut bits, &mut high);
    (bits, high)
}

/// [`word_bitmap`] into `bits` and `high`, replacing what they held.
fn bitmap_into(bytes: &[u8], bits: &mut Vec<u64>, high: &mut Vec<u64>) {
    bits.clear();
    high.clear();
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        unsafe { x86::bitmap_avx2(bytes, bits, high) };
        return;
    }
    for c in bytes.chunks(64) {
        bits.push(c.iter().enumerate().fold(0u64, |m, (j, &b)| m | (is_word_byte(b) as u64) << j));
        high.push(c.iter().enumerate().fold(0u64, |m, (j, &b)| m | ((b >= 0x80) as u64) << j));
    }
}

/// Whether any bit in `[start, end)` is set.
#[inline(always)]
fn any_bit(bits: &[u64], start: usize, end: usize) -> bool {
    let (first, last) = (start / 64, (end - 1) / 64);
    let lo = u64::MAX << (start % 64);
    let hi = u64::MAX >> (63 - (end - 1) % 64);
    if first == last {
        return bits[first] & lo & hi != 0;
    }
    bits[first] & lo != 0 || bits[first + 1..last].iter().any(|&w| w != 0) || bits[last] & hi != 0
}

#[inline(always)]
fn is_word_byte(b: u8) -> bool {
    b >= 0x80 || b.wrapping_sub(b'0') < 10 || (b | 0x20).wrapping_sub(b'a') < 26
}

/// [`word_bitmap`] 32 bytes per step with AVX2 (AVX-512's byte compares would need Rust 1.89,
/// past this crate's minimum): per byte, "beyond ASCII" is its sign bit, a digit is
/// `b − '0' < 10` and a letter `(b | 0x20) − 'a' < 26`, unsigned.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx2")]
    pub unsafe fn bitmap_avx2(bytes: &[u8], bits: &mut Vec<u64>, highs: &mut Vec<u64>) {
        let mut push = |p: *const u8| {
            // SAFETY: `p` is the start of 64 readable bytes (a chunk, or the padded buffer).
            let ((w0, h0), (w1, h1)) = unsafe { (mask32(p), mask32(p.add(32))) };
            bits.push(w0 as u64 | (std::hint::black_box(w1) as u64) << 32);
            highs.push(h0 as u64 | (h1 as u64) << 32);
        };
        let mut chunks = bytes.chunks_exact(64);
        for c in &mut chunks {
            push(c.as_ptr());
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            // Zero bytes belong to no word.
            let mut last = [0u8; 64];
            last[..rest.len()].copy_from_slice(rest);
            push(last.as_ptr());
        }
    }

    /// The word bits and the beyond-ASCII bits of the 32 bytes at `p`; `x < n` unsigned as
    /// `min(x, n − 1) == x`.
    #[target_feature(enable = "avx2")]
    unsafe fn mask32(p: *const u8) -> (u32, u32) {
        // SAFETY: the caller gives 32 readable bytes.
        let v = unsafe { _mm256_loadu_si256(p as *const __m256i) };
        let below = |x: __m256i, n: i8| _mm256_cmpeq_epi8(_mm256_min_epu8(x, _mm256_set1_epi8(n - 1)), x);
        let digit = below(_mm256_sub_epi8(v, _mm256_set1_epi8(b'0' as i8)), 10);
        let letter =
            below(_mm256_sub_epi8(_mm256_or_si256(v, _mm256_set1_epi8(0x20)), _mm256_set1_epi8(b'a' as i8)), 26);
        let high = _mm256_movemask_epi8(v) as u32;
        (high | _mm256_movemask_epi8(_mm256_or_si256(digit, letter)) as u32, high)
    }
}

/// The hash of the word `bytes[start..end]`, 8 bytes per step, each byte OR-ed with `lower`'s
/// (0x20 lowercases an ASCII letter or digit; 0 for bytes lowercased already): one multiply per
/// step, and a final xor-shift. For a word of up to 8 bytes — nearly every word — that is a
/// bijection of its bytes for each length, so two such words never share a hash. The last,
/// partial step loads 8 bytes from the text around it and masks them (no copy, which would
/// stall the load behind the copy's byte stores).
#[inline(always)]
fn hash_word(bytes: &[u8], start: usize, end: usize, lower: u64) -> u64 {
    const K: u64 = 0x9fb2_1c65_1e98_df25;
    let load = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let mut h = FNV_OFFSET ^ ((end - start) as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut at = start;
    while at + 8 < end {
        h = (h ^ (load(at) | lower)).wrapping_mul(K).rotate_left(29);
        at += 8;
    }
    let n = end - at;
    let v = if at + 8 <= bytes.len() {
        load(at)
    } else if bytes.len() >= 8 {
        load(bytes.len() - 8) >> (8 * (at + 8 - bytes.len()))
    } else {
        bytes[at..end].iter().rev().fold(0u64, |v, &b| (v << 8) | b as u64)
    };
    h = (h ^ ((v | lower) & (u64::MAX >> (64 - 8 * n)))).wrapping_mul(K);
    h ^ (h >> 32)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// splitmix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The full 32-bit signature's estimate of the Jaccard similarity (the index compares 16
    /// bits of each): the share of positions that agree.
    fn similarity(a: &[u32], b: &[u32]) -> f64 {
        let same = a.iter().zip(b).filter(|(x, y)| x == y).count();
        same as f64 / a.len().max(1) as f64
    }

    impl MinHasher {
        /// The signature of `text`; `None` when it has no words.
        fn signature(&self, text: &str) -> Option<Vec<u32>> {
            let (sketch, _) = self.sketch(text, 0);
            let sig = sketch.signature();
            (!sig.is_empty()).then(|| sig.to_vec())
        }
    }

    /// `n` words of a seeded vocabulary of 2,000.
    fn text(seed: u64, n: usize) -> Vec<String> {
        let mut r = Rng::for_key(seed, &[]);
        (0..n).map(|_| format!("w{}", r.below(2000))).collect()
    }

    #[test]
    fn words_ignore_case_and_punctuation_and_the_estimate_tracks_exact_jaccard() {
        assert_eq!(words_key("The film, the FILM!"), words_key("the film the film"));
        assert_ne!(words_key("the film"), words_key("the films"));
        // Words beyond ASCII are lowercased as characters; both paths hash alike.
        assert_eq!(words_key("NAÏVE Films, ÉCOLE"), words_key("naïve films école"));
        assert_ne!(words_key("naïve"), words_key("naive"));
        let lower = hash_word(b"abcdefghijk9", 0, 12, 0);
        assert_eq!(hash_word(b"AbCdEfGhIjK9", 0, 12, 0x2020_2020_2020_2020), lower);
        // Wherever the word lies: at the end of a long text, in a short one, inside one.
        assert_eq!(hash_word(b"--------abcdefghijk9", 8, 20, 0), lower);
        assert_eq!(hash_word(b"Ab1", 0, 3, 0x2020_2020_2020_2020), hash_word(b"x ab1 yyyyyyyyyyyy", 2, 5, 0));
        assert_eq!(hash_word(b"x ab1", 2, 5, 0), hash_word(b"ab1", 0, 3, 0));
        assert_eq!(word_hashes("été, 12 Z9").len(), 3);
        // The bitmap walk finds the words a plain character loop finds, across 64-byte blocks,
        // with runs mixing ASCII and other characters ("naïve—Film", "“Quote”").
        let reference = |t: &str| -> Vec<u64> {
            let mut out = Vec::new();
            let mut w = String::new();
            for c in t.chars().chain([' ']) {
                if c.is_alphanumeric() {
                    w.extend(c.to_lowercase());
                } else if !w.is_empty() {
                    out.push(hash_word(w.as_bytes(), 0, w.len(), 0));
                    w.clear();
                }
            }
            out
        };
        let all: Vec<u8> = (0..=255u8).cycle().take(700).collect();
        for n in [0, 1, 31, 32, 33, 63, 64, 65, 127, 700] {
            let map = |f: fn(u8) -> bool| -> Vec<u64> {
                all[..n]
                    .chunks(64)
                    .map(|c| c.iter().enumerate().fold(0u64, |m, (j, &b)| m | (f(b) as u64) << j))
                    .collect()
            };
            let want = (map(is_word_byte), map(|b| b >= 0x80));
            assert_eq!(word_bitmap(&all[..n]), want, "{n} bytes");
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                let (mut bits, mut high) = (Vec::new(), Vec::new());
                // SAFETY: checked just above.
                unsafe { x86::bitmap_avx2(&all[..n], &mut bits, &mut high) };
                assert_eq!((bits, high), want, "AVX2, {n} bytes");
            }
        }
        let mut r = Rng::for_key(5, &[]);
        let pieces = [
            "a",
            "Bc",
            "naïve—Film",
            "“Quote”",
            "x9",
            " ",
            "  ",
            ", ",
            "ÉCOLE",
            "12345678901",
            "日本語",
            "-",
            "\u{a0}",
            "Café\u{301}",
            "İSTANBUL",
            "ΣΟΦΊΑ",
            "Москва́",
            "ǅemal",
            "½²",
            "…",
            "😀",
        ];
        for n in [0, 1, 5, 63, 64, 65, 200, 1000] {
            let t: String = (0..n).map(|_| pieces[r.below(pieces.len())]).collect();
            assert_eq!(word_hashes(&t), reference(&t), "{t:?}");
        }
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

    /// The table of characters below U+0800 and the General Punctuation shortcut say what
    /// `char::is_alphanumeric` and `char::to_lowercase` say, for every character.
    #[test]
    fn the_lowercase_table_agrees_with_char_for_every_character() {
        let table = two_byte_lowercase();
        for c in (0..=char::MAX as u32).filter_map(char::from_u32) {
            match lowercase_of(c, table) {
                Lowered::NotAlphanumeric => assert!(!c.is_alphanumeric(), "{c:?}"),
                Lowered::One(l) => assert!(c.is_alphanumeric() && c.to_lowercase().eq([l]), "{c:?}"),
                Lowered::Std => assert!(c.is_alphanumeric(), "{c:?}"),
            }
        }
        assert_eq!(lowercase_of('É', table), Lowered::One('é'));
        assert_eq!(lowercase_of('\u{130}', table), Lowered::Std, "İ lowercases to two characters");
        assert_eq!(lowercase_of('\u{301}', table), Lowered::NotAlphanumeric, "a combining mark");
    }

    /// The blocked, vectorised fold with the per-thread scratch buffers gives the signature
    /// by its definition — per hash, the minimum of `a·x + b` over every shingle's value — for
    /// texts shorter than a shingle, around the 64-shingle blocks, and after longer texts on
    /// the same thread (nothing of one document left in the scratch for the next).
    #[test]
    fn signatures_equal_their_definition_across_blocks_and_after_other_documents() {
        let h = MinHasher::new(MinHashParams::default());
        let definition = |t: &str| -> Vec<u32> {
            let words = word_hashes(t);
            let n = h.params.ngram.min(words.len());
            let xs: Vec<u32> = words.windows(n).map(|w| shingle_value(w, &h.k)).collect();
            (0..h.a.len())
                .map(|i| xs.iter().map(|&x| h.a[i].wrapping_mul(x).wrapping_add(h.b[i])).min().unwrap())
                .collect()
        };
        let mut longest = 0;
        for (seed, words) in [1, 2, 4, 5, 6, 63, 64, 67, 68, 69, 131, 400, 3, 68].into_iter().enumerate() {
            let t = text(seed as u64 + 50, words).join(" ");
            let (sketch, key) = h.sketch(&t, 7);
            assert_eq!(sketch.signature(), definition(&t), "{words} words, after {longest}");
            assert_eq!(sketch.bands(), band_keys(&definition(&t), h.params.rows, 7));
            assert_eq!(key, words_key(&t));
            longest = longest.max(words);
        }
        assert_eq!(h.sketch(" ?! ", 7).0, Sketch::default());
    }

    /// Two bands of one document whose keys collide (once in 2³² pairs) share one bucket
    /// entry: the document is linked into it once, so a walk of either band's chain ends.
    #[test]
    fn two_bands_of_one_document_under_one_key_leave_its_bucket_a_chain() {
        let h = MinHasher::new(MinHashParams::default());
        let t = text(3, 100).join(" ");
        let sig = h.signature(&t).unwrap();
        let mut keys = band_keys(&sig, h.params.rows, 0);
        keys[9] = keys[2];
        let sketch = Sketch::new([sig.clone(), keys].concat(), sig.len());
        let mut index = LshIndex::new(&h.params);
        let other = text(4, 100).join(" ");
        index.insert(&h.sketch(&other, 0).0, words_key(&other), 0);
        assert_eq!(index.insert(&sketch, words_key(&t), 0), 1);
        assert!(!index.next.get(1).contains(&1), "a band's link points back at its own document");
        // Not the same words, so the buckets are walked (band 9's among them).
        let m = index.best_match(&sketch, words_key(&t) ^ 1, 0).expect("itself");
        assert_eq!((m.index, m.similarity, m.exact), (1, 1.0, false));
    }

    #[test]
    fn records_past_the_first_block_and_documents_without_words_keep_their_places() {
        let h = MinHasher::new(MinHashParams::default());
        let mut index = LshIndex::new(&h.params);
        let texts: Vec<String> =
            (0..5000).map(|i| if i % 7 == 3 { "?!".to_string() } else { text(i, 120).join(" ") }).collect();
        for (i, t) in texts.iter().enumerate() {
            assert_eq!(index.insert(&h.sketch(t, 0).0, words_key(t), 0), i as u32);
        }
        for i in [0, 4095, 4096, 4097, 4500, 4999] {
            let mut w: Vec<&str> = texts[i].split(' ').collect();
            w[20] = "changed";
            let near = w.join(" ");
            let m = index.best_match(&h.sketch(&near, 0).0, words_key(&near), 0).expect("found");
            assert_eq!((m.index, m.exact), (i as u32, false), "copy of {i}");
            assert!(m.similarity >= 0.8 && m.similarity < 1.0);
        }
        let m = index.best_match(&Sketch::default(), words_key("?!"), 0).unwrap();
        assert_eq!((m.index, m.exact), (3, true));
    }

    #[test]
    fn the_index_finds_near_copies_at_the_threshold_and_not_far_below_it() {
        let h = MinHasher::new(MinHashParams::default());
        let mut index = LshIndex::new(&h.params);
        let originals: Vec<String> = (0..200).map(|s| text(1000 + s, 250).join(" ")).collect();
        // Indexed as a scan file gives them back (no band keys: the index computes them), and
        // looked up with a worker's keys: both must put a document in the same buckets.
        for t in &originals {
            index.insert(&h.sketch(t, 0).0.without_bands(), words_key(t), 0);
        }
        let (mut near_found, mut far_found) = (0, 0);
        for (i, t) in originals.iter().enumerate() {
            let mut w: Vec<String> = t.split(' ').map(String::from).collect();
            // Near: 2 words changed (Jaccard ≈ 0.92); far: every fourth word changed (≈ 0.2).
            let mut near = w.clone();
            near[50] = "changed".into();
            near[180] = "again".into();
            let near = near.join(" ");
            if let Some(m) = index.best_match(&h.sketch(&near, 0).0, words_key(&near), 0) {
                assert!(!m.exact && m.similarity >= 0.8);
                near_found += (m.index as usize == i) as usize;
            }
            for (j, x) in w.iter_mut().enumerate() {
                if j % 4 == 0 {
                    *x = format!("far{j}");
                }
            }
            let far = w.join(" ");
            far_found += index.best_match(&h.sketch(&far, 0).0, words_key(&far), 0).is_some() as usize;
            // The original itself, recased and repunctuated, is an exact match.
            let same = t.to_uppercase().replace(' ', ", ");
            let m = index.best_match(&h.sketch(&same, 0).0, words_key(&same), 0).unwrap();
            assert_eq!((m.index as usize, m.exact), (i, true));
        }
        assert!(near_found >= 196, "{near_found} of 200 near copies found");
        assert_eq!(far_found, 0, "no far copy matches");
    }
}
