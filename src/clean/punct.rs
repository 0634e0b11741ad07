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
        // Ordinary ASCII is copied in bulk; only characters a rule cares about go one by one.
        let plain = |x: u8| x.is_ascii() && !matches!(x, b'!' | b'?' | b'.' | b',') && !x.is_ascii_whitespace();
        // A single space between two ASCII non-whitespace bytes is written as it is by the
        // whitespace rule too, so it stays in the bulk copy (runs were a word long otherwise).
        let solid = |x: u8| x.is_ascii() && !x.is_ascii_whitespace();
        let plain_at = |i: usize| {
            plain(b[i])
                || (b[i] == b' '
                    && (!self.whitespace || (i > 0 && i + 1 < b.len() && solid(b[i - 1]) && solid(b[i + 1]))))
        };
        while pos < b.len() {
            let run = (pos..b.len()).position(|i| !plain_at(i)).unwrap_or(b.len() - pos);
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
        ];
        for (input, want) in cases {
            assert_eq!(p.standardize(input), *want, "input: {input:?}");
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
