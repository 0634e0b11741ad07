//! Sentence segmentation for reviews: Unicode sentence boundaries (UAX #29, the
//! `unicode-segmentation` crate), line breaks (`<br />` after `html_strip`) as hard boundaries,
//! and no break after common abbreviations ("Mr.", "Dr.", "vs.", "e.g.") or single initials.

use unicode_segmentation::UnicodeSegmentation;

/// Abbreviations that end with a period but rarely end a sentence (lower-cased, no period).
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "mt", "no", "vol", "approx", "dept",
    "inc", "ltd", "co", "corp", "gen", "col", "lt", "sgt", "capt", "rev", "hon", "fig", "ft", "oz", "u.s", "u.k",
    "a.k.a",
];

/// Byte ranges of the sentences of `text`, in order, trimmed; empty sentences are skipped.
pub fn sentence_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut line_start = 0;
    for line in text.split('\n') {
        let mut pending: Option<(usize, usize)> = None;
        for (off, piece) in line.split_sentence_bound_indices() {
            let start = line_start + off;
            let end = start + piece.len();
            let (s, e) = match pending.take() {
                Some((s, _)) => (s, end),
                None => (start, end),
            };
            if ends_with_abbreviation(&text[s..e]) {
                pending = Some((s, e));
            } else {
                push_trimmed(text, s, e, &mut spans);
            }
        }
        if let Some((s, e)) = pending {
            push_trimmed(text, s, e, &mut spans);
        }
        line_start += line.len() + 1;
    }
    spans
}

fn push_trimmed(text: &str, s: usize, e: usize, spans: &mut Vec<(usize, usize)>) {
    let piece = &text[s..e];
    let lead = piece.len() - piece.trim_start().len();
    let trail = piece.len() - piece.trim_end().len();
    if lead + trail < piece.len() {
        spans.push((s + lead, e - trail));
    }
}

/// "… Mr. " / "… J. " — the last word before the final period is an abbreviation or an initial.
fn ends_with_abbreviation(sentence: &str) -> bool {
    let t = sentence.trim_end();
    let Some(body) = t.strip_suffix('.') else { return false };
    let word = body.rsplit(|c: char| c.is_whitespace() || c == '(' || c == '"').next().unwrap_or("");
    if word.is_empty() {
        return false;
    }
    let mut chars = word.chars();
    let single_initial = matches!((chars.next(), chars.next()), (Some(c), None) if c.is_uppercase());
    single_initial || ABBREVIATIONS.contains(&word.to_lowercase().as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentences(text: &str) -> Vec<&str> {
        sentence_spans(text).into_iter().map(|(s, e)| &text[s..e]).collect()
    }

    #[test]
    fn table() {
        let cases: &[(&str, &[&str])] = &[
            (
                "Great film. Loved it! Would I watch again? Yes.",
                &["Great film.", "Loved it!", "Would I watch again?", "Yes."],
            ),
            (
                "Mr. Smith and Dr. Jones met Prof. X. Then they left.",
                &["Mr. Smith and Dr. Jones met Prof. X. Then they left."],
            ),
            ("It was directed by J. R. Bob. It was fine.", &["It was directed by J. R. Bob.", "It was fine."]),
            ("Wait... what? He said \"Go home.\" She did.", &["Wait... what?", "He said \"Go home.\"", "She did."]),
            (
                "First paragraph without a period\nSecond paragraph.",
                &["First paragraph without a period", "Second paragraph."],
            ),
            ("Action, drama, etc. were all there. Good.", &["Action, drama, etc. were all there.", "Good."]),
            ("", &[]),
            ("  \n \n", &[]),
            ("no punctuation at all", &["no punctuation at all"]),
        ];
        for (text, want) in cases {
            assert_eq!(sentences(text), *want, "{text:?}");
        }
    }

    #[test]
    fn spans_cover_all_non_space_text_in_order() {
        let text = "One. Two!\nThree? Mr. Four five.  Six";
        let spans = sentence_spans(text);
        let joined: String = spans.iter().map(|&(s, e)| &text[s..e]).collect::<Vec<_>>().join(" ");
        assert_eq!(joined.split_whitespace().collect::<Vec<_>>(), text.split_whitespace().collect::<Vec<_>>());
        assert!(spans.windows(2).all(|w| w[0].1 <= w[1].0));
    }
}
