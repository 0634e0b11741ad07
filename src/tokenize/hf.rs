//! Any HF `tokenizer.json` through the `tokenizers` crate: byte-level BPE (RoBERTa, ModernBERT,
//! GPT-2 style), SentencePiece Unigram (XLM-R, ALBERT), WordPiece of other shapes. Ids are the
//! crate's, so they are HF's; what bertpipe adds is reading, from the file itself, what the
//! sequence steps need:
//!
//! - the sequence layout, by running the tokenizer's own post-processor on two ordinary tokens
//!   (`[CLS] A [SEP]` / `<s> A </s>`, one or two separators between a pair, whether the second
//!   segment gets token type 1) — whatever kind of post-processor it is;
//! - the pad, unknown and mask tokens (the padding settings, the model's unknown token, the usual
//!   names);
//! - where words start ([`Words`]), from the model and pre-tokenizer kinds.
//!
//! Documents are encoded without specials; sentence ends (for pretraining) come from the
//! tokens' byte offsets in one encoding of the whole text, because with byte-level BPE a sentence
//! encoded alone would lose the `Ġ` of its first word.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde_json::Value;
use tokenizers::{Encoding, Token, Tokenizer};

use crate::contract::manifest::{SpecialIds, TokenizerInfo};
use crate::sequence::words::Words;

/// A loaded `tokenizer.json` that is not a plain BERT WordPiece one.
pub struct HfTokenizer {
    tokenizer: Box<Tokenizer>,
    pub info: TokenizerInfo,
    words: Words,
}

impl std::fmt::Debug for HfTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tokenizers({} tokens)", self.info.vocab_size)
    }
}

impl HfTokenizer {
    /// `tokenizer`, read from `path` (whose bytes are `json`, with SHA-256 `sha`).
    ///
    /// A `tokenizer.json` saved with `truncation` or `padding` (many on the Hub are) keeps them in
    /// the file; encoding through it would cut every document at that length, or pad it. bertpipe
    /// builds sequences itself (`max_len`, windows, packing), as transformers does with its own
    /// `max_length`, so both are turned off here: the padding settings only name the pad token.
    pub fn new(path: &Path, mut tokenizer: Tokenizer, json: &[u8], sha: String) -> Result<HfTokenizer> {
        let named = |e: anyhow::Error| e.context(format!("tokenizer '{}'", path.display()));
        let saved_pad = tokenizer.get_padding().map(|p| p.pad_id);
        tokenizer.with_padding(None);
        tokenizer.with_truncation(None).map_err(|e| named(anyhow::anyhow!("{e}")))?;
        let spec: Value = serde_json::from_slice(json).map_err(|e| named(e.into()))?;
        let vocab = tokenizer.get_vocab(true);
        let largest = vocab.values().copied().max().unwrap_or(0) as usize;
        if largest >= super::wordpiece::MAX_VOCAB_IDS || largest >= 2 * vocab.len() + 1024 {
            bail!(
                "tokenizer '{}': the largest token id is {largest}, but it has {} tokens: ids must run from 0 without large gaps",
                path.display(),
                vocab.len()
            );
        }
        let special_ids = specials(&tokenizer, &spec, saved_pad).map_err(named)?;
        let words = words(&tokenizer, &spec);
        let info = TokenizerInfo {
            vocab_sha256: sha,
            // Its normaliser is the tokenizer's own; the content identity records the tokens only.
            vocab_id: Some(crate::contract::manifest::vocab_id(
                vocab.iter().map(|(t, &id)| (t.as_str(), id)),
                false,
                false,
            )),
            vocab_size: tokenizer.get_vocab_size(true),
            lowercase: false,
            strip_accents: None,
            special_ids,
            encoder: "tokenizers".into(),
        };
        Ok(HfTokenizer { tokenizer: Box::new(tokenizer), info, words })
    }

