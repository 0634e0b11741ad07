//! A fast BERT WordPiece encoder, bit-identical to HF `tokenizers`' `BertNormalizer` +
//! `BertPreTokenizer` + `WordPiece` (what `BertTokenizerFast` and `BertWordPieceTokenizer` run),
//! without the offset bookkeeping that makes the crate's encoder slow.
//!
//! ASCII text, nearly all of it in English corpora, goes straight from bytes to words; only
//! non-ASCII runs take the full path (clean → CJK split → NFD + drop Mn → per-char lowercase),
//! with the same Unicode tables (`unicode_categories`) as the crate. Each word is looked up
//! whole first — the common case — then split greedily, longest match first.

use std::path::Path;

use anyhow::{bail, Context, Result};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use unicode_categories::UnicodeCategories;
use unicode_normalization::UnicodeNormalization;

use crate::contract::manifest::SpecialIds;

/// The special tokens, in BERT's vocabulary order of importance.
pub const SPECIALS: [&str; 5] = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"];

/// The most token ids a vocabulary may have (16.7 million; BERT's have 30,522).
pub const MAX_VOCAB_IDS: usize = 1 << 24;

pub struct WordPiece {
    /// Every token's text, back to back in id order; `spans` says where each one is.
    names: String,
    /// (start in `names`, length, id) of each token (the last id of a repeated one).
    spans: Vec<(u32, u32, u32)>,
    /// Every token, for the per-word lookups.
    words: PieceTable,
    /// Continuation pieces (`##x`) stored without their prefix, so lookups need no copy.
    continuations: PieceTable,
    pub specials: SpecialIds,
    pub lowercase: bool,
    pub strip_accents: bool,
    pub max_word_chars: usize,
    pub vocab_size: usize,
    pub vocab_sha256: String,
    /// The vocabulary's content identity (`contract::manifest::vocab_id`).
    pub vocab_id: String,
    /// Longest vocabulary entry in bytes: no match can be longer.
    max_piece_bytes: usize,
}

impl std::fmt::Debug for WordPiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WordPiece({} tokens, lowercase {})", self.vocab_size, self.lowercase)
    }
}

impl WordPiece {
    /// Reads a `vocab.txt` (one token per line; the line number is the id).
    pub fn from_vocab_file(
        path: &Path,
        lowercase: bool,
        strip_accents: Option<bool>,
        max_word_chars: usize,
    ) -> Result<Self> {
        let bytes =
            crate::contract::reads::read(path).with_context(|| format!("could not read vocab '{}'", path.display()))?;
        let sha = hex::encode(Sha256::digest(&bytes));
        let text = String::from_utf8(bytes).with_context(|| format!("vocab '{}' is not UTF-8", path.display()))?;
        let lines = text.bytes().filter(|&b| b == b'\n').count() + 1;
        // As HF's `WordPiece::read_file`: each line without its trailing whitespace.
        let tokens = text.lines().map(str::trim_end).enumerate().map(|(i, t)| (t, i as u32));
        // What makes a file that looks right fail: said with the error, not instead of HF's
        // reading (a BOM stays part of the first token there, CR alone ends no line).
        let why = if text.trim().is_empty() {
            Some("the file is empty")
        } else if text.starts_with('\u{FEFF}') {
            Some("the file starts with a byte order mark (U+FEFF), which is read as part of the first token; save it as UTF-8 without one")
        } else if !text.contains('\n') && text.contains('\r') {
            Some("the file's lines end in a carriage return alone, so it is read as one line; end them with \\n")
        } else {
            None
        };
        Self::build(tokens, lines, lowercase, strip_accents, max_word_chars, sha)
            .map_err(|e| match why {
                Some(why) => e.context(why),
                None => e,
            })
            .with_context(|| format!("vocab '{}'", path.display()))
    }

