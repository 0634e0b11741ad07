//! `noise_score`: per-document noise components and a weighted composite.

use serde::{Deserialize, Serialize};

use crate::contract::document::{Document, NoiseComponents};
use crate::contract::{Step, Verdict};

/// Score how noisy a document is. Each component is kept as its own float32 column; the
/// composite `noise_score` is `w.sent_len_std × std + 100 × Σ w.ratio × ratio`, so the seed's
/// weights (0.4 / 0.3 / 0.3) put typical reviews near 5 and shouting or garbage well past 15.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct NoiseScore {
    /// Weight of each component in the composite score.
    pub weights: NoiseWeights,
    /// `bertpipe` (default) or `recipe`: the seed recipe's `calculate_noise_score` exactly.
    pub formula: NoiseFormula,
}

/// How sentences, punctuation and capitals are counted, and how the composite is scaled.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NoiseFormula {
    /// Sentences end at `.!?…` and line breaks; punctuation over visible characters; words
    /// without punctuation-only tokens; capitals need ≥ 3 upper-case letters; ratios × 100.
    #[default]
    Bertpipe,
    /// The seed recipe's numbers: `np.std` of the word counts of `re.split(r"[.!?]+")`
    /// segments, `[^\w\s]` over all characters, `isupper()` segments longer than 5
    /// characters over all segments, weights unscaled (0.4 / 0.3 / 0.3 by default).
    Recipe,
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
        NoiseWeights { sent_len_std: 0.4, punct_ratio: 0.3, caps_ratio: 0.3, repeat_ratio: 0.0, mojibake_ratio: 0.0 }
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
        let m = measure(text);
        if self.formula == NoiseFormula::Recipe {
            let r = recipe(text);
            let mut c = NoiseComponents {
                sent_len_std: r.sent_len_std as f32,
                punct_ratio: r.punct_ratio as f32,
                caps_ratio: r.caps_ratio as f32,
                repeat_ratio: ratio(m.repeated_trigrams, m.trigrams),
                mojibake_ratio: ratio(m.bad, m.chars).min(1.0),
                score: 0.0,
            };
            let w = &self.weights;
            c.score = (w.sent_len_std as f64 * r.sent_len_std
                + w.punct_ratio as f64 * r.punct_ratio
                + w.caps_ratio as f64 * r.caps_ratio
                + w.repeat_ratio as f64 * c.repeat_ratio as f64
                + w.mojibake_ratio as f64 * c.mojibake_ratio as f64) as f32;
            return c;
        }
        let mut c = NoiseComponents {
            sent_len_std: m.sentence_std(),
            caps_ratio: ratio(m.caps_sentences, m.sentences.len() as u32),
            punct_ratio: ratio(m.punct, m.visible),
            repeat_ratio: ratio(m.repeated_trigrams, m.trigrams),
            mojibake_ratio: ratio(m.bad, m.chars).min(1.0),
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

/// The recipe's three components, in f64 as NumPy computes them.
struct Recipe {
    sent_len_std: f64,
    punct_ratio: f64,
    caps_ratio: f64,
}

/// Python's `str.isspace()` for one character: Unicode White_Space, plus the information
/// separators U+001C..U+001F (bidi class B/S) that Rust's `is_whitespace` leaves out.
fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `\w` (str patterns): letters (L*), numbers (N*) and `_`.
fn py_word(c: char) -> bool {
    use unicode_categories::UnicodeCategories;
    c == '_' || c.is_letter() || c.is_number()
}

/// Python's `str.isupper()`: at least one cased character, and none lower- or title-case.
fn py_isupper(s: &str) -> bool {
    use unicode_categories::UnicodeCategories;
    let mut cased = false;
    for c in s.chars() {
        if c.is_lowercase() || c.is_letter_titlecase() {
            return false;
        }
        cased |= c.is_uppercase();
    }
    cased
}

/// The seed recipe's `calculate_noise_score`, term for term:
/// ```python
/// sents = [s for s in re.split(r"[.!?]+", text) if s.strip()]
/// lens = [len(s.split()) for s in sents]
/// std = float(np.std(lens)) if len(lens) > 1 else 0.0
/// pr = len(re.findall(r"[^\w\s]", text)) / len(text) if text else 0.0
/// caps = sum(1 for s in sents if s.isupper() and len(s) > 5) / len(sents) if sents else 0.0
/// ```
fn recipe(text: &str) -> Recipe {
    let sents: Vec<&str> =
        text.split(['.', '!', '?']).filter(|s| !s.is_empty() && !s.chars().all(py_isspace)).collect();
    let lens: Vec<f64> = sents.iter().map(|s| s.split(py_isspace).filter(|w| !w.is_empty()).count() as f64).collect();
    let sent_len_std = if lens.len() > 1 {
        let n = lens.len() as f64;
        // NumPy's std: mean first, then the mean of squared deviations (pairwise sums agree
        // with these plain ones to the last bit for fewer than 8 values, and within 1e-12 past).
        let mean = lens.iter().sum::<f64>() / n;
        (lens.iter().map(|l| (l - mean) * (l - mean)).sum::<f64>() / n).sqrt()
    } else {
        0.0
    };
    let chars = text.chars().count();
    let punct = text.chars().filter(|&c| !py_word(c) && !py_isspace(c)).count();
    let punct_ratio = if chars > 0 { punct as f64 / chars as f64 } else { 0.0 };
    let caps = sents.iter().filter(|s| py_isupper(s) && s.chars().count() > 5).count();
    let caps_ratio = if sents.is_empty() { 0.0 } else { caps as f64 / sents.len() as f64 };
    Recipe { sent_len_std, punct_ratio, caps_ratio }
}

fn ratio(part: u32, whole: u32) -> f32 {
    if whole == 0 {
        0.0
    } else {
        part as f32 / whole as f32
    }
}

pub(crate) fn is_punct(c: char) -> bool {
    c.is_ascii_punctuation()
        || (!c.is_ascii()
            && matches!(c as u32, 0x2010..=0x2027 | 0x2030..=0x205E | 0x3000..=0x303F | 0xA1 | 0xA7 | 0xAB | 0xB6 | 0xB7 | 0xBB | 0xBF))
}

/// Raw counts gathered in one pass over the text.
#[derive(Default)]
struct Measure {
    /// Words per sentence.
    sentences: Vec<u32>,
    caps_sentences: u32,
    punct: u32,
    visible: u32,
    chars: u32,
    /// U+FFFD, control characters, and 2 per mojibake sequence.
    bad: u32,
    trigrams: u32,
    repeated_trigrams: u32,
}

impl Measure {
    /// Population standard deviation of words per sentence.
    fn sentence_std(&self) -> f32 {
        let n = self.sentences.len();
        if n == 0 {
            return 0.0;
        }
        let mean = self.sentences.iter().map(|&l| l as f64).sum::<f64>() / n as f64;
        let var = self.sentences.iter().map(|&l| (l as f64 - mean).powi(2)).sum::<f64>() / n as f64;
        var.sqrt() as f32
    }
}

/// Per-byte classes of ASCII for [`measure`]'s fast path.
const WHITE: u8 = 1;
const SENT_END: u8 = 2;
const PUNCT: u8 = 4;
const UPPER: u8 = 8;
const LOWER: u8 = 16;
/// Control characters other than `\n`, `\t`, `\r`: counted as bad.
const BAD: u8 = 32;
/// ASCII letters and digits: inside a word, they only count.
const ALNUM: u8 = 64;

const ASCII_CLASS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        let mut k = 0;
        if matches!(c, b' ' | b'\t'..=b'\r') {
            k |= WHITE;
        }
        if matches!(c, b'.' | b'!' | b'?' | b'\n') {
            k |= SENT_END;
        }
        if c.is_ascii_punctuation() {
            k |= PUNCT;
        }
        if c.is_ascii_uppercase() {
            k |= UPPER;
        }
        if c.is_ascii_lowercase() {
            k |= LOWER;
        }
        if c.is_ascii_control() && !matches!(c, b'\n' | b'\t' | b'\r') {
            k |= BAD;
        }
        if c.is_ascii_alphanumeric() {
            k |= ALNUM;
        }
        t[b] = k;
        b += 1;
    }
    t
};

