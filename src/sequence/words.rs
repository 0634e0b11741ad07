//! Where words start, for whole-word masking: a rule of the tokenizer's kind and a few bits per
//! token id, so the pipeline's static masking and the trainer's dynamic masking — which sees
//! only ids — group tokens into the same words.
//!
//! A word is what the tokenizer's pre-tokenizer makes of the text (HF's `word_ids()`; checked
//! on every token boundary of the golden fixture by `tests/tokenize_families.rs`):
//! - WordPiece: a token and the `##` pieces after it;
//! - SentencePiece (`Metaspace`, XLM-R, ALBERT): a token starting with `▁` and the pieces after it;
//! - byte-level BPE (RoBERTa, ModernBERT, GPT-2): the GPT-2 split — a run of letters, of digits or
//!   of other symbols with the one space before it (`Ġ`), a contraction (`'ll`), a run of
//!   whitespace. A token continues the one before when it is the rest of a character split
//!   across tokens; when the one before is a lone space (the space of this token's run); when it
//!   is a contraction's tail after `'`; inside a run of whitespace (less the run's last
//!   character when something else follows it); or when it does not start with whitespace and
//!   its first character is of the class of the previous token's last (a character split
//!   across tokens is put back together from the row);
//! - BPE with an end-of-word suffix (`</w>`): a word ends at the token carrying it.

/// How a tokenizer marks words.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WordRule {
    /// No marks bertpipe reads: every token is its own word (whole-word masking is refused).
    #[default]
    None,
    /// Continuation pieces carry a prefix (`##`).
    ContinuationPrefix,
    /// Word starts carry a marker (`▁`).
    StartMarker,
    /// Word ends carry a suffix (`</w>`).
    EndSuffix,
    /// Byte-level BPE: whitespace and character classes (see the module doc).
    ByteLevel,
}

/// Per-id bits. `MARK`: has the prefix / marker / suffix; for byte-level, starts with
/// whitespace. The rest are byte-level only: `MID` starts inside a character (a UTF-8
/// continuation byte); `ALL_SPACE` is whitespace only; `LONE_SPACE` is exactly one space;
/// `APOSTROPHE` is `'`; `TAIL` is a contraction's tail (`s t re ve m ll d`); `CUT_FIRST` /
/// `CUT_LAST`: a character split across tokens, whose class the row tells; then the classes of
/// the first and last characters (2 bits each).
const MARK: u16 = 1;
const MID: u16 = 1 << 1;
const ALL_SPACE: u16 = 1 << 2;
const LONE_SPACE: u16 = 1 << 3;
const APOSTROPHE: u16 = 1 << 4;
const TAIL: u16 = 1 << 5;
const CUT_FIRST: u16 = 1 << 6; // the first character continues into the next token
const CUT_LAST: u16 = 1 << 7; // the last character began in this or an earlier token and ends later
const ONE_CHAR: u16 = 1 << 8; // a single character
const FIRST_SHIFT: u16 = 9;
const LAST_SHIFT: u16 = 11;

/// A character class of the GPT-2 split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum CharClass {
    Space = 0,
    Letter = 1,
    Number = 2,
    Other = 3,
}

impl CharClass {
    pub fn of(c: char) -> CharClass {
        use unicode_categories::UnicodeCategories;
        if c.is_whitespace() {
            CharClass::Space
        } else if c.is_letter() {
            CharClass::Letter
        } else if c.is_number() {
            CharClass::Number
        } else {
            CharClass::Other
        }
    }
}

/// Word boundaries of a vocabulary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Words {
    rule: WordRule,
    shapes: Vec<u16>,
    /// Byte-level: each token's bytes, for the characters split across tokens.
    bytes: Vec<Box<[u8]>>,
}

impl Words {
    pub fn rule(&self) -> WordRule {
        self.rule
    }

