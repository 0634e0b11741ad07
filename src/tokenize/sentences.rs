//! Sentence segmentation for reviews, after the rules of Unicode sentence boundaries
//! (UAX #29) that matter for English prose — `!`/`?` end a sentence, a period does unless a
//! lower-case word follows (SB8: "e.g. this"), closing quotes and brackets stay with their
//! sentence — plus line breaks (`<br />` after `html_strip`) as hard boundaries and no break
//! after common abbreviations ("Mr.", "Dr.", "vs.") or single initials. Written here rather
//! than with `unicode-segmentation` because its table lookups were a fifth of the whole
//! pretraining run; this is a byte scan.

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
        let mut start = 0;
        let mut pending: Option<usize> = None; // start of a sentence held back after an abbreviation
        for end in candidate_ends(line) {
            let s = pending.take().unwrap_or(start);
            if ends_with_abbreviation(&line[s..end]) && end < line.len() {
                pending = Some(s);
            } else {
                push_trimmed(text, line_start + s, line_start + end, &mut spans);
            }
            start = end;
        }
        let s = pending.unwrap_or(start);
        push_trimmed(text, line_start + s, line_start + line.len(), &mut spans);
        line_start += line.len() + 1;
    }
    spans
}

/// Byte offsets just after each sentence-ending run (terminators and closing punctuation).
fn candidate_ends(line: &str) -> Vec<usize> {
    let b = line.as_bytes();
    let mut ends = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let (is_term, len) = terminator_at(line, i);
        if !is_term {
            i += 1;
            continue;
        }
        // The whole run of terminators: "...", "?!", "…".
        let mut strong = b[i] != b'.' && len == 1;
        let mut j = i + len;
        loop {
            let (t, l) = terminator_at(line, j);
            if !t {
                break;
            }
            strong |= b[j] != b'.' && l == 1;
            j += l;
        }
        // Closing quotes and brackets belong to the sentence they close.
        loop {
            let rest = &line[j..];
            match rest.chars().next() {
                Some(c @ ('"' | '\'' | ')' | ']' | '\u{201D}' | '\u{2019}' | '\u{BB}')) => j += c.len_utf8(),
                _ => break,
            }
        }
        let after = &line[j..];
        let next_word = after.trim_start();
        let spaced = after.len() != next_word.len();
        if j == b.len() || (spaced && (strong || !next_word.chars().next().is_some_and(char::is_lowercase))) {
            ends.push(j);
        }
        i = j.max(i + 1);
    }
    ends
}

/// Whether a sentence terminator (`.`, `!`, `?`, `…`) starts at byte `i`, and its length.
fn terminator_at(line: &str, i: usize) -> (bool, usize) {
    match line.as_bytes().get(i) {
        Some(b'.' | b'!' | b'?') => (true, 1),
        Some(0xE2) if line[i..].starts_with('\u{2026}') => (true, 3),
        _ => (false, 0),
    }
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