/// One pass: sentences (split at `.!?…` and line breaks) with their word counts and whether
/// they are written in capitals (≥ 3 upper-case letters, no lower-case), punctuation among
/// visible characters, repeated whitespace-token trigrams, and mojibake. ASCII bytes take a
/// table lookup; other characters are decoded and classified one by one.
fn measure(text: &str) -> Measure {
    let mut m = Measure::default();
    let (mut words, mut in_word, mut upper, mut lower) = (0u32, false, 0u32, 0u32);
    fn sentence_end(m: &mut Measure, words: &mut u32, upper: &mut u32, lower: &mut u32) {
        if *words > 0 {
            m.sentences.push(*words);
            m.caps_sentences += (*upper >= 3 && *lower == 0) as u32;
        }
        (*words, *upper, *lower) = (0, 0, 0);
    }
    let bytes = text.as_bytes();
    // Tokens are maximal runs of non-white characters; each trigram of consecutive token
    // hashes is one key.
    const NO_TOKEN: usize = usize::MAX;
    let mut token_start = NO_TOKEN;
    let mut window = [0u64; 3];
    let mut tokens = 0u32;
    let mut keys: Vec<u64> = Vec::with_capacity(text.len() / 5);
    let mut end_token = |token: &[u8]| {
        window = [window[1], window[2], token_hash(token)];
        tokens += 1;
        if tokens >= 3 {
            keys.push(window[0].rotate_left(42) ^ window[1].rotate_left(21) ^ window[2]);
        }
    };
    let mut prev = '\0';
    let mut i = 0;
    // Where the next 64-byte block may start: past the first non-ASCII byte of the last one tried.
    let mut next_block = 0;
    while i < bytes.len() {
        // 64 ASCII bytes at once: their classes as bit masks, the counts by popcount, only
        // token and sentence ends one by one. Same counts as the byte loop below.
        if i >= next_block && i + 64 <= bytes.len() {
            match Block::classify(&bytes[i..i + 64]) {
                Ok(k) => {
                    let t = !k.white;
                    let open = (token_start != NO_TOKEN) as u64;
                    let (starts, ends) = (t & !((t << 1) | open), !t & ((t << 1) | open));
                    let mut edges = starts | ends;
                    while edges != 0 {
                        let p = edges.trailing_zeros() as usize;
                        edges &= edges - 1;
                        if starts >> p & 1 != 0 {
                            token_start = i + p;
                        } else {
                            end_token(&bytes[token_start..i + p]);
                            token_start = NO_TOKEN;
                        }
                    }
                    let (word_starts, in_word_after) = k.word_starts(in_word);
                    in_word = in_word_after;
                    let mut from = 0;
                    let mut sentence_ends = k.sent_end;
                    loop {
                        let to = if sentence_ends == 0 { 64 } else { sentence_ends.trailing_zeros() };
                        let span = bits_below(to) & !bits_below(from);
                        words += (word_starts & span).count_ones();
                        upper += (k.upper & span).count_ones();
                        lower += (k.lower & span).count_ones();
                        if sentence_ends == 0 {
                            break;
                        }
                        sentence_end(&mut m, &mut words, &mut upper, &mut lower);
                        sentence_ends &= sentence_ends - 1;
                        from = to + 1;
                    }
                    m.chars += 64;
                    m.visible += t.count_ones();
                    m.punct += k.punct.count_ones();
                    m.bad += k.bad.count_ones();
                    prev = '\0';
                    i += 64;
                    continue;
                }
                Err(first_non_ascii) => next_block = i + first_non_ascii + 1,
            }
        }
        let b = bytes[i];
        // A run of ASCII letters and digits, the bulk of any text: it starts (or continues) a
        // token and a word, and otherwise only adds to the counts.
        if b < 0x80 && ASCII_CLASS[b as usize] & ALNUM != 0 {
            if token_start == NO_TOKEN {
                token_start = i;
            }
            words += !in_word as u32;
            in_word = true;
            let start = i;
            while i < bytes.len() && bytes[i] < 0x80 && ASCII_CLASS[bytes[i] as usize] & ALNUM != 0 {
                let class = ASCII_CLASS[bytes[i] as usize];
                upper += (class & UPPER != 0) as u32;
                lower += (class & LOWER != 0) as u32;
                i += 1;
            }
            let n = (i - start) as u32;
            m.chars += n;
            m.visible += n;
            prev = '\0';
            continue;
        }
        m.chars += 1;
        if b < 0x80 {
            let class = ASCII_CLASS[b as usize];
            if class & WHITE != 0 {
                if token_start != NO_TOKEN {
                    end_token(&bytes[token_start..i]);
                    token_start = NO_TOKEN;
                }
                if class & SENT_END != 0 {
                    sentence_end(&mut m, &mut words, &mut upper, &mut lower);
                }
                in_word = false;
            } else {
                if token_start == NO_TOKEN {
                    token_start = i;
                }
                m.visible += 1;
                if class & SENT_END != 0 {
                    sentence_end(&mut m, &mut words, &mut upper, &mut lower);
                    in_word = false;
                    m.punct += 1;
                } else if class & PUNCT != 0 {
                    m.punct += 1;
                } else if !in_word {
                    words += 1;
                    in_word = true;
                }
                upper += (class & UPPER != 0) as u32;
                lower += (class & LOWER != 0) as u32;
            }
            m.bad += (class & BAD != 0) as u32;
            prev = '\0';
            i += 1;
            continue;
        }
        // `i` is on a character boundary: it advances by whole characters.
        let ch = text[i..].chars().next().expect("a character starts here");
        let white = ch.is_whitespace();
        if white {
            if token_start != NO_TOKEN {
                end_token(&bytes[token_start..i]);
                token_start = NO_TOKEN;
            }
        } else if token_start == NO_TOKEN {
            token_start = i;
        }
        if ch == '…' {
            sentence_end(&mut m, &mut words, &mut upper, &mut lower);
            in_word = false;
            m.visible += 1;
            m.punct += 1;
        } else if white {
            in_word = false;
        } else {
            m.visible += 1;
            if is_punct(ch) {
                m.punct += 1;
            } else if !in_word {
                words += 1;
                in_word = true;
            }
            if ch.is_uppercase() {
                upper += 1;
            } else if ch.is_lowercase() {
                lower += 1;
            }
        }
        let control = ch.is_control();
        // UTF-8 read as Latin-1/cp1252: `Ã` + a continuation-range char, or `â€`.
        let sequence = (prev == 'Ã' && ('\u{80}'..='\u{BF}').contains(&ch)) || (prev == 'â' && ch == '€');
        if ch == '\u{FFFD}' || control {
            m.bad += 1;
        } else if sequence {
            m.bad += 2;
        }
        prev = ch;
        i += ch.len_utf8();
    }
    if token_start != NO_TOKEN {
        end_token(&bytes[token_start..]);
    }
    sentence_end(&mut m, &mut words, &mut upper, &mut lower);
    m.trigrams = keys.len() as u32;
    m.repeated_trigrams = count_repeats(&keys);
    m
}

