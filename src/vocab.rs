//! `bertpipe vocab train`: a WordPiece vocabulary learned from a pipeline's cleaned text with
//! the HF `tokenizers` trainer (what `BertWordPieceTokenizer.train` runs), written as
//! `vocab.txt` and `tokenizer.json`, then measured: the [UNK] rate on the same corpus.
//!
//! The same corpus gives the same vocabulary, whatever the thread count and run. `tokenizers`'
//! own `Tokenizer::train` does not: it counts words into a hash map with a random seed, and the
//! trainer numbers the `##` continuation characters in that map's order, so ties between
//! equally frequent merges fall differently from run to run (and past 1,000 distinct
//! characters, which ones it keeps). Here the words are counted (BERT's normaliser and
//! pre-tokeniser, as `Tokenizer::train` applies them), sorted, and handed to the same trainer
//! in a map with fixed seeds, with the alphabet chosen beforehand. The map's order, and so the
//! vocabulary, still depends on the hash function the build uses (ahash picks AES instructions
//! when built for a CPU that has them), so it is the same for one binary, not across builds
//! for different CPUs.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use tokenizers::decoders::wordpiece::WordPiece as WordPieceDecoder;
use tokenizers::models::bpe::{BpeTrainer, BPE};
use tokenizers::models::wordpiece::WordPiece as HfWordPiece;
use tokenizers::normalizers::BertNormalizer;
use tokenizers::pre_tokenizers::bert::BertPreTokenizer;
use tokenizers::processors::bert::BertProcessing;
use tokenizers::{
    AddedToken, NormalizedString, Normalizer, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer,
    Tokenizer,
};

use crate::config::{Pipeline, PipelineStep};
use crate::contract::progress::{Progress, Total};
use crate::pipeline::parallel::{self, CorpusPart, Outcome};
use crate::tokenize::wordpiece::SPECIALS;
use crate::tokenize::{Tokenize, WordPiece};

/// What vocabulary to learn: the flags of `bertpipe vocab train` and, with the same names and
/// defaults, the keys of an experiment's vocab stage. The pipeline whose cleaned text it
/// learns from (and the output folder) the command takes as arguments and a stage wires.
#[derive(Debug, Clone, PartialEq, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VocabSettings {
    /// Vocabulary size, special tokens included.
    #[arg(long, default_value_t = DEFAULT_SIZE)]
    pub size: usize,
    /// Drop words and merges seen fewer times than this.
    #[arg(long, default_value_t = DEFAULT_MIN_FREQUENCY)]
    pub min_frequency: u64,
    /// Keep case and accents. Without it the pipeline's tokenize step, if any, decides;
    /// uncased (like bert-base-uncased) otherwise.
    #[arg(long)]
    pub cased: bool,
}

const DEFAULT_SIZE: usize = 30522;
const DEFAULT_MIN_FREQUENCY: u64 = 2;

impl Default for VocabSettings {
    fn default() -> VocabSettings {
        VocabSettings { size: DEFAULT_SIZE, min_frequency: DEFAULT_MIN_FREQUENCY, cased: false }
    }
}

impl VocabSettings {
    /// The call that learns a vocabulary from `pipeline`'s text into `out`: lower-cased unless
    /// `cased`, or the pipeline's tokenize step keeps case.
    pub fn options(&self, pipeline: &Pipeline, out: PathBuf) -> VocabTrainOptions {
        let step_lowercase = pipeline.steps.iter().find_map(PipelineStep::as_tokenize).map(|t| t.lowercase);
        VocabTrainOptions {
            size: self.size,
            min_frequency: self.min_frequency,
            lowercase: !self.cased && step_lowercase.unwrap_or(true),
            out,
            threads: 0,
            quiet: false,
        }
    }
}

/// Options of `vocab train`.
#[derive(Debug, Clone)]
pub struct VocabTrainOptions {
    pub size: usize,
    pub min_frequency: u64,
    pub lowercase: bool,
    pub out: PathBuf,
    pub threads: usize,
    pub quiet: bool,
}

/// What training produced and how well the vocabulary covers the corpus.
#[derive(Debug, Clone)]
pub struct VocabReport {
    pub vocab_txt: PathBuf,
    pub tokenizer_json: PathBuf,
    pub vocab_size: usize,
    pub docs: u64,
    pub tokens: u64,
    pub unk_tokens: u64,
}

impl VocabReport {
    pub fn unk_rate(&self) -> f64 {
        self.unk_tokens as f64 / self.tokens.max(1) as f64
    }
}

/// The steps whose output is the text to learn from: everything before tokenization.
fn cleaning_steps(pipeline: &Pipeline) -> Vec<PipelineStep> {
    pipeline
        .steps
        .iter()
        .take_while(|s| {
            !matches!(
                s,
                PipelineStep::Tokenize(_) | PipelineStep::ClassifySequences(_) | PipelineStep::PretrainSequences(_)
            )
        })
        .cloned()
        .collect()
}

