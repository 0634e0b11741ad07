//! `punctuation`: standardises punctuation runs, quotes and whitespace in one pass.

use serde::{Deserialize, Serialize};

use crate::contract::document::Document;
use crate::contract::{Step, Verdict};

/// Standardise punctuation. Every rule can be switched off on its own.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Punctuation {
    /// A run of `!` and `?` becomes its first character (`!!!` → `!`, `?!?` → `?`).
    pub collapse_exclamations: bool,
    /// Two or more dots, or `…`, become `...`.
    pub ellipsis: bool,
    /// A run of commas becomes one comma.
    pub collapse_commas: bool,
    /// Curly quotes and apostrophes (‘ ’ ‚ ‛ “ ” „ ‟) become ASCII `'` and `"`.
    pub ascii_quotes: bool,
    /// Whitespace runs become one space; leading and trailing whitespace is removed.
    pub whitespace: bool,
    /// With `whitespace`, a run that contains a line break becomes one `\n` instead of a space
    /// (keeps paragraph and `<br />` boundaries for sentence splitting).
    pub keep_line_breaks: bool,
}

impl Default for Punctuation {
    fn default() -> Self {
        Punctuation {
            collapse_exclamations: true,
            ellipsis: true,
            collapse_commas: true,
            ascii_quotes: true,
            whitespace: true,
            keep_line_breaks: false,
        }
    }
}

impl Step for Punctuation {
    fn apply(&self, doc: &mut Document) -> Verdict {
        doc.text = self.standardize(&doc.text);
        Verdict::Keep
    }
}

impl Punctuation {
    pub fn standardize(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let b = text.as_bytes();
        let mut pos = 0;
        // Some(saw_line_break) while inside a whitespace run that has not been written yet.
        let mut pending_ws: Option<bool> = None;
        let flush_ws = |pending: &mut Option<bool>, out: &mut String| {
            if let Some(nl) = pending.take() {
                if !out.is_empty() {
                    out.push(if nl && self.keep_line_breaks { '\n' } else { ' ' });
                }
            }
        };
        while pos < b.len() {
            let run = self.plain_run(b, pos);
            if run > 0 {
                flush_ws(&mut pending_ws, &mut out);
                out.push_str(&text[pos..pos + run]);
                pos += run;
                continue;
            }
            let c = text[pos..].chars().next().expect("on a char boundary");
            pos += c.len_utf8();
            if self.whitespace && c.is_whitespace() {
                let nl = matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}');
                pending_ws = Some(pending_ws.unwrap_or(false) || nl);
                continue;
            }
            flush_ws(&mut pending_ws, &mut out);
            match c {
                '!' | '?' if self.collapse_exclamations => {
                    out.push(c);
                    while pos < b.len() && matches!(b[pos], b'!' | b'?') {
                        pos += 1;
                    }
                }
                '.' | '…' if self.ellipsis => {
                    let mut dots = if c == '…' { 3 } else { 1 };
                    loop {
                        if b.get(pos) == Some(&b'.') {
                            dots += 1;
                            pos += 1;
                        } else if text[pos..].starts_with('…') {
                            dots += 3;
                            pos += '…'.len_utf8();
                        } else {
                            break;
                        }
                    }
                    out.push_str(if dots >= 2 { "..." } else { "." });
                }
                ',' if self.collapse_commas => {
                    out.push(',');
                    while b.get(pos) == Some(&b',') {
                        pos += 1;
                    }
                }
                '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' if self.ascii_quotes => out.push('\''),
                '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' if self.ascii_quotes => out.push('"'),
                _ => out.push(c),
            }
        }
        out
    }

    /// How many bytes from `pos` on are copied as they are: ordinary ASCII, and (as the
    /// whitespace rule would write it anyway) a single space between two ASCII non-whitespace
    /// bytes. Sixteen bytes at a time where SSE2 is there (every x86-64): byte by byte, this
    /// scan was most of the step.
    fn plain_run(&self, b: &[u8], pos: usize) -> usize {
        let mut i = pos;
        #[cfg(target_arch = "x86_64")]
        if self.whitespace {
            i = plain_prefix_sse2(b, i);
        }
        while i < b.len() && self.plain_at(b, i) {
            i += 1;
        }
        i - pos
    }

    fn plain_at(&self, b: &[u8], i: usize) -> bool {
        // Only characters a rule cares about go one by one.
        let plain = |x: u8| x.is_ascii() && !matches!(x, b'!' | b'?' | b'.' | b',') && !is_white(x);
        let solid = |x: u8| x.is_ascii() && !is_white(x);
        plain(b[i])
            || (b[i] == b' ' && (!self.whitespace || (i > 0 && i + 1 < b.len() && solid(b[i - 1]) && solid(b[i + 1]))))
    }
}

