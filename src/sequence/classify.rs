//! `classify_sequences`: `[CLS] tokens [SEP]` rows for sequence classification, with
//! truncation or sliding windows.

use serde::{Deserialize, Serialize};

use crate::contract::document::Document;
use crate::contract::manifest::SpecialIds;
use crate::contract::{Step, Verdict};

/// Build classifier inputs of at most `max_len` tokens from each document's ids.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClassifySequences {
    /// Longest sequence, [CLS] and [SEP] included.
    #[serde(default = "default_max_len")]
    pub max_len: usize,
    /// `head` keeps the start, `tail` the end, `head_tail` `head_tokens` from the start and the
    /// rest from the end (Sun et al. 2019, best on IMDb), `window` emits overlapping chunks.
    #[serde(default)]
    pub truncation: Truncation,
    /// With `head_tail`: tokens kept from the start. Default a quarter of `max_len` (128 of
    /// 512, Sun et al.'s split), so any valid `max_len` gives a valid default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_tokens: Option<usize>,
    /// With `window`: tokens between window starts. Default 0.8 × max_len.
    #[serde(default)]
    pub window_stride: Option<usize>,
    /// [CLS]/[SEP] ids, from the tokenize step; set when the pipeline is prepared.
    #[serde(skip)]
    pub specials: Option<SpecialIds>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Truncation {
    Head,
    Tail,
    #[default]
    HeadTail,
    Window,
}

fn default_max_len() -> usize {
    512
}

impl ClassifySequences {
    /// Content tokens per sequence: `max_len` minus [CLS] and [SEP].
    pub fn content_len(&self) -> usize {
        self.max_len.saturating_sub(2)
    }

    /// Tokens kept from the start with `head_tail`.
    pub fn head(&self) -> usize {
        self.head_tokens.unwrap_or(self.max_len / 4)
    }

    pub fn stride(&self) -> usize {
        self.window_stride.unwrap_or((self.max_len as f64 * 0.8) as usize).max(1)
    }

    /// Problems with the options: `(field, message)`.
    pub fn check(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if self.max_len < 3 {
            p.push(("max_len", format!("must be at least 3 ([CLS], one token, [SEP]), got {}", self.max_len)));
        }
        if self.truncation == Truncation::HeadTail && self.head() > self.content_len() {
            p.push(("head_tokens", format!("{} is more than max_len − 2 = {}", self.head(), self.content_len())));
        }
        if self.truncation == Truncation::Window && (self.stride() == 0 || self.stride() > self.content_len()) {
            p.push((
                "window_stride",
                format!(
                    "must be 1..={} (max_len − 2) so windows cover every token, got {}",
                    self.content_len(),
                    self.stride()
                ),
            ));
        }
        p
    }

    /// The content slices of one document's tokens.
    pub fn chunks<'a>(&self, tokens: &'a [u32]) -> Vec<Vec<&'a [u32]>> {
        let c = self.content_len();
        let n = tokens.len();
        if n <= c {
            return vec![vec![tokens]];
        }
        match self.truncation {
            Truncation::Head => vec![vec![&tokens[..c]]],
            Truncation::Tail => vec![vec![&tokens[n - c..]]],
            Truncation::HeadTail => {
                let head = self.head().min(c);
                vec![vec![&tokens[..head], &tokens[n - (c - head)..]]]
            }
            Truncation::Window => {
                let stride = self.stride();
                let mut out = Vec::new();
                let mut start = 0;
                loop {
                    let end = (start + c).min(n);
                    out.push(vec![&tokens[start..end]]);
                    if end == n {
                        break;
                    }
                    start += stride;
                }
                out
            }
        }
    }
}

