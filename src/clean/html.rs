//! `html_strip`: removes markup and decodes entities, keeping text that only looks like a tag.

use serde::{Deserialize, Serialize};

use crate::contract::document::Document;
use crate::contract::{Step, Verdict};

/// Remove HTML tags (`<br />` and block tags become line breaks) and decode named and numeric
/// entities. A `<` only starts a tag when a tag name follows it, so "if a < b and c > d" survives.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HtmlStrip {
    /// Replace block-level tags (`br`, `p`, `div`, `li`, headings, …) with a line break instead of
    /// nothing, so sentences on either side do not run together.
    #[serde(default = "yes")]
    pub block_breaks: bool,
}

fn yes() -> bool {
    true
}

const BLOCK_TAGS: &[&str] = &[
    "br",
    "p",
    "div",
    "li",
    "ul",
    "ol",
    "tr",
    "td",
    "th",
    "table",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "blockquote",
    "pre",
    "hr",
    "section",
    "article",
    "header",
    "footer",
    "dd",
    "dt",
];
const RAW_TEXT_TAGS: &[&str] = &["script", "style"];

impl Step for HtmlStrip {
    fn apply(&self, doc: &mut Document) -> Verdict {
        if doc.text.contains(['<', '&']) {
            doc.text = self.strip(&doc.text);
        }
        Verdict::Keep
    }
}

impl HtmlStrip {
    pub fn strip(&self, text: &str) -> String {
        let mut out = String::with_capacity(text.len());
        let bytes = text.as_bytes();
        let mut i = 0;
        let mut copied = 0;
        while let Some(off) = memchr::memchr(b'<', &bytes[i..]) {
            let lt = i + off;
            match parse_tag(&text[lt..]) {
                Some(tag) => {
                    out.push_str(&text[copied..lt]);
                    let mut end = lt + tag.len;
                    if tag.opening && RAW_TEXT_TAGS.contains(&tag.name.as_str()) {
                        // Script and style bodies are code, not text: skip to the closing tag.
                        let close = format!("</{}", tag.name);
                        end = find_ascii_ci(&text[end..], &close)
                            .map(|p| {
                                let from = end + p;
                                from + text[from..].find('>').map_or(text.len() - from, |g| g + 1)
                            })
                            .unwrap_or(text.len());
                    }
                    // Inline tags vanish as a browser renders them: `good<i>bad</i>` is "goodbad".
                    if self.block_breaks && BLOCK_TAGS.contains(&tag.name.as_str()) {
                        out.push('\n');
                    }
                    i = end;
                    copied = end;
                }
                None => i = lt + 1,
            }
        }
        out.push_str(&text[copied..]);
        if out.contains('&') {
            html_escape::decode_html_entities(&out).into_owned()
        } else {
            out
        }
    }
}

struct Tag {
    /// Lower-cased tag name; empty for comments, doctypes and processing instructions.
    name: String,
    opening: bool,
    len: usize,
}

/// Recognises `<name attr="v">`, `</name>`, `<name/>`, `<!-- … -->`, `<!DOCTYPE …>` at the start of
/// `s`. Anything else (a `<` followed by a space, a digit, `=`…) is text.
fn parse_tag(s: &str) -> Option<Tag> {
    let b = s.as_bytes();
    if let Some(body) = s.strip_prefix("<!--") {
        let end = body.find("-->")? + 4 + 3;
        return Some(Tag { name: String::new(), opening: false, len: end });
    }
    if b.len() > 2 && (b[1] == b'!' || b[1] == b'?') && b[2].is_ascii_alphabetic() {
        let end = s.find('>')? + 1;
        return Some(Tag { name: String::new(), opening: false, len: end });
    }
    let (closing, name_start) = if b.get(1) == Some(&b'/') { (true, 2) } else { (false, 1) };
    if !b.get(name_start)?.is_ascii_alphabetic() {
        return None;
    }
    let mut j = name_start;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'-') {
        j += 1;
    }
    let name = s[name_start..j].to_ascii_lowercase();
    // After the name: `>`, `/>`, or whitespace and attributes, all before any new `<` or line end
    // of a runaway (> 1 KiB) "tag".
    let rest = &b[j..];
    match rest.first() {
        Some(b'>') => return Some(Tag { name, opening: !closing, len: j + 1 }),
        Some(b'/') if rest.get(1) == Some(&b'>') => return Some(Tag { name, opening: false, len: j + 2 }),
        Some(c) if c.is_ascii_whitespace() => {}
        _ => return None,
    }
    let mut k = j;
    let mut quote: Option<u8> = None;
    while k < b.len() && k - j < 1024 {
        let c = b[k];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == b'"' || c == b'\'' => quote = Some(c),
            None if c == b'>' => return Some(Tag { name, opening: !closing, len: k + 1 }),
            None if c == b'<' => return None,
            None => {}
        }
        k += 1;
    }
    None
}

fn find_ascii_ci(hay: &str, needle: &str) -> Option<usize> {
    let n = needle.len();
    hay.as_bytes().windows(n).position(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table() {
        let h = HtmlStrip { block_breaks: true };
        let cases: &[(&str, &str)] = &[
            ("Great film.<br /><br />Loved it", "Great film.\n\nLoved it"),
            ("if a < b and c > d then", "if a < b and c > d then"),
            ("3<5 and 7>2", "3<5 and 7>2"),
            ("<i>Amélie</i> is &quot;great&quot; &amp; fun", "Amélie is \"great\" & fun"),
            ("caf&eacute; &#233; &#xE9; &hellip;", "café é é …"),
            ("&lt;br&gt; stays text", "<br> stays text"),
            ("a<!-- hidden -->b", "ab"),
            ("<a href=\"x>y\">link</a> text", "link text"),
            ("<script>var x = 1 < 2;</script>Hello", "Hello"),
            ("<p>One</p><p>Two</p>", "\nOne\n\nTwo\n"),
            ("unclosed <b and more", "unclosed <b and more"),
            ("I <3 this", "I <3 this"),
            ("R&D &unknown; stays", "R&D &unknown; stays"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(h.strip(input), *want, "input: {input:?}");
        }
    }

    #[test]
    fn no_block_breaks_removes_tags_only() {
        let h = HtmlStrip { block_breaks: false };
        assert_eq!(h.strip("a<br />b"), "ab");
    }
}