/// The bits of a `u64` below bit `n` (all of them for 64).
fn bits_below(n: u32) -> u64 {
    if n >= 64 {
        !0
    } else {
        (1 << n) - 1
    }
}

/// The classes of 64 ASCII bytes as bit masks, bit `j` for byte `j` ([`ASCII_CLASS`]'s classes).
#[derive(Debug, PartialEq, Eq)]
struct Block {
    white: u64,
    sent_end: u64,
    punct: u64,
    upper: u64,
    lower: u64,
    bad: u64,
}

impl Block {
    /// The masks of `bytes` (64 of them), or the offset of the first that is not ASCII.
    fn classify(bytes: &[u8]) -> Result<Block, usize> {
        #[cfg(target_arch = "x86_64")]
        return Block::classify_sse2(bytes);
        #[cfg(not(target_arch = "x86_64"))]
        return Block::classify_bytes(bytes);
    }

    /// One byte at a time through [`ASCII_CLASS`]: the other targets', and the tests' reference.
    #[cfg_attr(target_arch = "x86_64", allow(dead_code))]
    fn classify_bytes(bytes: &[u8]) -> Result<Block, usize> {
        let mut k = Block { white: 0, sent_end: 0, punct: 0, upper: 0, lower: 0, bad: 0 };
        for (j, &b) in bytes[..64].iter().enumerate() {
            if b >= 0x80 {
                return Err(j);
            }
            let class = ASCII_CLASS[b as usize];
            let bit = |c: u8| ((class & c != 0) as u64) << j;
            k.white |= bit(WHITE);
            k.sent_end |= bit(SENT_END);
            k.punct |= bit(PUNCT);
            k.upper |= bit(UPPER);
            k.lower |= bit(LOWER);
            k.bad |= bit(BAD);
        }
        Ok(k)
    }