/// ASCII whitespace as `char::is_whitespace` has it: `u8::is_ascii_whitespace` leaves out the
/// vertical tab, which the bulk copy then kept where the rule turns it into a space.
fn is_white(x: u8) -> bool {
    matches!(x, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// The first index from `i` on, in steps of 16, of a block holding a byte that
/// [`Punctuation::plain_at`] (with the whitespace rule) does not take; the scalar scan goes on from
/// there. Needs the byte before and after each block, so it stops short of the text's ends.
#[cfg(target_arch = "x86_64")]
fn plain_prefix_sse2(b: &[u8], mut i: usize) -> usize {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of x86-64; every load reads b[i - 1 .. i + 17], inside `b` by the
    // loop condition.
    unsafe {
        let eq = |v: __m128i, c: u8| _mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8));
        let white = |v: __m128i| {
            _mm_or_si128(
                _mm_or_si128(eq(v, b' '), _mm_or_si128(eq(v, b'\t'), eq(v, 0x0B))),
                _mm_or_si128(eq(v, b'\n'), _mm_or_si128(eq(v, 0x0C), eq(v, b'\r'))),
            )
        };
        // Bits of the bytes that are ASCII and not whitespace.
        let solid = |v: __m128i| !(_mm_movemask_epi8(v) | _mm_movemask_epi8(white(v))) & 0xFFFF;
        while i >= 1 && i + 17 <= b.len() {
            let at = |k: usize| _mm_loadu_si128(b.as_ptr().add(k) as *const __m128i);
            let (prev, cur, next) = (at(i - 1), at(i), at(i + 1));
            let special =
                _mm_or_si128(_mm_or_si128(eq(cur, b'!'), eq(cur, b'?')), _mm_or_si128(eq(cur, b'.'), eq(cur, b',')));
            let lone_space = _mm_movemask_epi8(eq(cur, b' ')) & solid(prev) & solid(next);
            let stop =
                (_mm_movemask_epi8(cur) | _mm_movemask_epi8(white(cur)) | _mm_movemask_epi8(special)) & !lone_space;
            if stop != 0 {
                return i + stop.trailing_zeros() as usize;
            }
            i += 16;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let p = Punctuation::default();
        let cases: &[(&str, &str)] = &[
            ("Wow!!! Really??? Yes?!?!", "Wow! Really? Yes?"),
            ("Well.... maybe… or.. not", "Well... maybe... or... not"),
            ("end. Start", "end. Start"),
            // Single spaces go through the bulk copy only between ASCII non-whitespace bytes.
            (" a b ", "a b"),
            ("a \u{a0}b c\u{a0} d", "a b c d"),
            ("a  b\t c . d", "a b c . d"),
            ("x !! y ,, z", "x ! y , z"),
            ("a,, b,,, c", "a, b, c"),
            ("\u{201C}Great\u{201D} isn\u{2019}t \u{2018}it\u{2019}", "\"Great\" isn't 'it'"),
            ("  lots   of\t\tspace \n\n here  ", "lots of space here"),
            ("", ""),
            ("…", "..."),
            // The vertical tab is whitespace (`char::is_whitespace`), inside and at the ends.
            ("\x0bGreat movie \x0b really \x0b\x0b good\x0b", "Great movie really good"),
            ("a\x0bb", "a b"),
        ];
        for (input, want) in cases {
            assert_eq!(p.standardize(input), *want, "input: {input:?}");
        }
    }

    /// The sixteen-byte scan stops where the byte-by-byte one does, from every start, on text
    /// dense in what it must stop at (rule characters, whitespace runs, lone spaces, UTF-8).
    #[test]
    fn block_scan_stops_where_the_byte_scan_does() {
        let p = Punctuation::default();
        let pieces: [&[u8]; 16] = [
            b"a",
            b"Zq",
            b" ",
            b"  ",
            b"\t",
            b"\n",
            b"\x0b",
            b"\x0c",
            b"\r",
            b"!",
            b"?",
            b".",
            b",",
            b"\xc3\xa9",
            b"x y",
            b"\x01",
        ];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..3_000 {
            let mut text = Vec::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let n = (state % 60) as usize;
            for k in 0..n {
                let r = state.rotate_left(k as u32 * 7);
                // Mostly letters and single spaces, as in prose, so that blocks run long.
                text.extend_from_slice(if r % 3 == 0 { pieces[(r >> 8) as usize % 16] } else { b"word " });
            }
            for pos in 0..text.len() {
                let bytewise = (pos..text.len()).position(|i| !p.plain_at(&text, i)).unwrap_or(text.len() - pos);
                assert_eq!(p.plain_run(&text, pos), bytewise, "text {:?} from {pos}", String::from_utf8_lossy(&text));
            }
        }
    }

    #[test]
    fn rules_switch_off_independently() {
        let p = Punctuation { collapse_exclamations: false, whitespace: false, ..Default::default() };
        assert_eq!(p.standardize("Hi!!!  there"), "Hi!!!  there");
        let p = Punctuation { keep_line_breaks: true, ..Default::default() };
        assert_eq!(p.standardize("one.\n\n two.  three"), "one.\ntwo. three");
        let p = Punctuation { ascii_quotes: false, ellipsis: false, ..Default::default() };
        assert_eq!(p.standardize("\u{201C}a\u{201D}…"), "\u{201C}a\u{201D}…");
    }
}
