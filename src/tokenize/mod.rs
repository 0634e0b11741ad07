//! `tokenize`: token ids for each document, from a BERT `vocab.txt` (WordPiece, the fast path)
//! or any HF `tokenizer.json` (BPE, Unigram, WordPiece; [`hf`]).

pub mod hf;
pub mod sentences;
pub mod wordpiece;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::contract::document::Document;
use crate::contract::manifest::{TokenizerInfo, VocabRef};
use crate::contract::{Step, Verdict};
use crate::sequence::words::Words;
pub use wordpiece::WordPiece;

/// Split text into token ids, identical to HF's (`BertTokenizerFast` for a `vocab.txt`; the
/// tokenizer itself for a `tokenizer.json`). A document with no tokens at all is rejected
/// (`no_tokens`), one the tokenizer fails on too (`tokenizer_error`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tokenize {
    /// A BERT `vocab.txt` (one token per line). Give this or `tokenizer`.
    #[serde(default)]
    pub vocab: Option<PathBuf>,
    /// An HF `tokenizer.json`: BERT WordPiece tokenizers take the fast path; any other (RoBERTa,
    /// ModernBERT, XLM-R …: byte-level BPE, Unigram) runs through the `tokenizers` crate, with
    /// its own specials and sequence layout. `lowercase` and `strip_accents` then come from it.
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// Lower-case before splitting (uncased models).
    #[serde(default = "yes")]
    pub lowercase: bool,
    /// Drop accents (NFD, then remove nonspacing marks). Default: same as `lowercase`.
    #[serde(default)]
    pub strip_accents: Option<bool>,
    /// Longer words become a single [UNK], as in BERT.
    #[serde(default = "default_max_word_chars")]
    pub max_word_chars: usize,
    /// The loaded encoder; set when the pipeline is prepared.
    #[serde(skip)]
    pub encoder: Option<Arc<Encoder>>,
    /// Record sentence ends (for pretraining pairs); set when the pipeline is prepared.
    #[serde(skip)]
    pub sentences: bool,
}

fn yes() -> bool {
    true
}

fn default_max_word_chars() -> usize {
    100
}

impl PartialEq for Tokenize {
    fn eq(&self, other: &Self) -> bool {
        (&self.vocab, &self.tokenizer, self.lowercase, self.strip_accents, self.max_word_chars)
            == (&other.vocab, &other.tokenizer, other.lowercase, other.strip_accents, other.max_word_chars)
    }
}

/// A loaded tokenizer.
#[derive(Debug)]
pub enum Encoder {
    WordPiece(WordPiece),
    Hf(hf::HfTokenizer),
}

impl Encoder {
    /// The ids of `text` (no specials), appended to `out`.
    pub fn encode(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        match self {
            Encoder::WordPiece(w) => {
                w.encode(text, out);
                Ok(())
            }
            Encoder::Hf(h) => h.encode(text, out),
        }
    }

    /// The ids of `text` appended to `out`, and the token count at each sentence end appended
    /// to `ends`.
    pub fn encode_sentences(&self, text: &str, out: &mut Vec<u32>, ends: &mut Vec<u32>) -> Result<()> {
        let spans = sentences::sentence_spans(text);
        match self {
            Encoder::WordPiece(w) => {
                // Sentence ends fall between words, so encoding sentence by sentence gives the
                // same ids as encoding the whole text.
                for (start, end) in spans {
                    w.encode(&text[start..end], out);
                    if ends.last() != Some(&(out.len() as u32)) {
                        ends.push(out.len() as u32);
                    }
                }
                Ok(())
            }
            Encoder::Hf(h) => h.encode_sentences(text, &spans, out, ends),
        }
    }

    pub fn info(&self) -> TokenizerInfo {
        match self {
            Encoder::WordPiece(w) => TokenizerInfo {
                vocab_sha256: w.vocab_sha256.clone(),
                vocab_id: Some(w.vocab_id.clone()),
                vocab_size: w.vocab_size,
                lowercase: w.lowercase,
                strip_accents: Some(w.strip_accents),
                special_ids: w.specials,
                encoder: "wordpiece".into(),
            },
            Encoder::Hf(h) => h.info.clone(),
        }
    }

    /// Where the vocabulary's words start, for whole-word masking.
    pub fn words(&self) -> Words {
        match self {
            Encoder::WordPiece(w) => {
                let vocab = w.vocab_entries();
                Words::continuation_prefix(vocab.iter().map(|(t, id)| (t.as_str(), *id)), "##")
            }
            Encoder::Hf(h) => h.words(),
        }
    }

    fn unk(&self) -> u32 {
        match self {
            Encoder::WordPiece(w) => w.specials.unk,
            Encoder::Hf(h) => h.info.special_ids.unk,
        }
    }
}