    /// Builds an encoder from (token, id) pairs.
    pub fn from_tokens(
        tokens: impl IntoIterator<Item = (String, u32)>,
        lowercase: bool,
        strip_accents: Option<bool>,
        max_word_chars: usize,
        vocab_sha256: String,
    ) -> Result<Self> {
        let tokens: Vec<(String, u32)> = tokens.into_iter().collect();
        let n = tokens.len();
        Self::build(
            tokens.iter().map(|(t, id)| (t.as_str(), *id)),
            n,
            lowercase,
            strip_accents,
            max_word_chars,
            vocab_sha256,
        )
    }

    /// The encoder of (token, id) pairs borrowed from the caller (about `n` of them). Every
    /// pipeline run loads its vocabulary before its first document, so this holds no per-token
    /// allocation: the tokens are copied once into one string, and the lookup tables are the
    /// only maps kept. Maps of owned strings built, copied and dropped, and two sorts by id, had a
    /// run on four reviews at 15 ms; it is 11 ms (medians of 31).
    fn build<'a>(
        tokens: impl Iterator<Item = (&'a str, u32)>,
        n: usize,
        lowercase: bool,
        strip_accents: Option<bool>,
        max_word_chars: usize,
        vocab_sha256: String,
    ) -> Result<Self> {
        // HF keeps the last id of a repeated token (its vocabulary is a map filled in line
        // order); the earlier id is then no token's. So do we, for whole words and `##` pieces.
        // More ids than MAX_VOCAB_IDS are refused below: a file of millions of blank lines must
        // not size the map first.
        let mut all: FxHashMap<&str, u32> =
            FxHashMap::with_capacity_and_hasher(n.min(MAX_VOCAB_IDS), Default::default());
        for (token, id) in tokens {
            all.insert(token, id);
        }
        // Tables indexed by id (and a model's embeddings) are as long as the largest id: a
        // crafted file must not make them huge.
        let largest = all.values().copied().max().unwrap_or(0) as usize;
        if largest >= MAX_VOCAB_IDS || largest >= 2 * all.len() + 1024 {
            bail!(
                "the largest token id is {largest}, but the vocabulary has {} tokens: ids must run from 0 without large gaps (at most {MAX_VOCAB_IDS}); in a vocab.txt a token's id is its line number, so blank or repeated lines leave ids that no token has",
                all.len()
            );
        }
        let strip_accents = strip_accents.unwrap_or(lowercase);
        // In id order: a vocab.txt's ids are distinct (line numbers), so each token drops into
        // its slot; only tokens sharing an id (a crafted tokenizer.json) are sorted.
        let mut slots: Vec<Option<&str>> = vec![None; largest + 1];
        let shared = all.iter().any(|(t, &id)| slots[id as usize].replace(t).is_some());
        let mut by_id: Vec<(u32, &str)> = if shared {
            let mut v: Vec<(u32, &str)> = all.iter().map(|(t, &id)| (id, *t)).collect();
            v.sort_unstable();
            v
        } else {
            slots.iter().enumerate().filter_map(|(id, t)| Some((id as u32, (*t)?))).collect()
        };
        drop(slots);
        let vocab_id = crate::contract::manifest::vocab_id_in_order(by_id.iter().copied(), lowercase, strip_accents);
        by_id.retain(|(_, t)| !t.is_empty());
        let special = |name: &str| {
            all.get(name).copied().with_context(|| format!("the vocabulary has no {name} token; a BERT vocab.txt lists [PAD] [UNK] [CLS] [SEP] [MASK] (bertpipe vocab train writes one)"))
        };
        let specials = SpecialIds::bert(
            special("[PAD]")?,
            special("[UNK]")?,
            special("[CLS]")?,
            special("[SEP]")?,
            special("[MASK]")?,
        );
        // The map is done with: its memory goes back before the piece tables, of its size, are
        // made (fresh memory is the dearest part of a run's start).
        drop(all);
        if by_id.len() < 6 {
            bail!("the vocabulary has only {} tokens", by_id.len());
        }
        let vocab_size = by_id.last().map_or(0, |&(id, _)| id as usize + 1);
        let max_piece_bytes = by_id.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
        let words = PieceTable::new(by_id.iter().map(|&(id, t)| (t.as_bytes(), id)));
        let continuations =
            PieceTable::new(by_id.iter().filter_map(|&(id, t)| Some((t.strip_prefix("##")?.as_bytes(), id))));
        let text_bytes: usize = by_id.iter().map(|(_, t)| t.len()).sum();
        if text_bytes > u32::MAX as usize {
            bail!("the vocabulary's tokens hold {text_bytes} bytes of text; at most 4 GiB are read");
        }
        let mut names = String::with_capacity(text_bytes);
        let spans = by_id
            .iter()
            .map(|&(id, t)| {
                let start = names.len() as u32;
                names.push_str(t);
                (start, t.len() as u32, id)
            })
            .collect();
        Ok(WordPiece {
            names,
            spans,
            words,
            continuations,
            specials,
            lowercase,
            strip_accents,
            max_word_chars,
            vocab_size,
            vocab_sha256,
            vocab_id,
            max_piece_bytes,
        })
    }