pub fn train_vocab(pipeline: &Pipeline, opts: &VocabTrainOptions) -> Result<VocabReport> {
    // Label names are found first, as a run finds them: a source whose label field holds names
    // (`"label": "pos"`) otherwise rejects every document as an unknown label.
    let found = pipeline.with_labels_found()?;
    let pipeline: &Pipeline = &found;
    let steps = cleaning_steps(pipeline);
    let threads = crate::pipeline::threads_or_default(opts.threads);
    let normalizer = BertNormalizer::new(true, true, None, opts.lowercase);
    // BERT's special tokens first, in BERT's order: [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4.
    let specials: Vec<AddedToken> = SPECIALS.iter().map(|s| AddedToken::from(*s, true)).collect();

    // Pass 1: cleaned text streams from the pipeline's workers to word counters.
    let progress = Progress::new(opts.quiet, "vocab: counting words");
    let (tx, rx) = crossbeam_channel::bounded::<String>(1024);
    let docs = std::sync::atomic::AtomicU64::new(0);
    let (read, counts) = std::thread::scope(|scope| {
        let (progress, steps) = (&progress, &steps);
        // The sender moves into the reader so the counters' input ends when reading does.
        let reader = scope.spawn(move || {
            let set_total = |t: Total| progress.set_total(t);
            parallel::process(
                CorpusPart::whole(&pipeline.source, pipeline.seed, steps),
                steps,
                threads,
                &set_total,
                |outcome| {
                    progress.advance(outcome.input_bytes(), 1);
                    if let Outcome::Kept(doc) = outcome {
                        tx.send(doc.text).map_err(|_| anyhow!("the word counters stopped"))?;
                    }
                    Ok(())
                },
            )
        });
        let counters: Vec<_> = (0..threads.max(1))
            .map(|_| {
                let (rx, normalizer, docs) = (rx.clone(), normalizer, &docs);
                scope.spawn(move || -> Result<std::collections::HashMap<String, u64>> {
                    let mut words = std::collections::HashMap::new();
                    for text in rx.iter() {
                        docs.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        count_words(&text, &normalizer, &mut words)?;
                    }
                    Ok(words)
                })
            })
            .collect();
        drop(rx);
        let mut counts: Result<std::collections::HashMap<String, u64>> = Ok(Default::default());
        for counter in counters {
            let words = counter.join().map_err(|_| anyhow!("a word counter panicked")).and_then(|r| r);
            counts = counts.and_then(|mut all| {
                for (word, n) in words? {
                    *all.entry(word).or_default() += n;
                }
                Ok(all)
            });
        }
        let read = reader.join().map_err(|_| anyhow!("the reader panicked")).and_then(|r| r);
        (read, counts)
    });
    progress.finish();
    read?;
    let docs = docs.into_inner();

    // The trainer, on the words in sorted order in a map with fixed seeds: its iteration
    // order, which numbers the `##` characters, is then the same on every run.
    let mut words: Vec<(String, u64)> = counts?.into_iter().collect();
    words.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let mut word_counts: ahash::AHashMap<compact_str::CompactString, u64> =
        std::collections::HashMap::with_capacity_and_hasher(words.len(), ahash::RandomState::with_seeds(1, 2, 3, 4))
            .into();
    word_counts.extend(words.into_iter().map(|(w, n)| (compact_str::CompactString::from(w), n)));
    // WordPieceTrainer is this BPE trainer with the `##` prefix, then `WordPiece::from_bpe`.
    let trainer = BpeTrainer::builder()
        .vocab_size(opts.size)
        .min_frequency(opts.min_frequency)
        .special_tokens(specials.clone())
        .continuing_subword_prefix("##".into())
        .show_progress(false);
    // Past ALPHABET_LIMIT distinct characters the trainer keeps the most frequent, but breaks
    // ties in its own randomly seeded order: choose them here (ties by code point) and hand
    // them over as the initial alphabet, which it always keeps.
    let trainer = match alphabet_limit(&word_counts, ALPHABET_LIMIT) {
        Some(kept) => trainer.initial_alphabet(kept).limit_alphabet(ALPHABET_LIMIT),
        None => trainer,
    }
    .build();
    let mut bpe = BPE::default();
    trainer.do_train(&word_counts, &mut bpe).map_err(|e| anyhow!("training failed: {e}"))?;
    let mut tokenizer = Tokenizer::new(HfWordPiece::from_bpe(&bpe));
    tokenizer.with_normalizer(Some(normalizer)).map_err(|e| anyhow!("{e}"))?;
    tokenizer.with_pre_tokenizer(Some(BertPreTokenizer));
    tokenizer.add_special_tokens(specials).map_err(|e| anyhow!("could not add the special tokens: {e}"))?;

    let id = |t: &str| tokenizer.token_to_id(t).with_context(|| format!("trained vocabulary lacks {t}"));
    let (sep, cls) = (id("[SEP]")?, id("[CLS]")?);
    tokenizer.with_post_processor(Some(BertProcessing::new(("[SEP]".into(), sep), ("[CLS]".into(), cls))));
    tokenizer.with_decoder(Some(WordPieceDecoder::default()));
    std::fs::create_dir_all(&opts.out).with_context(|| format!("could not create '{}'", opts.out.display()))?;
    let tokenizer_json = opts.out.join("tokenizer.json");
    tokenizer
        .save(&tokenizer_json, true)
        .map_err(|e| anyhow!("could not write '{}': {e}", tokenizer_json.display()))?;
    let vocab_txt = write_vocab_txt(&tokenizer, &opts.out)?;

    // Pass 2: coverage of the corpus by the new vocabulary, through the fast encoder.
    let wp = WordPiece::from_vocab_file(&vocab_txt, opts.lowercase, None, 100)?;
    let vocab_size = wp.vocab_size;
    let unk = wp.specials.unk;
    let mut measure = steps.clone();
    let tokenize = Tokenize {
        vocab: Some(vocab_txt.clone()),
        tokenizer: None,
        lowercase: opts.lowercase,
        strip_accents: None,
        max_word_chars: 100,
        encoder: Some(std::sync::Arc::new(crate::tokenize::Encoder::WordPiece(wp))),
        sentences: false,
    };
    measure.push(PipelineStep::Tokenize(tokenize));
    let progress = Progress::new(opts.quiet, "vocab: measuring coverage");
    let (mut tokens, mut unk_tokens) = (0u64, 0u64);
    let set_total = |t: Total| progress.set_total(t);
    parallel::process(
        CorpusPart::whole(&pipeline.source, pipeline.seed, &measure),
        &measure,
        threads,
        &set_total,
        |outcome| {
            progress.advance(outcome.input_bytes(), 1);
            if let Outcome::Kept(doc) = outcome {
                tokens += doc.tokens.len() as u64;
                unk_tokens += doc.tokens.iter().filter(|&&t| t == unk).count() as u64;
            }
            Ok(())
        },
    )?;
    progress.finish();
    Ok(VocabReport { vocab_txt, tokenizer_json, vocab_size, docs, tokens, unk_tokens })
}

