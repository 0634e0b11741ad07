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
                    if let (true, Some(raw)) = (tag.opening, tag.raw_text) {
                        // Script and style bodies are code, not text: skip to the closing tag.
                        end = find_closing(&text[end..], raw)
                            .map(|p| {
                                let from = end + p;
                                from + text[from..].find('>').map_or(text.len() - from, |g| g + 1)
                            })
                            .unwrap_or(text.len());
                    }
                    // Inline tags vanish as a browser renders them: `good<i>bad</i>` is "goodbad".
                    if self.block_breaks && tag.block {
                        out.push('\n');
                    }
                    i = end;
                    copied = end;
                }
                None => i = lt + 1,
            }
        }
        out.push_str(&text[copied..]);
        match memchr::memchr(b'&', out.as_bytes()) {
            Some(first) => decode_entities(&out, first).unwrap_or(out),
            None => out,
        }
    }
}

/// A recognised tag: what the stripper needs of its name, which is never copied.
struct Tag {
    /// `br`, `p`, `div`… (any case): rendered as a line break.
    block: bool,
    /// `script` or `style` (any case): its body is skipped up to the closing tag.
    raw_text: Option<&'static str>,
    opening: bool,
    len: usize,
}

impl Tag {
    fn named(name: &[u8], opening: bool, len: usize) -> Tag {
        let is = |t: &&str| t.as_bytes().eq_ignore_ascii_case(name);
        Tag { block: BLOCK_TAGS.iter().any(is), raw_text: RAW_TEXT_TAGS.iter().copied().find(is), opening, len }
    }

    /// Comments, doctypes and processing instructions: no name.
    fn unnamed(len: usize) -> Tag {
        Tag { block: false, raw_text: None, opening: false, len }
    }
}

/// Recognises `<name attr="v">`, `</name>`, `<name/>`, `<!-- … -->`, `<!DOCTYPE …>` at the start of
/// `s`. Anything else (a `<` followed by a space, a digit, `=`…) is text.
fn parse_tag(s: &str) -> Option<Tag> {
    let b = s.as_bytes();
    if let Some(body) = s.strip_prefix("<!--") {
        let end = body.find("-->")? + 4 + 3;
        return Some(Tag::unnamed(end));
    }
    if b.len() > 2 && (b[1] == b'!' || b[1] == b'?') && b[2].is_ascii_alphabetic() {
        let end = s.find('>')? + 1;
        return Some(Tag::unnamed(end));
    }
    let (closing, name_start) = if b.get(1) == Some(&b'/') { (true, 2) } else { (false, 1) };
    if !b.get(name_start)?.is_ascii_alphabetic() {
        return None;
    }
    let mut j = name_start;
    while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'-') {
        j += 1;
    }
    let name = &b[name_start..j];
    // After the name: `>`, `/>`, or whitespace and attributes, all before any new `<` or line end
    // of a runaway (> 1 KiB) "tag".
    let rest = &b[j..];
    match rest.first() {
        Some(b'>') => return Some(Tag::named(name, !closing, j + 1)),
        Some(b'/') if rest.get(1) == Some(&b'>') => return Some(Tag::named(name, false, j + 2)),
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
            None if c == b'>' => return Some(Tag::named(name, !closing, k + 1)),
            None if c == b'<' => return None,
            None => {}
        }
        k += 1;
    }
    None
}

