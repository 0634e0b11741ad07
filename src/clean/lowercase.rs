//! `lowercase`: Unicode lower-casing.

use serde::{Deserialize, Serialize};

use crate::contract::document::Document;
use crate::contract::{Step, Verdict};

/// Lower-case the whole text (Unicode-aware; ASCII takes a fast path).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Lowercase {}

impl Step for Lowercase {
    fn apply(&self, doc: &mut Document) -> Verdict {
        if doc.text.is_ascii() {
            doc.text.make_ascii_lowercase();
        } else {
            doc.text = doc.text.to_lowercase();
        }
        Verdict::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowercases_ascii_and_unicode() {
        for (input, want) in [("Hello WORLD", "hello world"), ("ÉCOLE Straße ΣΑΣ", "école straße σας"), ("", "")]
        {
            let mut d = Document { text: input.into(), ..Default::default() };
            Lowercase {}.apply(&mut d);
            assert_eq!(d.text, want);
        }
    }
}