    /// The ids of `text`, no specials, appended to `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let enc = self.tokenizer.encode_fast(text, false).map_err(|e| anyhow::anyhow!("{e}"))?;
        out.extend_from_slice(enc.get_ids());
        Ok(())
    }

    /// The ids of `text` appended to `out`, and the token count at the end of each of its
    /// sentences (`spans`, byte ranges in order) appended to `ends`: a token belongs to the
    /// sentence its first byte is in, or to the next one when it starts between sentences.
    pub fn encode_sentences(
        &self,
        text: &str,
        spans: &[(usize, usize)],
        out: &mut Vec<u32>,
        ends: &mut Vec<u32>,
    ) -> Result<()> {
        let enc = self.tokenizer.encode(text, false).map_err(|e| anyhow::anyhow!("{e}"))?;
        let base = out.len();
        out.extend_from_slice(enc.get_ids());
        let offsets = enc.get_offsets();
        let mut t = 0;
        for &(_, end) in spans {
            while t < offsets.len() && offsets[t].0 < end {
                t += 1;
            }
            let at = (base + t) as u32;
            if t > 0 && ends.last() != Some(&at) {
                ends.push(at);
            }
        }
        let at = out.len() as u32;
        if out.len() > base && ends.last() != Some(&at) {
            ends.push(at);
        }
        Ok(())
    }

    pub fn words(&self) -> Words {
        self.words.clone()
    }

    /// The crate's tokenizer (tests compare with it).
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}