    /// Sixteen bytes at a time: range compares (signed, which is right once the bytes are
    /// known to be ASCII) and one `movemask` per class.
    #[cfg(target_arch = "x86_64")]
    fn classify_sse2(bytes: &[u8]) -> Result<Block, usize> {
        use std::arch::x86_64::*;
        assert!(bytes.len() >= 64);
        let mut k = Block { white: 0, sent_end: 0, punct: 0, upper: 0, lower: 0, bad: 0 };
        // SAFETY: SSE2 is part of x86-64; the four loads read bytes[0..64], inside `bytes`.
        unsafe {
            let eq = |v: __m128i, c: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8));
            // lo <= v <= hi, for lo >= 1 and hi <= 0x7E.
            let within = |v: __m128i, lo: u8, hi: u8| {
                _mm_and_si128(
                    _mm_cmpgt_epi8(v, _mm_set1_epi8((lo - 1) as i8)),
                    _mm_cmplt_epi8(v, _mm_set1_epi8((hi + 1) as i8)),
                )
            };
            let or = |a: __m128i, b: __m128i| _mm_or_si128(a, b);
            let bits = |v: __m128i| _mm_movemask_epi8(v) as u16 as u64;
            for q in 0..4 {
                let v = _mm_loadu_si128(bytes.as_ptr().add(16 * q) as *const __m128i);
                let high = bits(v);
                if high != 0 {
                    return Err(16 * q + high.trailing_zeros() as usize);
                }
                let white = or(eq(v, b' '), within(v, b'\t', b'\r'));
                let upper = within(v, b'A', b'Z');
                let lower = within(v, b'a', b'z');
                let alnum = or(or(upper, lower), within(v, b'0', b'9'));
                let punct = _mm_andnot_si128(alnum, within(v, 0x21, 0x7E));
                let sent_end = or(or(eq(v, b'.'), eq(v, b'!')), or(eq(v, b'?'), eq(v, b'\n')));
                let control = or(_mm_cmplt_epi8(v, _mm_set1_epi8(0x20)), eq(v, 0x7F));
                let kept = or(or(eq(v, b'\n'), eq(v, b'\t')), eq(v, b'\r'));
                let bad = _mm_andnot_si128(kept, control);
                let at = 16 * q;
                k.white |= bits(white) << at;
                k.sent_end |= bits(sent_end) << at;
                k.punct |= bits(punct) << at;
                k.upper |= bits(upper) << at;
                k.lower |= bits(lower) << at;
                k.bad |= bits(bad) << at;
            }
        }
        Ok(k)
    }

    /// Where words start, given whether one was open before the block, and whether one is open
    /// after it. A word is open after a character that is neither white nor punctuation; white
    /// and sentence ends close it; other punctuation keeps what was. That is a carry chain (a
    /// word character generates, other punctuation propagates), so one addition computes it.
    fn word_starts(&self, open: bool) -> (u64, bool) {
        let word = !self.white & !self.punct;
        let through = self.punct & !self.sent_end;
        let open = open as u64;
        let sum = (word | through).wrapping_add(word).wrapping_add(open);
        let carry_in = (word | through) ^ word ^ sum;
        let in_word = word | (through & carry_in);
        (word & !((in_word << 1) | open), in_word >> 63 != 0)
    }
}