    /// Every (token, id) pair.
    pub fn vocab_entries(&self) -> Vec<(String, u32)> {
        self.spans
            .iter()
            .map(|&(start, len, id)| (self.names[start as usize..(start + len) as usize].to_string(), id))
            .collect()
    }

    /// Appends the ids of `text` (no [CLS]/[SEP]) to `out`. Literal special tokens in the text
    /// (`[SEP]`, …) become their ids, as in HF, where they are added tokens.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) {
        let mut word = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('[') {
            let special = SPECIALS.iter().find(|s| rest[at..].starts_with(**s));
            match special {
                Some(s) => {
                    self.encode_segment(&rest[..at], &mut word, out);
                    out.push(self.words.get(s.as_bytes()).expect("the specials are checked at load"));
                    rest = &rest[at + s.len()..];
                }
                None => {
                    self.encode_segment(&rest[..at + 1], &mut word, out);
                    rest = &rest[at + 1..];
                }
            }
        }
        self.encode_segment(rest, &mut word, out);
    }

    /// Normalises and pre-tokenises one segment; words are finished at whitespace, around
    /// punctuation and CJK characters, and at the end of the segment.
    fn encode_segment(&self, text: &str, word: &mut String, out: &mut Vec<u32>) {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if is_word_byte(b) {
                // A run of ASCII word bytes: a whole word when it stands alone and is already
                // lower-case (the common case) goes to the lookup without being copied.
                let start = i;
                let mut upper = false;
                while i < bytes.len() && is_word_byte(bytes[i]) {
                    upper |= bytes[i].is_ascii_uppercase();
                    i += 1;
                }
                let ends_word = i == bytes.len() || bytes[i].is_ascii_punctuation() || is_split_space(bytes[i]);
                if word.is_empty() && ends_word && !(upper && self.lowercase) {
                    self.push_word(&text[start..i], out);
                } else if self.lowercase {
                    word.extend(bytes[start..i].iter().map(|b| b.to_ascii_lowercase() as char));
                } else {
                    word.push_str(&text[start..i]);
                }
                continue;
            }
            if b.is_ascii() {
                i += 1;
                match b {
                    b'\t' | b'\n' | b'\r' | b' ' => self.finish_word(word, out),
                    // Other controls (\x0B and \x0C too) are removed before whitespace is
                    // mapped, so they join their neighbours rather than split them.
                    0..=0x1F | 0x7F => {}
                    _ if b.is_ascii_punctuation() => {
                        self.finish_word(word, out);
                        self.push_word(std::str::from_utf8(&[b]).expect("ASCII"), out);
                    }
                    _ => word.push(if self.lowercase { b.to_ascii_lowercase() } else { b } as char),
                }
                continue;
            }
            // A run of non-ASCII characters goes through the full normaliser. ASCII bytes are
            // barriers for NFD reordering (combining class 0), so runs can be handled alone.
            let end = bytes[i..].iter().position(u8::is_ascii).map_or(bytes.len(), |p| i + p);
            self.normalize_run(&text[i..end], word, out);
            i = end;
        }
        self.finish_word(word, out);
    }

    fn normalize_run(&self, run: &str, word: &mut String, out: &mut Vec<u32>) {
        // clean_text: drop NUL, U+FFFD and "other" characters; whitespace becomes a space.
        let cleaned = run
            .chars()
            .filter(|&c| !(c == '\0' || c == '\u{FFFD}' || (!matches!(c, '\t' | '\n' | '\r') && c.is_other())));
        let mut emit = |c: char, word: &mut String, out: &mut Vec<u32>| {
            if c.is_whitespace() {
                self.finish_word(word, out);
            } else if c.is_ascii_punctuation() || c.is_punctuation() || is_chinese_char(c) {
                self.finish_word(word, out);
                let mut buf = [0u8; 4];
                self.push_word(c.encode_utf8(&mut buf), out);
            } else {
                word.push(c);
            }
        };
        let lower =
            |c: char, word: &mut String, out: &mut Vec<u32>, emit: &mut dyn FnMut(char, &mut String, &mut Vec<u32>)| {
                if self.lowercase {
                    for l in c.to_lowercase() {
                        emit(l, word, out);
                    }
                } else {
                    emit(c, word, out);
                }
            };
        if self.strip_accents {
            // CJK characters never decompose, so padding them before or after NFD is the same.
            for c in cleaned.nfd().filter(|c| !c.is_mark_nonspacing()) {
                lower(c, word, out, &mut emit);
            }
        } else {
            for c in cleaned {
                lower(c, word, out, &mut emit);
            }
        }
    }

    fn finish_word(&self, word: &mut String, out: &mut Vec<u32>) {
        if !word.is_empty() {
            self.push_word(word, out);
            word.clear();
        }
    }

    /// Greedy longest-match-first WordPiece of one word; any unmatched piece makes the whole
    /// word [UNK], as does a word longer than `max_word_chars` characters.
    fn push_word(&self, word: &str, out: &mut Vec<u32>) {
        if word.len() > self.max_word_chars && word.chars().count() > self.max_word_chars {
            out.push(self.specials.unk);
            return;
        }
        if let Some(id) = self.words.get(word.as_bytes()) {
            out.push(id);
            return;
        }
        let mark = out.len();
        let mut start = 0;
        while start < word.len() {
            let table = if start == 0 { &self.words } else { &self.continuations };
            let longest = if start == 0 { self.max_piece_bytes } else { self.max_piece_bytes.saturating_sub(2) };
            let mut end = word.len().min(start + longest);
            while !word.is_char_boundary(end) {
                end -= 1;
            }
            let mut found = None;
            while end > start {
                if let Some(id) = table.get(&word.as_bytes()[start..end]) {
                    found = Some(id);
                    break;
                }
                end -= word[..end].chars().next_back().map_or(1, char::len_utf8);
            }
            match found {
                Some(id) => {
                    out.push(id);
                    start = end;
                }
                None => {
                    out.truncate(mark);
                    out.push(self.specials.unk);
                    return;
                }
            }
        }
    }
}

