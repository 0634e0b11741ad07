//! `unicode_normalize`: Unicode normalisation forms, accent stripping and ASCII folding.

use serde::{Deserialize, Serialize};
use unicode_normalization::{char::is_combining_mark, UnicodeNormalization};

use crate::contract::document::Document;
use crate::contract::{Step, Verdict};

/// Normalise text to one Unicode form, optionally dropping accents or everything non-ASCII.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UnicodeNormalize {
    /// `nfc`, `nfd`, `nfkc` or `nfkd`. The K forms also fold compatibility characters
    /// (ligatures, full-width letters, `…` → `...`).
    #[serde(default = "default_form")]
    pub form: Form,
    /// Drop combining marks after decomposition (`café` → `cafe`), as BERT uncased does.
    #[serde(default)]
    pub strip_accents: bool,
    /// After NFKD, drop every character with no ASCII form (the seed recipe
    /// `normalize('NFKD', t).encode('ascii', 'ignore')`). Lossy: emoji and CJK disappear.
    #[serde(default)]
    pub ascii_fold: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Form {
    Nfc,
    Nfd,
    Nfkc,
    Nfkd,
}

fn default_form() -> Form {
    Form::Nfkc
}

impl Default for UnicodeNormalize {
    fn default() -> Self {
        UnicodeNormalize { form: default_form(), strip_accents: false, ascii_fold: false }
    }
}

impl Step for UnicodeNormalize {
    fn apply(&self, doc: &mut Document) -> Verdict {
        // Every normal form of ASCII text is the text itself, and so is that of text the
        // quick check (UAX #15) finds already normalised: no copy for either.
        if !doc.text.is_ascii() && !self.already_normal(&doc.text) {
            doc.text = self.normalize(&doc.text);
        }
        Verdict::Keep
    }
}

impl UnicodeNormalize {
    /// Whether `text` is certainly in this step's form already (a `Maybe` counts as no).
    fn already_normal(&self, text: &str) -> bool {
        use unicode_normalization::{is_nfc_quick, is_nfd_quick, is_nfkc_quick, is_nfkd_quick, IsNormalized};
        if self.ascii_fold || self.strip_accents {
            return false;
        }
        let chars = text.chars();
        let quick = match self.form {
            Form::Nfc => is_nfc_quick(chars),
            Form::Nfd => is_nfd_quick(chars),
            Form::Nfkc => is_nfkc_quick(chars),
            Form::Nfkd => is_nfkd_quick(chars),
        };
        quick == IsNormalized::Yes
    }

    /// Normalises only the non-ASCII islands of the text: ASCII is already in every normal
    /// form, and since an ASCII character never composes with what precedes it, the text can
    /// be cut before any ASCII character that is followed by ASCII. Each island starts one
    /// character early so a combining mark meets its ASCII base (`e` + U+0301 → `é`).
    pub fn normalize(&self, text: &str) -> String {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut done = 0;
        let mut i = 0;
        while let Some(off) = bytes[i..].iter().position(|b| !b.is_ascii()) {
            let first_non_ascii = i + off;
            // Start at the ASCII character before the island, if there is one.
            let start = if first_non_ascii > done { first_non_ascii - 1 } else { first_non_ascii };
            let mut end = first_non_ascii;
            while end < bytes.len() && !bytes[end].is_ascii() {
                end += 1;
            }
            out.push_str(&text[done..start]);
            out.push_str(&self.normalize_all(&text[start..end]));
            done = end;
            i = end;
        }
        out.push_str(&text[done..]);
        out
    }

    /// The plain definition, applied to a whole string.
    pub fn normalize_all(&self, text: &str) -> String {
        if self.ascii_fold {
            return text.nfkd().filter(char::is_ascii).collect();
        }
        if !self.strip_accents {
            return match self.form {
                Form::Nfc => text.nfc().collect(),
                Form::Nfd => text.nfd().collect(),
                Form::Nfkc => text.nfkc().collect(),
                Form::Nfkd => text.nfkd().collect(),
            };
        }
        let compat = matches!(self.form, Form::Nfkc | Form::Nfkd);
        let stripped: String = if compat {
            text.nfkd().filter(|c| !is_combining_mark(*c)).collect()
        } else {
            text.nfd().filter(|c| !is_combining_mark(*c)).collect()
        };
        match self.form {
            Form::Nfc => stripped.nfc().collect(),
            Form::Nfkc => stripped.nfkc().collect(),
            Form::Nfd | Form::Nfkd => stripped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(form: Form, strip_accents: bool, ascii_fold: bool) -> UnicodeNormalize {
        UnicodeNormalize { form, strip_accents, ascii_fold }
    }

    #[test]
    fn table() {
        let cases: &[(UnicodeNormalize, &str, &str)] = &[
            (n(Form::Nfc, false, false), "cafe\u{301}", "café"),
            (n(Form::Nfd, false, false), "café", "cafe\u{301}"),
            (n(Form::Nfkc, false, false), "ﬁne … Ｆｕｌｌ", "fine ... Full"),
            (n(Form::Nfkd, true, false), "Amélie naïve Zoë", "Amelie naive Zoe"),
            (n(Form::Nfc, true, false), "Crème brûlée", "Creme brulee"),
            (n(Form::Nfkd, false, true), "Café “quoted” 😀 東京 ok", "Cafe quoted   ok"),
            (n(Form::Nfkc, false, false), "plain ascii", "plain ascii"),
            (n(Form::Nfkc, true, false), "", ""),
        ];
        for (step, input, want) in cases {
            assert_eq!(step.normalize(input), *want, "{step:?} on {input:?}");
            assert_eq!(step.normalize_all(input), *want, "{step:?} on {input:?}");
        }
    }

    #[test]
    fn island_normalisation_equals_whole_text_normalisation() {
        let texts = [
            "plain e\u{301}te\u{301} with combining marks after ASCII",
            "\u{301}leading mark, ﬁnal ligature ﬁ, Ｆｕｌｌ width, ½ and ², Å vs A\u{30A}",
            "한국어 text 東京 and e\u{308}\u{301} stacked marks…",
            "ends with non-ascii é",
            "",
        ];
        for form in [Form::Nfc, Form::Nfd, Form::Nfkc, Form::Nfkd] {
            for (strip, fold) in [(false, false), (true, false), (false, true)] {
                let step = n(form, strip, fold);
                for t in texts {
                    assert_eq!(step.normalize(t), step.normalize_all(t), "{step:?} on {t:?}");
                }
            }
        }
    }

    /// The step leaves text alone only when normalising would not change it.
    #[test]
    fn the_quick_check_skips_only_text_already_normal() {
        let texts = ["café — naïve 東京 😀", "e\u{301}", "ﬁnal", "…", "Å", "한국어", "x\u{308}\u{301}"];
        for form in [Form::Nfc, Form::Nfd, Form::Nfkc, Form::Nfkd] {
            for (strip, fold) in [(false, false), (true, false), (false, true)] {
                let step = n(form, strip, fold);
                for t in texts {
                    let mut doc = Document { text: t.to_string(), ..Default::default() };
                    step.apply(&mut doc);
                    assert_eq!(doc.text, step.normalize_all(t), "{step:?} on {t:?}");
                }
            }
        }
        assert!(n(Form::Nfkc, false, false).already_normal("café — naïve 😀"));
        assert!(!n(Form::Nfkc, false, false).already_normal("ﬁnal …"));
    }

    #[test]
    fn accents_are_stripped_but_letters_without_marks_survive() {
        let s = n(Form::Nfkc, true, false);
        assert_eq!(s.normalize("Øre straße"), "Øre straße");
    }
}