impl Tokenize {
    /// The step for a vocabulary file, not yet loaded: a `tokenizer.json` (which carries its own
    /// normaliser), else a WordPiece `vocab.txt` read with these settings; the YAML's defaults
    /// otherwise.
    pub fn of_file(file: &Path, lowercase: bool, strip_accents: Option<bool>) -> Tokenize {
        let json = file.extension().is_some_and(|e| e == "json");
        Tokenize {
            vocab: (!json).then(|| file.to_path_buf()),
            tokenizer: json.then(|| file.to_path_buf()),
            lowercase,
            strip_accents,
            max_word_chars: default_max_word_chars(),
            encoder: None,
            sentences: false,
        }
    }

    /// Loads the vocabulary or tokenizer file.
    pub fn load(&self) -> Result<Encoder> {
        match (&self.vocab, &self.tokenizer) {
            (Some(vocab), None) => Ok(Encoder::WordPiece(WordPiece::from_vocab_file(
                vocab,
                self.lowercase,
                self.strip_accents,
                self.max_word_chars,
            )?)),
            (None, Some(path)) => load_tokenizer_json(path),
            (Some(_), Some(_)) => bail!("tokenize: give `vocab` or `tokenizer`, not both"),
            (None, None) => bail!("tokenize: set `vocab` (a vocab.txt) or `tokenizer` (a tokenizer.json)"),
        }
    }

    pub fn prepare(&mut self) -> Result<TokenizerInfo> {
        let encoder = self.load()?;
        let info = encoder.info();
        self.encoder = Some(Arc::new(encoder));
        Ok(info)
    }
}

/// The vocabulary of a `vocab.txt` or `tokenizer.json`, as the chain compares it. A
/// `tokenizer.json` carries its own normaliser; a `vocab.txt` none, so its settings come from
/// `config` (the model folder's `tokenizer_config.json`, see [`TokenizerConfig::read`]).
pub fn file_vocab(path: &Path, config: &TokenizerConfig) -> Result<VocabRef> {
    if path.extension().is_some_and(|e| e == "json") {
        return Ok(load_tokenizer_json(path)?.info().vocab());
    }
    let w = WordPiece::from_vocab_file(path, config.lowercase, config.strip_accents, default_max_word_chars())?;
    Ok(Encoder::WordPiece(w).info().vocab())
}

/// What a model folder's `tokenizer_config.json` says about tokenizing (HF's `BertTokenizer`
/// defaults where it is absent or silent: lower-case, accents stripped with it, no length).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenizerConfig {
    pub lowercase: bool,
    pub strip_accents: Option<bool>,
    /// `model_max_length`, unless HF's "unknown" sentinel (a huge number).
    pub model_max_length: Option<usize>,
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        TokenizerConfig { lowercase: true, strip_accents: None, model_max_length: None }
    }
}

impl TokenizerConfig {
    /// `dir/tokenizer_config.json`, or the defaults when there is none; a field of the wrong
    /// type is an error naming it.
    pub fn read(dir: &Path) -> Result<TokenizerConfig> {
        use serde_json::Value;
        let path = dir.join("tokenizer_config.json");
        let mut c = TokenizerConfig::default();
        if !crate::contract::reads::is_file(&path) {
            return Ok(c);
        }
        let text =
            crate::contract::reads::read(&path).with_context(|| format!("could not read '{}'", path.display()))?;
        let v: Value = serde_json::from_slice(&text).with_context(|| format!("'{}' is not JSON", path.display()))?;
        match v.get("do_lower_case") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => c.lowercase = *b,
            Some(other) => bail!("'{}': `do_lower_case` is {other}, not true or false", path.display()),
        }
        match v.get("strip_accents") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => c.strip_accents = Some(*b),
            Some(other) => bail!("'{}': `strip_accents` is {other}, not true, false or null", path.display()),
        }
        // HF writes a huge sentinel when the length is unknown.
        c.model_max_length =
            v.get("model_max_length").and_then(Value::as_u64).filter(|&n| n <= 1 << 20).map(|n| n as usize);
        Ok(c)
    }
}

/// A model folder's vocabulary file (its `tokenizer.json`, which carries its normaliser, else
/// its `vocab.txt`) and what it holds; `None` when it has neither.
pub fn folder_vocab(dir: &Path) -> Result<Option<(PathBuf, VocabRef)>> {
    for name in ["tokenizer.json", "vocab.txt"] {
        let path = dir.join(name);
        if crate::contract::reads::is_file(&path) {
            let vocab = file_vocab(&path, &TokenizerConfig::read(dir)?)?;
            return Ok(Some((path, vocab)));
        }
    }
    Ok(None)
}