    /// Tokens whose string starts with `prefix` continue a word (`##`).
    pub fn continuation_prefix<'a>(vocab: impl IntoIterator<Item = (&'a str, u32)>, prefix: &str) -> Words {
        Self::by(WordRule::ContinuationPrefix, vocab, |t| t.starts_with(prefix))
    }

    /// Tokens whose string starts with `marker` start a word (`▁`).
    pub fn start_marker<'a>(vocab: impl IntoIterator<Item = (&'a str, u32)>, marker: &str) -> Words {
        Self::by(WordRule::StartMarker, vocab, |t| t.starts_with(marker))
    }

    /// Tokens whose string ends with `suffix` end a word (`</w>`).
    pub fn end_suffix<'a>(vocab: impl IntoIterator<Item = (&'a str, u32)>, suffix: &str) -> Words {
        Self::by(WordRule::EndSuffix, vocab, |t| t.ends_with(suffix))
    }

    /// Where a crafted vocabulary gives two tokens one id (`the` and `##ly`), the id splits words
    /// rather than joins them, whichever token the vocabulary lists last: a continuation only if
    /// every token of the id is one; a word start or end if any is.
    fn by<'a>(rule: WordRule, vocab: impl IntoIterator<Item = (&'a str, u32)>, mark: impl Fn(&str) -> bool) -> Words {
        const UNSEEN: u16 = u16::MAX;
        let mut shapes = Vec::new();
        for (token, id) in vocab {
            let id = id as usize;
            if shapes.len() <= id {
                shapes.resize(id + 1, UNSEEN);
            }
            let this = if mark(token) { MARK } else { 0 };
            shapes[id] = match shapes[id] {
                UNSEEN => this,
                seen if rule == WordRule::ContinuationPrefix => seen & this,
                seen => seen | this,
            };
        }
        for shape in &mut shapes {
            if *shape == UNSEEN {
                *shape = 0;
            }
        }
        Words { rule, shapes, bytes: Vec::new() }
    }

    /// Byte-level BPE: each token's bytes (already mapped back from the byte alphabet).
    pub fn byte_level<'a>(vocab: impl IntoIterator<Item = (&'a [u8], u32)>) -> Words {
        let (mut shapes, mut all) = (Vec::new(), Vec::new());
        for (bytes, id) in vocab {
            let id = id as usize;
            if shapes.len() <= id {
                shapes.resize(id + 1, 0);
                all.resize(id + 1, Box::default());
            }
            shapes[id] = byte_shape(bytes);
            all[id] = bytes.into();
        }
        Words { rule: WordRule::ByteLevel, shapes, bytes: all }
    }

    fn shape(&self, id: u32) -> u16 {
        self.shapes.get(id as usize).copied().unwrap_or(0)
    }

    fn token_bytes(&self, id: u32) -> &[u8] {
        self.bytes.get(id as usize).map_or(&[], |b| b)
    }

    /// Whether the token at `row[i]` continues the word of the token before it.
    pub fn continues(&self, row: &[u32], i: usize) -> bool {
        if i == 0 || i >= row.len() {
            return false;
        }
        let (prev, next) = (row[i - 1], row[i]);
        let s = self.shape(next);
        match self.rule {
            WordRule::None => false,
            WordRule::ContinuationPrefix => s & MARK != 0,
            WordRule::StartMarker => s & MARK == 0,
            WordRule::EndSuffix => self.shape(prev) & MARK == 0,
            WordRule::ByteLevel => {
                let p = self.shape(prev);
                if s & MID != 0 {
                    return true;
                }
                if s & MARK != 0 {
                    if s & ALL_SPACE == 0 || p & ALL_SPACE == 0 {
                        return false;
                    }
                    // Inside a run of whitespace: GPT-2 splits off its last character when
                    // something other than whitespace follows.
                    let last_of_run = s & ONE_CHAR != 0 && row.get(i + 1).is_some_and(|&n| self.shape(n) & MARK == 0);
                    return !last_of_run;
                }
                if p & LONE_SPACE != 0 || (p & APOSTROPHE != 0 && s & TAIL != 0) {
                    return true;
                }
                let last = if p & CUT_LAST != 0 { self.class_ending_at(row, i) } else { class_bits(p, LAST_SHIFT) };
                let first =
                    if s & CUT_FIRST != 0 { self.class_starting_at(row, i) } else { class_bits(s, FIRST_SHIFT) };
                last == first && last != CharClass::Space
            }
        }
    }

    /// The class of the character ending just before `row[i]`, put together from the tokens
    /// it is split across.
    fn class_ending_at(&self, row: &[u32], i: usize) -> CharClass {
        let mut buf: Vec<u8> = Vec::with_capacity(8);
        for j in (i.saturating_sub(4)..i).rev() {
            let b = self.token_bytes(row[j]);
            buf.splice(0..0, b.iter().copied());
            if b.iter().any(|&x| !(0x80..0xC0).contains(&x)) {
                break;
            }
        }
        last_class(&buf)
    }

    /// The class of the character starting `row[i]`, put together from the tokens it is split
    /// across.
    fn class_starting_at(&self, row: &[u32], i: usize) -> CharClass {
        let mut buf: Vec<u8> = Vec::with_capacity(8);
        for &id in row.iter().skip(i).take(4) {
            buf.extend_from_slice(self.token_bytes(id));
            if buf.len() >= utf8_len(buf[0]) {
                break;
            }
        }
        if buf.is_empty() {
            return CharClass::Other;
        }
        first_class(&buf)
    }
}