/// The specials and the sequence layout a tokenizer.json's own post-processor gives (for the
/// WordPiece fast path, which encodes by itself but must build sequences as the file says: a
/// BERT-vocabulary file with ModernBERT's pair template has no token type 1). `None` when the
/// file has no post-processor.
pub fn post_processor_specials(tokenizer: &Tokenizer, json: &[u8]) -> Result<Option<SpecialIds>> {
    if tokenizer.get_post_processor().is_none() {
        return Ok(None);
    }
    let mut t = tokenizer.clone();
    let saved_pad = t.get_padding().map(|p| p.pad_id);
    t.with_padding(None);
    t.with_truncation(None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let spec: Value = serde_json::from_slice(json)?;
    specials(&t, &spec, saved_pad).map(Some)
}

/// The specials and the sequence layout, from the post-processor, the padding settings the file
/// was saved with (`saved_pad`), the model and the added tokens.
fn specials(t: &Tokenizer, spec: &Value, saved_pad: Option<u32>) -> Result<SpecialIds> {
    let added = t.get_added_tokens_decoder();
    let is_special = |id: u32| added.get(&id).is_some_and(|a| a.special);
    // Two ordinary tokens stand for the segments.
    let mut ordinary = (0..t.get_vocab_size(true) as u32).filter(|&id| !is_special(id)).filter_map(|id| {
        let token = t.id_to_token(id)?;
        Some(Encoding::from_tokens(vec![Token::new(id, token, (0, 1))], 0))
    });
    let (Some(a), Some(b)) = (ordinary.next(), ordinary.next()) else {
        bail!("has fewer than two ordinary tokens");
    };
    let (ida, idb) = (a.get_ids()[0], b.get_ids()[0]);
    let show = |ids: &[u32]| {
        ids.iter()
            .map(|&id| {
                if id == ida {
                    "A".to_string()
                } else if id == idb {
                    "B".to_string()
                } else {
                    t.id_to_token(id).unwrap_or_else(|| id.to_string())
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let err = |e: tokenizers::Error| anyhow::anyhow!("its post-processor failed: {e}");
    let single = t.post_process(a.clone(), None, true).map_err(err)?;
    let (cls, sep) = match single.get_ids() {
        &[cls, x, sep] if x == ida => (cls, sep),
        ids => bail!(
            "its post-processor makes `{}` of one segment A; bertpipe builds sequences as a start token, the segment and an end token (`[CLS] A [SEP]`, `<s> A </s>`), so it needs a post-processor of that shape: set one in the tokenizer.json (HF `TemplateProcessing`, e.g. single `[CLS] $A [SEP]`, pair `[CLS] $A [SEP] $B [SEP]`)",
            show(ids)
        ),
    };
    let pair = t.post_process(a, Some(b), true).map_err(err)?;
    let ids = pair.get_ids();
    let seps = ids.len().saturating_sub(4);
    let shaped = ids.len() >= 5
        && ids[0] == cls
        && ids[1] == ida
        && ids[2..2 + seps].iter().all(|&s| s == sep)
        && ids[ids.len() - 2] == idb
        && ids[ids.len() - 1] == sep
        && (1..=2).contains(&seps);
    if !shaped {
        bail!(
            "its post-processor makes `{}` of a pair A, B; bertpipe needs `{cls} A {sep} B {sep}` with one or two separators between the segments: give the post-processor such a pair template",
            show(ids),
            cls = show(&[cls]),
            sep = show(&[sep])
        );
    }
    let pair_type_ids = pair.get_type_ids()[ids.len() - 2] == 1;
    let find = |role: &str, names: &[&str], first: Option<u32>| -> Result<u32> {
        first.or_else(|| names.iter().find_map(|n| t.token_to_id(n))).with_context(|| {
            format!(
                "has no {role} token (looked for {}): add one to the tokenizer.json as a special token",
                names.join(", ")
            )
        })
    };
    let pad = find("padding", &["[PAD]", "<pad>", "<|padding|>"], saved_pad)?;
    let model = &spec["model"];
    let unk_of_model = match model["type"].as_str() {
        Some("Unigram") => model["unk_id"].as_u64().map(|id| id as u32),
        _ => model["unk_token"].as_str().and_then(|s| t.token_to_id(s)),
    };
    let unk = find("unknown", &["[UNK]", "<unk>", "<|unk|>"], unk_of_model)?;
    let mask = find("mask", &["[MASK]", "<mask>", "<MASK>", "<|mask|>"], None)?;
    Ok(SpecialIds { pad, unk, cls, sep, mask, pair_separators: seps as u32, pair_type_ids })
}

/// Whether any part of a pre-tokenizer (a `Sequence`'s members too) is of `kind`.
fn find_kind<'a>(v: &'a Value, kind: &str) -> Option<&'a Value> {
    if v["type"].as_str() == Some(kind) {
        return Some(v);
    }
    v["pretokenizers"].as_array()?.iter().find_map(|p| find_kind(p, kind))
}

/// Where words start, by the model's and pre-tokenizer's kinds (see `sequence::words`).
fn words(t: &Tokenizer, spec: &Value) -> Words {
    let vocab = t.get_vocab(true);
    let entries = || vocab.iter().map(|(s, &id)| (s.as_str(), id));
    let model = &spec["model"];
    let text = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    match model["type"].as_str() {
        Some("WordPiece") => {
            return Words::continuation_prefix(
                entries(),
                &text(&model["continuing_subword_prefix"]).unwrap_or("##".into()),
            )
        }
        Some("BPE") => {
            if let Some(prefix) = text(&model["continuing_subword_prefix"]) {
                return Words::continuation_prefix(entries(), &prefix);
            }
            if let Some(suffix) = text(&model["end_of_word_suffix"]) {
                return Words::end_suffix(entries(), &suffix);
            }
        }
        _ => {}
    }
    let pre = &spec["pre_tokenizer"];
    if find_kind(pre, "ByteLevel").is_some() {
        let to_byte = byte_level_decoder();
        let bytes: Vec<(Vec<u8>, u32)> = vocab
            .iter()
            .map(|(s, &id)| {
                // Added tokens are not in the byte alphabet; their text is their bytes.
                let mapped: Option<Vec<u8>> = s.chars().map(|c| to_byte.get(&c).copied()).collect();
                (mapped.unwrap_or_else(|| s.as_bytes().to_vec()), id)
            })
            .collect();
        return Words::byte_level(bytes.iter().map(|(b, id)| (b.as_slice(), *id)));
    }
    if let Some(m) = find_kind(pre, "Metaspace") {
        let marker = text(&m["replacement"]).unwrap_or("▁".into());
        return Words::start_marker(entries(), &marker);
    }
    Words::default()
}

/// GPT-2's byte alphabet, reversed: the printable character standing for each byte.
fn byte_level_decoder() -> std::collections::HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut map = std::collections::HashMap::new();
    let mut n = 0u32;
    for b in 0..=255u8 {
        let c = if printable(b) {
            char::from(b)
        } else {
            n += 1;
            char::from_u32(255 + n).expect("below the surrogates")
        };
        map.insert(c, b);
    }
    map
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_byte_alphabet_is_gpt2s() {
        let m = super::byte_level_decoder();
        assert_eq!(m[&'Ġ'], b' ');
        assert_eq!(m[&'Ċ'], b'\n');
        assert_eq!(m[&'A'], b'A');
        assert_eq!(m.len(), 256);
    }
}