/// HF's `BertWordPieceTokenizer` for a `vocab.txt`, built from the `tokenizers` crate's parts
/// (BertNormalizer, BertPreTokenizer, WordPiece, the five specials as added tokens): the
/// reference the fast path is compared with (tests, the tokenizer fuzz target), and the
/// `tokenizer.json` HF's `BertTokenizerFast` saves for that vocabulary.
pub fn hf_bert_tokenizer(vocab: &Path, lowercase: bool) -> Result<tokenizers::Tokenizer> {
    use tokenizers::models::wordpiece::WordPiece as HfWordPiece;
    use tokenizers::normalizers::BertNormalizer;
    use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
    use tokenizers::AddedToken;
    let err = |e: tokenizers::Error| anyhow::anyhow!("vocab '{}': {e}", vocab.display());
    let path = vocab.to_str().with_context(|| format!("'{}' is not a UTF-8 path", vocab.display()))?;
    let wp = HfWordPiece::from_file(path).unk_token("[UNK]".into()).build().map_err(err)?;
    let mut t = tokenizers::Tokenizer::new(wp);
    t.with_normalizer(Some(BertNormalizer::new(true, true, None, lowercase))).map_err(err)?;
    t.with_pre_tokenizer(Some(BertPreTokenizer));
    let specials: Vec<AddedToken> = wordpiece::SPECIALS.iter().map(|s| AddedToken::from(*s, true)).collect();
    t.add_special_tokens(specials).map_err(err)?;
    Ok(t)
}

/// A `tokenizer.json`'s bytes as the `tokenizers` crate's tokenizer. The JSON is parsed first
/// and the tokenizer read from the parsed value: the crate's own reader, fed the bytes, panics
/// on some malformed `decoder`s (tokenizers 0.23 `decoders/mod.rs`: `.expect("Helper")` on a
/// syntax error inside it), where an error naming the file is wanted.
pub fn parse_tokenizer_json(bytes: &[u8]) -> Result<tokenizers::Tokenizer> {
    let value: serde_json::Value = serde_json::from_slice(bytes)?;
    Ok(serde_json::from_value(value)?)
}

fn load_tokenizer_json(path: &std::path::Path) -> Result<Encoder> {
    use tokenizers::{ModelWrapper, NormalizerWrapper, PreTokenizerWrapper};
    let bytes =
        crate::contract::reads::read(path).with_context(|| format!("could not read tokenizer '{}'", path.display()))?;
    let sha = hex::encode(Sha256::digest(&bytes));
    let tokenizer = parse_tokenizer_json(&bytes)
        .map_err(|e| anyhow::anyhow!("'{}' is not a tokenizer.json: {e}", path.display()))?;
    // A BERT WordPiece tokenizer takes the fast path, with its own options.
    if let (
        ModelWrapper::WordPiece(wp),
        Some(NormalizerWrapper::BertNormalizer(norm)),
        Some(PreTokenizerWrapper::BertPreTokenizer(_)),
    ) = (tokenizer.get_model(), tokenizer.get_normalizer(), tokenizer.get_pre_tokenizer())
    {
        if norm.clean_text && norm.handle_chinese_chars && wp.continuing_subword_prefix == "##" {
            let vocab = tokenizers::Model::get_vocab(wp);
            let named = || format!("tokenizer '{}'", path.display());
            let mut w =
                WordPiece::from_tokens(vocab, norm.lowercase, norm.strip_accents, wp.max_input_chars_per_word, sha)
                    .with_context(named)?;
            // Sequences are built as the file's post-processor says (its ids, separators and
            // token types), not as a vocab.txt's BERT defaults.
            if let Some(specials) = hf::post_processor_specials(&tokenizer, &bytes).with_context(named)? {
                w.specials = specials;
            }
            return Ok(Encoder::WordPiece(w));
        }
    }
    Ok(Encoder::Hf(hf::HfTokenizer::new(path, tokenizer, &bytes, sha)?))
}

impl Step for Tokenize {
    fn apply(&self, doc: &mut Document) -> Verdict {
        let encoder = self.encoder.as_ref().expect("tokenize step prepared before running");
        doc.tokens.clear();
        doc.sentence_ends.clear();
        let done = if self.sentences {
            encoder.encode_sentences(&doc.text, &mut doc.tokens, &mut doc.sentence_ends)
        } else {
            encoder.encode(&doc.text, &mut doc.tokens)
        };
        if let Err(e) = done {
            return Verdict::Reject(format!("tokenizer_error: {e}"));
        }
        if doc.tokens.is_empty() {
            return Verdict::Reject("no_tokens".into());
        }
        let unk = encoder.unk();
        doc.unk_tokens = doc.tokens.iter().filter(|&&t| t == unk).count() as u32;
        Verdict::Keep
    }
}