fn class_bits(shape: u16, shift: u16) -> CharClass {
    match (shape >> shift) & 3 {
        0 => CharClass::Space,
        1 => CharClass::Letter,
        2 => CharClass::Number,
        _ => CharClass::Other,
    }
}

/// The class of the first character of `bytes` (which start on a character).
fn first_class(bytes: &[u8]) -> CharClass {
    let len = utf8_len(bytes[0]).min(bytes.len());
    match std::str::from_utf8(&bytes[..len]) {
        Ok(c) => CharClass::of(c.chars().next().expect("not empty")),
        Err(_) => CharClass::Other, // a row cut mid-character
    }
}

/// The class of the last character of `bytes`, or of the one it ends inside.
fn last_class(bytes: &[u8]) -> CharClass {
    let Some(start) = bytes.iter().rposition(|&b| !(0x80..0xC0).contains(&b)) else {
        return CharClass::Other;
    };
    match std::str::from_utf8(&bytes[start..]) {
        Ok(c) => CharClass::of(c.chars().next().expect("not empty")),
        Err(_) => CharClass::Other,
    }
}

fn utf8_len(lead: u8) -> usize {
    match lead {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    }
}

/// A byte-level token's shape.
fn byte_shape(bytes: &[u8]) -> u16 {
    let Some(&b0) = bytes.first() else { return 0 };
    let last_start = bytes.iter().rposition(|&b| !(0x80..0xC0).contains(&b));
    let last_cut = match last_start {
        Some(at) => std::str::from_utf8(&bytes[at..]).is_err(),
        None => true,
    };
    let mut shape = if last_cut { CUT_LAST } else { (last_class(bytes) as u16) << LAST_SHIFT };
    if (0x80..0xC0).contains(&b0) {
        return shape | MID;
    }
    if bytes.len() < utf8_len(b0) || std::str::from_utf8(&bytes[..utf8_len(b0)]).is_err() {
        shape |= CUT_FIRST;
    }
    let first = first_class(bytes);
    shape |= (first as u16) << FIRST_SHIFT;
    if first == CharClass::Space {
        shape |= MARK;
    }
    if std::str::from_utf8(bytes).is_ok_and(|t| t.chars().all(char::is_whitespace)) {
        shape |= ALL_SPACE;
    }
    if bytes == b" " {
        shape |= LONE_SPACE;
    }
    if std::str::from_utf8(bytes).is_ok_and(|t| t.chars().count() == 1) {
        shape |= ONE_CHAR;
    }
    if bytes == b"'" {
        shape |= APOSTROPHE;
    }
    if matches!(bytes, b"s" | b"t" | b"re" | b"ve" | b"m" | b"ll" | b"d") {
        shape |= TAIL;
    }
    shape
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tokens sharing an id: the id splits words, in whichever order the vocabulary lists them.
    #[test]
    fn a_shared_id_splits_words_in_any_order() {
        let word = [("the", 1), ("##ly", 1), ("play", 0)];
        let reversed = [("play", 0), ("##ly", 1), ("the", 1)];
        for vocab in [&word[..], &reversed[..]] {
            let wp = Words::continuation_prefix(vocab.iter().copied(), "##");
            assert!(!wp.continues(&[0, 1], 1), "{vocab:?}");
            let sp = Words::start_marker(vocab.iter().map(|&(t, id)| (if t == "the" { "▁the" } else { t }, id)), "▁");
            assert!(!sp.continues(&[0, 1], 1), "{vocab:?}");
        }
    }

    #[test]
    fn rules() {
        let wp = Words::continuation_prefix([("play", 0), ("##ing", 1)], "##");
        assert!(wp.continues(&[0, 1], 1) && !wp.continues(&[1, 0], 1));
        let sp = Words::start_marker([("▁play", 0), ("ing", 1)], "▁");
        assert!(sp.continues(&[0, 1], 1) && !sp.continues(&[1, 0], 1));
        let suffix = Words::end_suffix([("play", 0), ("ing</w>", 1)], "</w>");
        assert!(suffix.continues(&[0, 1], 1) && !suffix.continues(&[1, 0], 1));
        let bl = Words::byte_level([
            (" play".as_bytes(), 0),
            (b"ing", 1),
            (b",", 2),
            (b"123", 3),
            (" ".as_bytes(), 4),
            (&[0xF0, 0x9F][..], 5),
            (&[0x98, 0x80][..], 6),
            (b"!!", 7),
            (b"(", 8),
            (b"'", 9),
            (b"ll", 10),
            (b"\t", 11),
            (&[0xC3][..], 12),
            (&[0xA9][..], 13),
            (b"t", 14),
        ]);
        assert!(bl.continues(&[1, 12, 13, 14], 1), "ing|é (é split in two)");
        assert!(bl.continues(&[1, 12, 13, 14], 3), "é|t");
        assert!(!bl.continues(&[5, 6, 14], 2), "😀|t");
        assert!(bl.continues(&[0, 1], 1), " play|ing");
        assert!(!bl.continues(&[1, 2], 1), "ing|, (letters then punctuation: two pre-tokens)");
        assert!(!bl.continues(&[1, 3], 1), "ing|123");
        assert!(!bl.continues(&[1, 0], 1) && !bl.continues(&[1, 4], 1), "a leading space starts a word");
        assert!(bl.continues(&[4, 1], 1) && bl.continues(&[4, 8], 1), "a lone space is the next run's");
        assert!(!bl.continues(&[11, 1], 1), "after other whitespace");
        assert!(bl.continues(&[4, 11], 1) && bl.continues(&[11, 4], 1), "a run of whitespace");
        assert!(!bl.continues(&[11, 11, 1], 1), "the run's last character goes with what follows");
        assert!(bl.continues(&[9, 10], 1), "' then ll: one contraction");
        assert!(!bl.continues(&[1, 9], 1), "the contraction is a word of its own");
        assert!(bl.continues(&[5, 6], 1), "the rest of a split character");
        assert!(bl.continues(&[2, 7], 1), ",|!! (one run of symbols)");
        assert!(!Words::default().continues(&[0, 1], 1));
    }
}