/// The base characters a vocabulary starts from, at most (HF's `limit_alphabet` for BERT).
const ALPHABET_LIMIT: usize = 1000;

/// When the words hold more than `limit` distinct characters: the `limit` most frequent, ties
/// broken by code point.
fn alphabet_limit<'a>(
    words: impl IntoIterator<Item = (&'a compact_str::CompactString, &'a u64)>,
    limit: usize,
) -> Option<std::collections::HashSet<char>> {
    let mut counts: std::collections::HashMap<char, u64> = std::collections::HashMap::new();
    for (word, n) in words {
        for c in word.chars() {
            *counts.entry(c).or_default() += n;
        }
    }
    if counts.len() <= limit {
        return None;
    }
    let mut chars: Vec<(char, u64)> = counts.into_iter().collect();
    chars.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Some(chars.into_iter().take(limit).map(|(c, _)| c).collect())
}

/// Adds the words of one text to `words`: BERT's normaliser, then its pre-tokeniser, as
/// `Tokenizer::train` does before its trainer counts.
fn count_words(
    text: &str,
    normalizer: &BertNormalizer,
    words: &mut std::collections::HashMap<String, u64>,
) -> Result<()> {
    let mut normalized = NormalizedString::from(text);
    normalizer.normalize(&mut normalized).map_err(|e| anyhow!("normalising failed: {e}"))?;
    let mut pre = PreTokenizedString::from(normalized);
    BertPreTokenizer.pre_tokenize(&mut pre).map_err(|e| anyhow!("pre-tokenising failed: {e}"))?;
    for (word, _, _) in pre.get_splits(OffsetReferential::Original, OffsetType::Byte) {
        match words.get_mut(word) {
            Some(n) => *n += 1,
            None => {
                words.insert(word.to_string(), 1);
            }
        }
    }
    Ok(())
}

/// `vocab.txt`: one token per line, line number = id.
fn write_vocab_txt(tokenizer: &Tokenizer, out: &Path) -> Result<PathBuf> {
    let mut vocab: Vec<(String, u32)> = tokenizer.get_vocab(true).into_iter().collect();
    vocab.sort_by_key(|(_, id)| *id);
    for (i, (token, id)) in vocab.iter().enumerate() {
        if *id as usize != i {
            anyhow::bail!("trained vocabulary has a gap at id {i} (token {token:?} has id {id})");
        }
    }
    let mut text = String::with_capacity(vocab.len() * 8);
    for (token, _) in &vocab {
        text.push_str(token);
        text.push('\n');
    }
    let path = out.join("vocab.txt");
    std::fs::write(&path, text).with_context(|| format!("could not write '{}'", path.display()))?;
    Ok(path)
}