/// ASCII bytes that are part of a word: not whitespace, not a control, not punctuation
/// (every other printable ASCII byte is punctuation to BERT).
#[inline]
fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// The ASCII whitespace that separates words (other controls are removed, joining neighbours).
#[inline]
fn is_split_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | b'\r' | b' ')
}

/// CJK Unified Ideographs and their extensions, as BERT (and HF) define "Chinese characters".
fn is_chinese_char(c: char) -> bool {
    matches!(
        c as u32,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F | 0x2B740..=0x2B81F | 0x2B920..=0x2CEAF | 0xF900..=0xFAFF | 0x2F800..=0x2FA1F
    )
}

/// A read-only string → id table for the hot lookups: keys of up to 16 bytes (nearly every
/// WordPiece entry and every word looked up) live in the slots themselves, zero-padded into two
/// integers, so a probe compares three integers instead of hashing into a `Box<str>` and calling
/// `memcmp` on it (those two were a fifth of tokenizing). Longer keys go to a side map.
#[derive(Default)]
struct PieceTable {
    slots: Vec<Slot>,
    mask: usize,
    long: FxHashMap<Box<[u8]>, u32>,
}

/// `len == 0` marks an empty slot (the empty string is never a key).
#[derive(Clone, Copy, Default)]
struct Slot {
    lo: u64,
    hi: u64,
    len: u32,
    id: u32,
}