/// A token's 64-bit hash, eight bytes at a time (the length mixed in first), with a final
/// avalanche so that the trigram keys built from three of them by rotation and XOR spread over
/// the repeat table. The tail is read with overlapping loads (wyhash's trick), not copied into a
/// buffer: the copy's store-to-load stall was a fifth of the noise step.
fn token_hash(token: &[u8]) -> u64 {
    const K: u64 = 0x9E37_79B9_7F4A_7C15;
    let n = token.len();
    let mut h = (n as u64).wrapping_mul(K);
    let mut mix = |word: u64| h = (h.rotate_left(26) ^ word).wrapping_mul(K);
    let u64_at = |i: usize| u64::from_le_bytes(token[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(token[i..i + 4].try_into().expect("4 bytes")) as u64;
    match n {
        0 => {}
        1..=3 => mix(token[0] as u64 | (token[n / 2] as u64) << 8 | (token[n - 1] as u64) << 16),
        4..=8 => mix(u32_at(0) | u32_at(n - 4) << 32),
        _ => {
            let mut i = 0;
            while i + 8 < n {
                mix(u64_at(i));
                i += 8;
            }
            // The last eight bytes, overlapping the previous word where n is not a multiple of 8.
            mix(u64_at(n - 8));
        }
    }
    // SplitMix64's finaliser.
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^ (h >> 31)
}

/// How many keys equal an earlier one (k copies of a key count k − 1), with a small
/// open-addressing table reused per thread: a linear pass where sorting the keys cost
/// n log n comparisons (4% of a whole IMDb pipeline).
fn count_repeats(keys: &[u64]) -> u32 {
    thread_local! {
        static TABLE: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    TABLE.with(|table| {
        let mut table = table.borrow_mut();
        let size = (keys.len() * 2).next_power_of_two().max(16);
        table.clear();
        table.resize(size, 0);
        let mask = size - 1;
        // 0 marks an empty slot, so the key 0 is counted on the side.
        let (mut repeats, mut zero_seen) = (0u32, false);
        for &k in keys {
            if k == 0 {
                repeats += zero_seen as u32;
                zero_seen = true;
                continue;
            }
            let mut i = (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize & mask;
            loop {
                match table[i] {
                    0 => {
                        table[i] = k;
                        break;
                    }
                    slot if slot == k => {
                        repeats += 1;
                        break;
                    }
                    _ => i = (i + 1) & mask,
                }
            }
        }
        repeats
    })
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
        assert!(loud.score > 15.0 && calm.score < 10.0, "calm {calm:?} loud {loud:?}");
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
            ..Default::default()
        };
        let c = s.score("a b c a b c");
        assert!((c.score - 100.0 * c.repeat_ratio).abs() < 1e-4);
    }

    /// `formula: recipe` against the recipe's Python function (fixture from
    /// scripts/make_golden_noise.py): hard cases and every review of the bundled sample.
    #[test]
    fn recipe_formula_equals_the_python_function() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let golden: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join("tests/fixtures/golden_noise.json")).unwrap())
                .unwrap();
        let step = NoiseScore { formula: NoiseFormula::Recipe, ..Default::default() };
        let cases = golden["cases"].as_array().unwrap();
        assert!(cases.len() > 700);
        let mut differs_from_ours = 0;
        for c in cases {
            let id = c["id"].as_str().unwrap();
            let text = match c.get("text") {
                Some(t) => t.as_str().unwrap().to_string(),
                None => String::from_utf8_lossy(&std::fs::read(root.join("data/aclImdb-sample").join(id)).unwrap())
                    .into_owned(),
            };
            let r = recipe(&text);
            let got = [r.sent_len_std, r.punct_ratio, r.caps_ratio];
            for (k, (name, g)) in ["sent_len_std", "punct_ratio", "caps_ratio"].iter().zip(got).enumerate() {
                let want = c[name].as_f64().unwrap();
                assert!((g - want).abs() < 1e-12, "{id}: {name} {g} vs Python {want} (component {k})");
            }
            let score = step.score(&text).score as f64;
            let want = c["score"].as_f64().unwrap();
            assert!((score - want).abs() <= 1e-6 * want.abs().max(1.0), "{id}: score {score} vs Python {want}");
            differs_from_ours += ((NoiseScore::default().score(&text).score as f64 - want).abs() > 0.01) as usize;
        }
        // The default formula is a different scale: it is not what this option reproduces.
        assert!(differs_from_ours > 700, "{differs_from_ours}");
    }

    /// The character-at-a-time `measure` this module had before its ASCII fast path, kept
    /// (deliberately a second implementation) as the reference the fast one must agree with.
    fn measure_reference(text: &str) -> Measure {
        let mut m = Measure::default();
        let (mut words, mut in_word, mut upper, mut lower) = (0u32, false, 0u32, 0u32);
        let mut token_hash = FNV_OFFSET;
        let mut in_token = false;
        let mut window = [0u64; 3];
        let mut tokens = 0u32;
        let mut keys: Vec<u64> = Vec::with_capacity(text.len() / 5);
        let mut prev = '\0';
        let mut end_token = |hash: &mut u64| {
            window = [window[1], window[2], *hash];
            tokens += 1;
            if tokens >= 3 {
                keys.push(window[0].rotate_left(42) ^ window[1].rotate_left(21) ^ window[2]);
            }
            *hash = FNV_OFFSET;
        };
        for ch in text.chars() {
            m.chars += 1;
            let white = if ch.is_ascii() { matches!(ch, ' ' | '\t'..='\r') } else { ch.is_whitespace() };
            if white {
                if in_token {
                    end_token(&mut token_hash);
                    in_token = false;
                }
            } else {
                in_token = true;
                let mut buf = [0u8; 4];
                for &b in ch.encode_utf8(&mut buf).as_bytes() {
                    token_hash = (token_hash ^ b as u64).wrapping_mul(FNV_PRIME);
                }
            }
            if is_sentence_end(ch) {
                if words > 0 {
                    m.sentences.push(words);
                    m.caps_sentences += (upper >= 3 && lower == 0) as u32;
                }
                (words, upper, lower, in_word) = (0, 0, 0, false);
                m.visible += !white as u32;
                m.punct += (ch != '\n') as u32;
            } else if white {
                in_word = false;
            } else {
                m.visible += 1;
                if is_punct(ch) {
                    m.punct += 1;
                } else if !in_word {
                    words += 1;
                    in_word = true;
                }
                if ch.is_ascii() {
                    upper += ch.is_ascii_uppercase() as u32;
                    lower += ch.is_ascii_lowercase() as u32;
                } else if ch.is_uppercase() {
                    upper += 1;
                } else if ch.is_lowercase() {
                    lower += 1;
                }
            }
            if !ch.is_ascii() || ch.is_ascii_control() {
                let control = ch.is_control() && !matches!(ch, '\n' | '\t' | '\r');
                // UTF-8 read as Latin-1/cp1252: `Ã` + a continuation-range char, or `â€`.
                let sequence = (prev == 'Ã' && ('\u{80}'..='\u{BF}').contains(&ch)) || (prev == 'â' && ch == '€');
                if ch == '\u{FFFD}' || control {
                    m.bad += 1;
                } else if sequence {
                    m.bad += 2;
                }
            }
            prev = ch;
        }
        if in_token {
            end_token(&mut token_hash);
        }
        if words > 0 {
            m.sentences.push(words);
            m.caps_sentences += (upper >= 3 && lower == 0) as u32;
        }
        m.trigrams = keys.len() as u32;
        m.repeated_trigrams = count_repeats(&keys);
        m
    }

    fn is_sentence_end(c: char) -> bool {
        matches!(c, '.' | '!' | '?' | '\n' | '…')
    }

    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x100_0000_01b3;

    /// `measure` and the character-at-a-time reference count `text` alike (token hashes differ,
    /// so repeats are compared, not keys).
    fn counts_agree(text: &str, round: usize) {
        let (a, b) = (measure(text), measure_reference(text));
        let got = (a.sentences, a.caps_sentences, a.punct, a.visible, a.chars, a.bad, a.trigrams, a.repeated_trigrams);
        let want = (b.sentences, b.caps_sentences, b.punct, b.visible, b.chars, b.bad, b.trigrams, b.repeated_trigrams);
        assert_eq!(got, want, "round {round}: {text:?}");
    }

    /// The fast path agrees with the character-at-a-time reference on every count, over
    /// random mixes of ASCII, controls, accented and wide letters, `…`, Unicode spaces and
    /// mojibake pairs (token hashes differ, so repeats are compared, not keys).
    #[test]
    fn fast_measure_equals_the_character_at_a_time_one() {
        let pieces = [
            "a", "B", "word", "WORD", " ", "  ", "\n", "\t", "\r", "\x0b", "\x0c", "\x01", "\x7f", ".", "!", "?",
            "...", ",", "'", "(", "1", "é", "É", "ß", "…", "\u{2014}", "\u{a0}", "\u{2028}", "\u{85}", "Ã©", "â€",
            "\u{fffd}", "日本", "\u{1c}", "_", "buy now", "ǅ",
        ];
        let mut rng = crate::rng::Rng(11);
        for round in 0..3000 {
            let n = rng.below(60);
            let text: String = (0..n).map(|_| pieces[rng.below(pieces.len())]).collect();
            counts_agree(&text, round);
        }
    }

    /// The same over long, mostly ASCII texts, where 64-byte blocks are counted by masks: words,
    /// tokens and sentences crossing block edges, runs of punctuation between word characters,
    /// and a non-ASCII character now and then (the block after it is tried again).
    #[test]
    fn block_counts_equal_the_character_at_a_time_ones() {
        let pieces = [
            "a", "Bc", "word", "WORDS", "x1", " ", "  ", "\n", "\t", "\r", "\x0b", "\x0c", "\x01", "\x7f", ".", "!",
            "?", "...", ",", "'", "(", ")", "-", "\"", "1", "_", "don't", "A.B", "(word)", "e.g.", "é", "…", "\u{a0}",
        ];
        // Repeated phrases whose words cross block edges at every offset: a word hashed in two
        // parts would no longer repeat.
        for offset in 0..64 {
            let text = format!("{}{}", "x".repeat(offset), " alpha, beta's gamma-ray (delta)".repeat(30));
            let (a, b) = (measure(&text), measure_reference(&text));
            assert_eq!((a.trigrams, a.repeated_trigrams), (b.trigrams, b.repeated_trigrams), "offset {offset}");
        }
        let mut rng = crate::rng::Rng(23);
        for round in 0..3000 {
            let n = rng.below(400);
            // Mostly ASCII: the last three pieces are drawn rarely.
            let text: String = (0..n)
                .map(|_| {
                    pieces
                        [if rng.below(50) == 0 { pieces.len() - 1 - rng.below(3) } else { rng.below(pieces.len() - 3) }]
                })
                .collect();
            counts_agree(&text, round);
        }
    }

    /// The SSE2 masks are the class table's, for every ASCII byte at every position, and a
    /// non-ASCII byte is found where it is. (Other targets classify through the table itself.)
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn block_masks_are_the_class_tables() {
        let mut rng = crate::rng::Rng(31);
        for round in 0..20_000 {
            let mut block = [0u8; 64];
            for b in block.iter_mut() {
                *b = rng.below(128) as u8;
            }
            if round % 3 == 0 {
                block[rng.below(64)] = 0x80 + rng.below(128) as u8;
            }
            let want = Block::classify_bytes(&block);
            assert_eq!(Block::classify_sse2(&block), want, "{block:?}");
        }
        let all: Vec<u8> = (0..128u8).cycle().take(64 * 4).collect();
        for at in 0..=all.len() - 64 {
            assert_eq!(Block::classify_sse2(&all[at..at + 64]), Block::classify_bytes(&all[at..at + 64]));
        }
    }

    #[test]
    fn repeats_are_counted_as_sorting_counts_them() {
        let mut rng = crate::rng::Rng(5);
        for n in [0usize, 1, 2, 3, 17, 300, 5000] {
            let keys: Vec<u64> = (0..n).map(|_| [0, 1, 7, rng.next_u64()][rng.below(4)]).collect();
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            let want = sorted.windows(2).filter(|w| w[0] == w[1]).count() as u32;
            assert_eq!(count_repeats(&keys), want, "{n} keys");
        }
    }
}
