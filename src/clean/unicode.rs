//! `unicode_normalize`: Unicode normalisation forms, accent stripping and ASCII folding.

use serde::{Deserialize, Serialize};
use unicode_normalization::{char::is_combining_mark, UnicodeNormalization};

use super::{Step, Verdict};
use crate::document::Document;

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
        UnicodeNormalize {
            form: default_form(),
            strip_accents: false,
            ascii_fold: false,
        }
    }
}

impl Step for UnicodeNormalize {
    fn apply(&self, doc: &mut Document) -> Verdict {
        // Every normal form of ASCII text is the text itself.
        if !doc.text.is_ascii() {
            doc.text = self.normalize(&doc.text);
        }
        Verdict::Keep
    }
}

impl UnicodeNormalize {
    pub fn normalize(&self, text: &str) -> String {
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
        UnicodeNormalize {
            form,
            strip_accents,
            ascii_fold,
        }
    }

    #[test]
    fn table() {
        let cases: &[(UnicodeNormalize, &str, &str)] = &[
            (n(Form::Nfc, false, false), "cafe\u{301}", "café"),
            (n(Form::Nfd, false, false), "café", "cafe\u{301}"),
            (
                n(Form::Nfkc, false, false),
                "ﬁne … Ｆｕｌｌ",
                "fine ... Full",
            ),
            (
                n(Form::Nfkd, true, false),
                "Amélie naïve Zoë",
                "Amelie naive Zoe",
            ),
            (n(Form::Nfc, true, false), "Crème brûlée", "Creme brulee"),
            (
                n(Form::Nfkd, false, true),
                "Café “quoted” 😀 東京 ok",
                "Cafe quoted   ok",
            ),
            (n(Form::Nfkc, false, false), "plain ascii", "plain ascii"),
            (n(Form::Nfkc, true, false), "", ""),
        ];
        for (step, input, want) in cases {
            assert_eq!(step.normalize(input), *want, "{step:?} on {input:?}");
        }
    }

    #[test]
    fn accents_are_stripped_but_letters_without_marks_survive() {
        let s = n(Form::Nfkc, true, false);
        assert_eq!(s.normalize("Øre straße"), "Øre straße");
    }
}