impl PieceTable {
    /// The first id given to a key wins, as with `entry().or_insert()`.
    fn new<'a>(entries: impl Iterator<Item = (&'a [u8], u32)> + Clone) -> Self {
        let entries = entries.filter(|(k, _)| !k.is_empty());
        let size = (entries.clone().count() * 2).next_power_of_two().max(16);
        let mut table = PieceTable { slots: vec![Slot::default(); size], mask: size - 1, long: FxHashMap::default() };
        for (key, id) in entries {
            if key.len() > 16 {
                table.long.entry(key.into()).or_insert(id);
                continue;
            }
            let (lo, hi) = pack(key);
            let mut i = slot_of(lo, hi, key.len()) & table.mask;
            loop {
                let s = &mut table.slots[i];
                if s.len == 0 {
                    *s = Slot { lo, hi, len: key.len() as u32, id };
                    break;
                }
                if (s.lo, s.hi, s.len) == (lo, hi, key.len() as u32) {
                    break;
                }
                i = (i + 1) & table.mask;
            }
        }
        table
    }

    #[inline]
    fn get(&self, key: &[u8]) -> Option<u32> {
        if key.len() > 16 {
            return self.long.get(key).copied();
        }
        if key.is_empty() {
            return None;
        }
        let (lo, hi) = pack(key);
        let len = key.len() as u32;
        let mut i = slot_of(lo, hi, key.len()) & self.mask;
        loop {
            let s = self.slots[i];
            if s.len == 0 {
                return None;
            }
            if s.lo == lo && s.hi == hi && s.len == len {
                return Some(s.id);
            }
            i = (i + 1) & self.mask;
        }
    }
}

#[inline]
fn slot_of(lo: u64, hi: u64, len: usize) -> usize {
    let h = (lo ^ hi.rotate_left(31) ^ len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 32) as usize
}

