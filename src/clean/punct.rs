//! `punctuation`: standardises punctuation runs, quotes and whitespace in one pass.

use serde::{Deserialize, Serialize};

use super::{Step, Verdict};
use crate::document::Document;

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
        let mut chars = text.chars().peekable();
        let mut pending_ws: Option<bool> = None; // Some(saw_newline) while inside a whitespace run
        while let Some(c) = chars.next() {
            if self.whitespace && c.is_whitespace() {
                let nl = matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}');
                pending_ws = Some(pending_ws.unwrap_or(false) || nl);
                continue;
            }
            if let Some(nl) = pending_ws.take() {
                if !out.is_empty() {
                    out.push(if nl && self.keep_line_breaks {
                        '\n'
                    } else {
                        ' '
                    });
                }
            }
            match c {
                '!' | '?' if self.collapse_exclamations => {
                    out.push(c);
                    while matches!(chars.peek(), Some('!' | '?')) {
                        chars.next();
                    }
                }
                '.' | '…' if self.ellipsis => {
                    let mut n = if c == '…' { 3 } else { 1 };
                    while let Some(&d) = chars.peek() {
                        match d {
                            '.' => n += 1,
                            '…' => n += 3,
                            _ => break,
                        }
                        chars.next();
                    }
                    out.push_str(if n >= 2 { "..." } else { "." });
                }
                ',' if self.collapse_commas => {
                    out.push(',');
                    while chars.peek() == Some(&',') {
                        chars.next();
                    }
                }
                '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' if self.ascii_quotes => {
                    out.push('\'')
                }
                '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' if self.ascii_quotes => {
                    out.push('"')
                }
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
            ("a,, b,,, c", "a, b, c"),
            (
                "\u{201C}Great\u{201D} isn\u{2019}t \u{2018}it\u{2019}",
                "\"Great\" isn't 'it'",
            ),
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
        let p = Punctuation {
            collapse_exclamations: false,
            whitespace: false,
            ..Default::default()
        };
        assert_eq!(p.standardize("Hi!!!  there"), "Hi!!!  there");
        let p = Punctuation {
            keep_line_breaks: true,
            ..Default::default()
        };
        assert_eq!(p.standardize("one.\n\n two.  three"), "one.\ntwo. three");
        let p = Punctuation {
            ascii_quotes: false,
            ellipsis: false,
            ..Default::default()
        };
        assert_eq!(p.standardize("\u{201C}a\u{201D}…"), "\u{201C}a\u{201D}…");
    }
}