impl Step for ClassifySequences {
    fn apply(&self, doc: &mut Document) -> Verdict {
        let s = self.specials.expect("classify_sequences prepared before running");
        let chunks = self.chunks(&doc.tokens);
        let kept: usize = if self.truncation == Truncation::Window {
            doc.tokens.len()
        } else {
            chunks[0].iter().map(|p| p.len()).sum()
        };
        doc.dropped_tokens = (doc.tokens.len() - kept) as u32;
        doc.sequences = chunks
            .into_iter()
            .map(|parts| {
                let mut seq = Vec::with_capacity(self.max_len);
                seq.push(s.cls);
                for p in parts {
                    seq.extend_from_slice(p);
                }
                seq.push(s.sep);
                seq
            })
            .collect();
        Verdict::Keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: SpecialIds =
        SpecialIds { pad: 0, unk: 100, cls: 101, sep: 102, mask: 103, pair_separators: 1, pair_type_ids: true };

    fn run(step: &ClassifySequences, n: u32) -> Document {
        let mut doc = Document { tokens: (1000..1000 + n).collect(), ..Default::default() };
        let step = ClassifySequences { specials: Some(S), ..step.clone() };
        assert_eq!(step.apply(&mut doc), Verdict::Keep);
        doc
    }

    fn step(max_len: usize, truncation: Truncation) -> ClassifySequences {
        ClassifySequences { max_len, truncation, head_tokens: Some(3), window_stride: None, specials: None }
    }

    #[test]
    fn short_documents_are_untouched_in_every_mode() {
        for t in [Truncation::Head, Truncation::Tail, Truncation::HeadTail, Truncation::Window] {
            let d = run(&step(10, t), 5);
            assert_eq!(d.sequences, vec![vec![101, 1000, 1001, 1002, 1003, 1004, 102]]);
            assert_eq!(d.dropped_tokens, 0);
        }
    }

    #[test]
    fn head_tail_and_head_tail_keep_the_right_tokens() {
        let d = run(&step(10, Truncation::Head), 20);
        assert_eq!(d.sequences[0], [vec![101], (1000..1008).collect(), vec![102]].concat());
        assert_eq!(d.dropped_tokens, 12);
        let d = run(&step(10, Truncation::Tail), 20);
        assert_eq!(d.sequences[0], [vec![101], (1012..1020).collect(), vec![102]].concat());
        let d = run(&step(10, Truncation::HeadTail), 20);
        // exactly head_tokens (3) from the start, the other 5 from the end
        assert_eq!(d.sequences[0], [vec![101], (1000..1003).collect(), (1015..1020).collect(), vec![102]].concat());
        assert_eq!(d.sequences[0].len(), 10);
        assert_eq!(d.dropped_tokens, 12);
    }

    #[test]
    fn windows_cover_every_token_and_respect_max_len() {
        for (max_len, n, stride) in
            [(10, 20, None), (10, 8, None), (10, 9, Some(8)), (12, 101, Some(3)), (512, 3000, None)]
        {
            let mut st = step(max_len, Truncation::Window);
            st.window_stride = stride;
            let d = run(&st, n);
            let mut covered = vec![false; n as usize];
            for seq in &d.sequences {
                assert!(seq.len() <= max_len);
                assert_eq!((seq[0], *seq.last().unwrap()), (101, 102));
                for &t in &seq[1..seq.len() - 1] {
                    covered[(t - 1000) as usize] = true;
                }
            }
            assert!(covered.iter().all(|&c| c), "max_len {max_len} n {n}");
            assert_eq!(d.dropped_tokens, 0);
            // consecutive windows start `stride` apart
            if d.sequences.len() > 1 {
                assert_eq!(d.sequences[1][1] - d.sequences[0][1], st.stride() as u32);
            }
        }
    }

    #[test]
    fn options_are_checked() {
        let mut s = step(10, Truncation::HeadTail);
        s.head_tokens = Some(9);
        assert_eq!(s.check()[0].0, "head_tokens");
        let mut s = step(10, Truncation::Window);
        s.window_stride = Some(9);
        assert_eq!(s.check()[0].0, "window_stride");
        // The defaults fit any max_len: only max_len given, as for short texts.
        for max_len in [3, 16, 128, 512, 4096] {
            let s: ClassifySequences = serde_json::from_str(&format!(r#"{{"max_len": {max_len}}}"#)).unwrap();
            assert!(s.check().is_empty(), "max_len {max_len}: {:?}", s.check());
            assert_eq!(s.truncation, Truncation::HeadTail);
        }
        let s: ClassifySequences = serde_json::from_str("{}").unwrap();
        assert_eq!(s.head(), 128, "128 of 512, as before");
        assert_eq!(step(2, Truncation::Head).check()[0].0, "max_len");
    }
}