/// Up to 16 bytes as two little-endian integers, zero-padded, read with overlapping loads
/// rather than copied into a buffer (a copy stalls the loads that follow it).
#[inline]
fn pack(key: &[u8]) -> (u64, u64) {
    let n = key.len();
    debug_assert!((1..=16).contains(&n));
    let u64_at = |i: usize| u64::from_le_bytes(key[i..i + 8].try_into().expect("8 bytes"));
    let u32_at = |i: usize| u32::from_le_bytes(key[i..i + 4].try_into().expect("4 bytes")) as u64;
    match n {
        // Bytes 8..n sit at the top of the word ending at n: shift them down.
        9..=16 => (u64_at(0), u64_at(n - 8) >> (8 * (16 - n))),
        8 => (u64_at(0), 0),
        4..=7 => (u32_at(0) | (u32_at(n - 4) >> (8 * (8 - n))) << 32, 0),
        _ => {
            let mut lo = 0u64;
            for (k, &b) in key.iter().enumerate() {
                lo |= (b as u64) << (8 * k);
            }
            (lo, 0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A repeated token keeps its last id, tokens may share an id (a crafted tokenizer.json) and
    /// an empty line is an id of no word: the encoder, its entries and its `vocab_id` are those
    /// of the map HF fills in order, whichever path (slots by id, or the sort) built them.
    #[test]
    fn repeated_and_shared_ids_are_the_maps() {
        let base = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "##ing", "", "sing", "x"];
        for shared in [false, true] {
            let mut tokens: Vec<(String, u32)> =
                base.iter().enumerate().map(|(i, t)| (t.to_string(), i as u32)).collect();
            tokens.push(("hello".into(), 10)); // the last id wins; 5 is no token's
            if shared {
                tokens.push(("y".into(), 9)); // "x" and "y" are both 9
            }
            let mut map: FxHashMap<String, u32> = FxHashMap::default();
            for (t, id) in &tokens {
                map.insert(t.clone(), *id);
            }
            let w = WordPiece::from_tokens(tokens, true, None, 100, String::new()).unwrap();
            let want_id = crate::contract::manifest::vocab_id(map.iter().map(|(t, &id)| (t.as_str(), id)), true, true);
            assert_eq!(w.vocab_id, want_id);
            let mut entries = w.vocab_entries();
            entries.sort();
            let mut want: Vec<(String, u32)> = map.into_iter().filter(|(t, _)| !t.is_empty()).collect();
            want.sort();
            assert_eq!(entries, want);
            assert_eq!(w.vocab_size, 11);
            let mut ids = Vec::new();
            w.encode("hello singing [SEP] y", &mut ids);
            assert_eq!(ids, if shared { vec![10, 8, 6, 3, 9] } else { vec![10, 8, 6, 3, 1] });
        }
    }

    /// A vocab.txt that looks right but is read otherwise says why: a byte order mark (HF keeps
    /// it in the first token, so `[PAD]` is not found), lines ended by CR alone (one line), an
    /// empty file. The same tokens with plain line ends load.
    #[test]
    fn vocab_files_that_look_right_say_why_they_fail() {
        let dir = tempfile::tempdir().unwrap();
        let lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "##ing"];
        let cases = [
            ("bom", format!("\u{FEFF}{}\n", lines.join("\n")), "byte order mark"),
            ("cr", format!("{}\r", lines.join("\r")), "carriage return alone"),
            ("empty", "\n\n".to_string(), "is empty"),
        ];
        for (name, text, why) in cases {
            let path = dir.path().join(format!("{name}.txt"));
            std::fs::write(&path, text).unwrap();
            let err = format!("{:#}", WordPiece::from_vocab_file(&path, true, None, 100).unwrap_err());
            assert!(err.contains(why) && err.contains(&path.display().to_string()), "{name}: {err}");
        }
        let path = dir.path().join("plain.txt");
        std::fs::write(&path, lines.join("\r\n")).unwrap();
        assert_eq!(WordPiece::from_vocab_file(&path, true, None, 100).unwrap().vocab_size, 7);
    }

    /// Every key of every length (up to past 16, NUL bytes included, so zero padding cannot
    /// make two keys equal) is found with its first id, and every non-key is not.
    #[test]
    fn piece_table_agrees_with_a_hash_map() {
        let mut rng = crate::rng::Rng(3);
        let alphabet = b"ab\0\xff#z";
        let mut want: FxHashMap<Vec<u8>, u32> = FxHashMap::default();
        let mut entries = Vec::new();
        for id in 0..3000u32 {
            let n = 1 + rng.below(24);
            let key: Vec<u8> = (0..n).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            want.entry(key.clone()).or_insert(id);
            entries.push((key, id));
        }
        let table = PieceTable::new(entries.iter().map(|(k, id)| (k.as_slice(), *id)));
        for (key, _) in &entries {
            assert_eq!(table.get(key), want.get(key).copied(), "{key:?}");
            for cut in 0..key.len() {
                assert_eq!(table.get(&key[..cut]), want.get(&key[..cut]).copied(), "{:?}", &key[..cut]);
            }
        }
        for _ in 0..20_000 {
            let n = rng.below(20);
            let probe: Vec<u8> = (0..n).map(|_| alphabet[rng.below(alphabet.len())]).collect();
            assert_eq!(table.get(&probe), want.get(&probe).copied(), "{probe:?}");
        }
    }
}