/// Where `</name` (any case) starts in `hay`.
fn find_closing(hay: &str, name: &str) -> Option<usize> {
    let (hay, name) = (hay.as_bytes(), name.as_bytes());
    let mut from = 0;
    while let Some(p) = memchr::memmem::find(&hay[from..], b"</") {
        let at = from + p;
        if hay.get(at + 2..at + 2 + name.len()).is_some_and(|n| n.eq_ignore_ascii_case(name)) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// `text` with its character references decoded exactly as `html_escape::decode_html_entities`
/// decodes them (the WHATWG names, `&#…;` and `&#x…;` except NUL and C0 controls other than
/// tab, line feed, form feed and carriage return; a reference runs from `&` to the next `;` unless
/// another `&` comes first), or `None` where nothing decodes. `first` is the first `&`. The
/// search jumps from `&` to the next `&` or `;` rather than stepping a byte at a time, and the
/// common names skip the table: this pass was a sixth of `html_strip` on dense markup.
fn decode_entities(text: &str, first: usize) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let (mut copied, mut amp) = (0, first);
    while let Some(off) = memchr::memchr2(b'&', b';', &bytes[amp + 1..]) {
        let end = amp + 1 + off;
        if bytes[end] == b'&' {
            amp = end;
            continue;
        }
        let mut buf = [0u8; 4];
        if let Some(value) = reference(&text[amp + 1..end], &mut buf) {
            let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
            out.push_str(&text[copied..amp]);
            out.push_str(value);
            copied = end + 1;
        }
        match memchr::memchr(b'&', &bytes[end + 1..]) {
            Some(next) => amp = end + 1 + next,
            None => break,
        }
    }
    let mut out = out?;
    out.push_str(&text[copied..]);
    Some(out)
}

/// What the reference between `&` and `;` stands for.
fn reference<'a>(body: &str, buf: &'a mut [u8; 4]) -> Option<&'a str> {
    let code = match body.as_bytes() {
        [b'#', b'x' | b'X', digits @ ..] => {
            if !digits.first()?.is_ascii_hexdigit() {
                return None;
            }
            u32::from_str_radix(&body[2..], 16).ok()?
        }
        [b'#', digits @ ..] => {
            if !digits.first()?.is_ascii_digit() {
                return None;
            }
            body[1..].parse::<u32>().ok()?
        }
        name => {
            return Some(match name {
                b"amp" => "&",
                b"lt" => "<",
                b"gt" => ">",
                b"quot" => "\"",
                b"apos" => "'",
                b"nbsp" => "\u{00A0}",
                _ => {
                    let table = &html_escape::NAMED_ENTITIES;
                    table.binary_search_by(|(t, _)| (*t).cmp(name)).ok().map(|i| table[i].1)?
                }
            });
        }
    };
    let c = char::from_u32(code)?;
    if c < ' ' && !matches!(c, '\t' | '\n' | '\u{0C}' | '\r') {
        return None;
    }
    Some(c.encode_utf8(buf))
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
    fn tag_names_match_in_any_case() {
        let h = HtmlStrip { block_breaks: true };
        assert_eq!(h.strip("a<BR/>b<Br >c<bR\n/>d"), "a\nb\nc\nd");
        assert_eq!(h.strip("x<SCRIPT type=\"t\">if (a<b) {}</ScRiPt >y"), "xy");
        assert_eq!(h.strip("x<style>p{}</STYLE>y<brr>z<b-r>w"), "xyzw");
        assert_eq!(h.strip("x<script>never closed"), "x");
        assert_eq!(h.strip("x</script>y"), "xy");
    }

    /// The entity pass against `html_escape` itself, on text made of the pieces its rules turn on
    /// (`&`, `;`, `#`, `x`, digits, names from the table, controls, multi-byte characters), and on
    /// every name in the table.
    #[test]
    fn entities_decode_as_html_escape_decodes_them() {
        let reference = |s: &str| html_escape::decode_html_entities(s).into_owned();
        let ours = |s: &str| match s.find('&') {
            Some(first) => decode_entities(s, first).unwrap_or_else(|| s.to_string()),
            None => s.to_string(),
        };
        let pieces = [
            "&",
            ";",
            "#",
            "x",
            "X",
            "0",
            "9",
            "1",
            "f",
            "F",
            "a",
            "amp",
            "AMP",
            "lt",
            "quot",
            "nbsp",
            "eacute",
            "nLt",
            "hellip",
            "#39",
            "#x27",
            "#0",
            "#9",
            "#13",
            "#31",
            "#127",
            "#x10FFFF",
            "#x110000",
            "#xD800",
            "#4294967296",
            "#+1",
            "#x+1",
            "&#31;",
            "&#1;",
            "&#x1f;",
            "&#0;",
            "&#12;",
            "&#127;",
            "&#x80;",
            "&#xdfff;",
            "&#X1F600;",
            "&#0065;",
            " ",
            "é",
            "\u{1F600}",
            "<",
            ">",
            "&amp;",
            "&&",
            ";;",
        ];
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            let mut s = String::new();
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let n = (state % 12) as usize;
            for k in 0..n {
                s.push_str(pieces[((state >> (5 * k)) % pieces.len() as u64) as usize]);
            }
            assert_eq!(ours(&s), reference(&s), "text: {s:?}");
        }
        for (name, _) in html_escape::NAMED_ENTITIES.iter() {
            let name = std::str::from_utf8(name).expect("ASCII names");
            for s in [format!("&{name};"), format!("a&{name};b&{name}"), format!("&{name}&{name};;")] {
                assert_eq!(ours(&s), reference(&s), "text: {s:?}");
            }
        }
    }

    #[test]
    fn no_block_breaks_removes_tags_only() {
        let h = HtmlStrip { block_breaks: false };
        assert_eq!(h.strip("a<br />b"), "ab");
    }
}
