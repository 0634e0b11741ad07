//! `pretrain_sequences`: MLM + NSP pretraining rows, with Google BERT's
//! `create_pretraining_data` semantics as options — but streaming, seeded per document, and
//! with random partners always from another document.
//!
//! Documents arrive in input order on one thread (the ordered stage of the executor), so the
//! rows are the same for any thread count. Random NSP partners come from a bounded buffer of
//! earlier documents of the same split; memory stays flat.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::mask::{MaskSpec, Masked};
use super::words::{WordRule, Words};
use crate::contract::document::{Document, PretrainSequence};
use crate::contract::manifest::{PretrainStats, SpecialIds, TokenizerInfo};
use crate::contract::{Step, Verdict};
use crate::rng::Rng;

/// Build pretraining rows. With `nsp: true`, rows are `[CLS] A [SEP] B [SEP]` where B follows A
/// (label 0) or comes from a different document (label 1); with `nsp: false`, whole documents
/// are packed into full rows (RoBERTa full-sentences) with `[SEP]` between documents and
/// `doc_boundaries`. Needs a `tokenize` step before it (which then records sentence ends).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PretrainSequences {
    /// Longest row, specials included.
    #[serde(default = "default_max_len")]
    pub max_len: usize,
    /// With NSP: chance of a shorter target length (2..max_len), to match fine-tuning inputs.
    #[serde(default = "default_short_seq_prob")]
    pub short_seq_prob: f64,
    /// Next-sentence-prediction pairs (true) or packed MLM-only rows (false).
    #[serde(default = "yes")]
    pub nsp: bool,
    /// Share of non-special tokens to predict. Unset: the model family's rate where the model is
    /// known — dynamic masking, done by the trainer: 15% for BERT and RoBERTa, 30% for
    /// ModernBERT — and 15% for static masking, done here before any model is chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masked_lm_prob: Option<f64>,
    /// At most this many predictions per row; default round(max_len × masked_lm_prob) (Google's
    /// 20 for 128 tokens at 15%; twice that at ModernBERT's 30%).
    #[serde(default)]
    pub max_predictions_per_seq: Option<usize>,
    /// Mask whole words together: the tokenizer's words (a token and its `##` pieces for
    /// WordPiece; `▁`-words for SentencePiece; the GPT-2 split for byte-level BPE).
    #[serde(default)]
    pub whole_word_mask: bool,
    /// `static`: mask now and store `masked_lm_positions`/`masked_lm_ids`; `dynamic`: store
    /// unmasked ids and mask at training time with `sequence::mask` (same function, same result
    /// for the same seed, epoch and row index).
    #[serde(default)]
    pub masking: Masking,
    /// With static masking: how many differently built and masked copies of each document.
    #[serde(default = "one")]
    pub dupe_factor: usize,
    /// Earlier documents kept as candidates for random NSP partners.
    #[serde(default = "default_partner_buffer")]
    pub partner_buffer_docs: usize,
    /// Masking parameters, from the tokenizer; set when the pipeline is prepared.
    #[serde(skip)]
    pub mask_spec: Option<MaskSpec>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Masking {
    #[default]
    Static,
    Dynamic,
}

fn default_max_len() -> usize {
    128
}
fn default_short_seq_prob() -> f64 {
    0.1
}
fn yes() -> bool {
    true
}
/// The masking rate of BERT's recipe, and of static masking when none is given.
pub const DEFAULT_MASKED_LM_PROB: f64 = 0.15;
fn one() -> usize {
    1
}
fn default_partner_buffer() -> usize {
    1000
}

impl PretrainSequences {
    /// The masking this step does, for a tokenizer and its word boundaries, at `default_rate`
    /// where the step sets no `masked_lm_prob` (the pipeline: 15%; the trainer: the model
    /// family's). The pipeline's static masking and the trainer's dynamic masking both build it
    /// here. Whole-word masking needs a tokenizer that marks words.
    pub fn mask_spec(&self, tokenizer: &TokenizerInfo, words: Words, default_rate: f64) -> anyhow::Result<MaskSpec> {
        if self.whole_word_mask && words.rule() == WordRule::None {
            anyhow::bail!(
                "pretrain_sequences: whole_word_mask needs word boundaries, and the tokenizer marks none bertpipe reads (a continuation prefix such as `##`, an end-of-word suffix, a `▁` word marker or byte-level `Ġ`); set whole_word_mask: false"
            );
        }
        let s = tokenizer.special_ids;
        let rate = self.masked_lm_prob.unwrap_or(default_rate);
        Ok(MaskSpec {
            masked_lm_prob: rate,
            max_predictions_per_seq: self
                .max_predictions_per_seq
                .unwrap_or((self.max_len as f64 * rate).round() as usize),
            whole_word_mask: self.whole_word_mask,
            mask_id: s.mask,
            special_ids: vec![s.pad, s.unk, s.cls, s.sep, s.mask],
            vocab_size: tokenizer.vocab_size as u32,
            words,
        })
    }

    pub fn check(&self) -> Vec<(&'static str, String)> {
        let mut p = Vec::new();
        if self.max_len < 8 {
            p.push(("max_len", format!("must be at least 8, got {}", self.max_len)));
        }
        if !(0.0..=1.0).contains(&self.short_seq_prob) {
            p.push(("short_seq_prob", format!("must be in [0, 1], got {}", self.short_seq_prob)));
        }
        if let Some(rate) = self.masked_lm_prob.filter(|r| !(*r > 0.0 && *r < 1.0)) {
            p.push(("masked_lm_prob", format!("must be in (0, 1), got {rate}")));
        }
        if self.dupe_factor == 0 {
            p.push(("dupe_factor", "must be at least 1".into()));
        }
        if self.dupe_factor > 1 && self.masking == Masking::Dynamic {
            p.push(("dupe_factor", "only applies to static masking (dynamic masking varies per epoch)".into()));
        }
        if self.partner_buffer_docs == 0 && self.nsp {
            p.push(("partner_buffer_docs", "must be at least 1 with nsp".into()));
        }
        p
    }
}

/// The step's worker-side part does nothing: rows are built in input order by
/// [`PretrainBuilder`], since pairs and packing cross document boundaries.
impl Step for PretrainSequences {
    fn apply(&self, _doc: &mut Document) -> Verdict {
        Verdict::Keep
    }
}

/// Builds one split's rows from its documents, in input order.
pub struct PretrainBuilder {
    step: PretrainSequences,
    seed: u64,
    specials: SpecialIds,
    doc_index: u64,
    row_index: u64,
    partners: VecDeque<Vec<Vec<u32>>>,
    /// NSP choices owed to the balance: > 0, "follows" owed for B forced to random (a
    /// document's lone last sentence); < 0, "random" owed for B forced to follow (no other
    /// document yet). The next free choices repay it, so the random share stays at 50%.
    nsp_owed: i64,
    pack: Pack,
    pub stats: PretrainStats,
}

#[derive(Default)]
struct Pack {
    content: Vec<u32>,
    boundaries: Vec<u32>,
    doc_id: String,
}

impl PretrainBuilder {
    /// `specials`: the tokenizer's start and end tokens and its pair layout.
    pub fn new(step: &PretrainSequences, seed: u64, specials: SpecialIds) -> Self {
        PretrainBuilder {
            step: step.clone(),
            seed,
            specials,
            doc_index: 0,
            row_index: 0,
            partners: VecDeque::new(),
            nsp_owed: 0,
            pack: Pack::default(),
            stats: PretrainStats::default(),
        }
    }

    /// The sentences (token id runs) of a tokenized document.
    pub fn sentences(doc: &Document) -> Vec<Vec<u32>> {
        let mut out = Vec::with_capacity(doc.sentence_ends.len());
        let mut start = 0usize;
        for &end in &doc.sentence_ends {
            let end = end as usize;
            if end > start {
                out.push(doc.tokens[start..end].to_vec());
            }
            start = end;
        }
        if start < doc.tokens.len() {
            out.push(doc.tokens[start..].to_vec());
        }
        out
    }

    /// Rows completed by this document.
    pub fn add(&mut self, doc: &Document) -> Vec<PretrainSequence> {
        let sentences = Self::sentences(doc);
        let index = self.doc_index;
        self.doc_index += 1;
        let mut rows = Vec::new();
        if self.step.nsp {
            let dupes = if self.step.masking == Masking::Static { self.step.dupe_factor } else { 1 };
            for dupe in 0..dupes {
                let mut rng = Rng::for_key(self.seed, &[0x004e_5350, index, dupe as u64]);
                self.pairs(&doc.id, &sentences, &mut rng, &mut rows);
            }
            self.partners.push_back(sentences);
            if self.partners.len() > self.step.partner_buffer_docs {
                self.partners.pop_front();
            }
        } else {
            self.pack_document(&doc.id, &sentences, &mut rows);
        }
        rows
    }

    /// Rows still open at the end of the split.
    pub fn finish(&mut self) -> Vec<PretrainSequence> {
        let mut rows = Vec::new();
        if !self.pack.content.is_empty() {
            self.emit_packed(&mut rows);
        }
        self.stats.finish();
        rows
    }

    /// Google's `create_instances_from_document`, with partners from other documents only and a
    /// one-sentence chunk paired with its next sentence when the coin says "follows".
    fn pairs(&mut self, doc_id: &str, doc: &[Vec<u32>], rng: &mut Rng, rows: &mut Vec<PretrainSequence>) {
        // Room for the start token, the separators between A and B, and the end token.
        let max_tokens = self.step.max_len - 2 - self.specials.pair_separators as usize;
        let mut target = max_tokens;
        if rng.f64() < self.step.short_seq_prob {
            target = 2 + rng.below(max_tokens - 1);
        }
        let mut chunk: Vec<&Vec<u32>> = Vec::new();
        let mut chunk_len = 0;
        let mut i = 0;
        while i < doc.len() {
            chunk.push(&doc[i]);
            chunk_len += doc[i].len();
            if i == doc.len() - 1 || chunk_len >= target {
                let coin_random = rng.f64() < 0.5;
                // B can follow A when the chunk has two sentences, or one and the document
                // another (taken as B: Google forces a random B for every one-sentence chunk,
                // 56% random on IMDb); B can be random once there is another document. A
                // forced side is owed back by the next free choices (`nsp_owed`).
                let can_follow = chunk.len() >= 2 || i + 1 < doc.len();
                let can_random = !self.partners.is_empty();
                let want_random = match (can_follow, can_random) {
                    (true, true) if self.nsp_owed > 0 => {
                        self.nsp_owed -= 1;
                        false
                    }
                    (true, true) if self.nsp_owed < 0 => {
                        self.nsp_owed += 1;
                        true
                    }
                    (true, true) => coin_random,
                    // Every forced row is owed back, whatever the coin said: a forced random
                    // row is +1 to (random − follows), its repayment replaces a fair choice
                    // (0 on average) with −1.
                    (false, true) => {
                        self.nsp_owed += 1;
                        true
                    }
                    (true, false) => {
                        self.nsp_owed -= 1;
                        false
                    }
                    (false, false) => true,
                };
                if chunk.len() == 1 && !want_random {
                    i += 1;
                    chunk.push(&doc[i]);
                    chunk_len += doc[i].len();
                }
                let a_end = if chunk.len() >= 2 { 1 + rng.below(chunk.len() - 1) } else { 1 };
                let mut a: Vec<u32> = chunk[..a_end].iter().flat_map(|s| s.iter().copied()).collect();
                let mut b: Vec<u32>;
                let random = if want_random && can_random {
                    let target_b = target.saturating_sub(a.len()).max(1);
                    let partner = &self.partners[rng.below(self.partners.len())];
                    let start = rng.below(partner.len().max(1));
                    b = Vec::new();
                    for s in partner.iter().skip(start) {
                        b.extend_from_slice(s);
                        if b.len() >= target_b {
                            break;
                        }
                    }
                    // The unused segments of this chunk go back into the document.
                    i -= chunk.len() - a_end;
                    true
                } else if chunk.len() >= 2 {
                    b = chunk[a_end..].iter().flat_map(|s| s.iter().copied()).collect();
                    false
                } else {
                    // A lone sentence and no other document yet: nothing to pair it with.
                    self.stats.tokens_unused += chunk_len as u64;
                    chunk.clear();
                    chunk_len = 0;
                    i += 1;
                    continue;
                };
                truncate_pair(&mut a, &mut b, max_tokens, rng);
                if !a.is_empty() && !b.is_empty() {
                    let s = self.specials;
                    let mut ids = Vec::with_capacity(a.len() + b.len() + 4);
                    ids.push(s.cls);
                    ids.extend_from_slice(&a);
                    ids.extend(std::iter::repeat_n(s.sep, s.pair_separators as usize));
                    let mut types = vec![0u8; ids.len()];
                    ids.extend_from_slice(&b);
                    ids.push(s.sep);
                    types.resize(ids.len(), s.pair_type_ids as u8);
                    if random {
                        self.stats.nsp_random += 1;
                    } else {
                        self.stats.nsp_follows += 1;
                    }
                    let row = PretrainSequence {
                        doc_id: doc_id.to_string(),
                        input_ids: ids,
                        token_type_ids: types,
                        next_sentence_label: Some(random as i8),
                        masked: None,
                        doc_boundaries: None,
                    };
                    rows.push(self.finish_row(row));
                }
                chunk.clear();
                chunk_len = 0;
            }
            i += 1;
        }
    }

    /// RoBERTa full-sentences: fill rows with whole sentences, documents separated by [SEP];
    /// a sentence longer than a row is cut at the row's end and continues in the next.
    fn pack_document(&mut self, doc_id: &str, doc: &[Vec<u32>], rows: &mut Vec<PretrainSequence>) {
        let cap = self.step.max_len - 2;
        if doc.is_empty() {
            return;
        }
        // Room for the separator and at least one token, or start a fresh row.
        if !self.pack.content.is_empty() && self.pack.content.len() + 2 > cap {
            self.emit_packed(rows);
        }
        if !self.pack.content.is_empty() {
            self.pack.content.push(self.specials.sep);
        } else {
            self.pack.doc_id = doc_id.to_string();
        }
        self.pack.boundaries.push(1 + self.pack.content.len() as u32);
        for sentence in doc {
            let mut rest: &[u32] = sentence;
            // A whole sentence that does not fit moves to the next row (if it would fit there).
            if self.pack.content.len() + rest.len() > cap && rest.len() <= cap && !self.row_has_only_separator_start() {
                self.emit_packed(rows);
                self.pack.doc_id = doc_id.to_string();
            }
            while !rest.is_empty() {
                let room = cap - self.pack.content.len();
                if room == 0 {
                    self.emit_packed(rows);
                    self.pack.doc_id = doc_id.to_string();
                    continue;
                }
                let take = room.min(rest.len());
                self.pack.content.extend_from_slice(&rest[..take]);
                rest = &rest[take..];
            }
        }
    }

    /// True right after a new document's boundary was placed at the current end (nothing of it
    /// written yet): moving on would leave a dangling separator.
    fn row_has_only_separator_start(&self) -> bool {
        self.pack.boundaries.last().is_some_and(|&b| b as usize == 1 + self.pack.content.len())
    }

    fn emit_packed(&mut self, rows: &mut Vec<PretrainSequence>) {
        let pack = std::mem::take(&mut self.pack);
        let mut ids = Vec::with_capacity(pack.content.len() + 2);
        ids.push(self.specials.cls);
        ids.extend_from_slice(&pack.content);
        ids.push(self.specials.sep);
        let row = PretrainSequence {
            doc_id: pack.doc_id,
            token_type_ids: vec![0; ids.len()],
            input_ids: ids,
            next_sentence_label: None,
            masked: None,
            doc_boundaries: Some(pack.boundaries),
        };
        rows.push(self.finish_row(row));
    }

    /// Counts the row and applies static masking.
    fn finish_row(&mut self, mut row: PretrainSequence) -> PretrainSequence {
        let index = self.row_index;
        self.row_index += 1;
        self.stats.rows += 1;
        self.stats.tokens += row.input_ids.len() as u64;
        self.stats.positions += self.step.max_len as u64;
        let spec = self.step.mask_spec.as_ref().expect("pretrain_sequences prepared before running");
        let maskable = row.input_ids.iter().filter(|&&t| !spec.special_ids.contains(&t)).count() as u64;
        let masked = (self.step.masking == Masking::Static).then(|| spec.mask(&row.input_ids, self.seed, 0, index));
        self.stats.maskable_tokens += maskable;
        if let Some(Masked { input_ids, positions, labels, replaced_mask, replaced_random, kept }) = masked {
            self.stats.masked_tokens += positions.len() as u64;
            self.stats.replaced_mask += replaced_mask as u64;
            self.stats.replaced_random += replaced_random as u64;
            self.stats.kept += kept as u64;
            row.input_ids = input_ids;
            row.masked = Some((positions, labels));
        }
        row
    }
}

/// Google's `truncate_seq_pair`: trim the longer side, from the front or the back at random,
/// until the pair fits.
fn truncate_pair(a: &mut Vec<u32>, b: &mut Vec<u32>, max_tokens: usize, rng: &mut Rng) {
    while a.len() + b.len() > max_tokens {
        let longer = if a.len() > b.len() { &mut *a } else { &mut *b };
        if rng.f64() < 0.5 {
            longer.remove(0);
        } else {
            longer.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLS: u32 = 101;
    const SEP: u32 = 102;

    fn step(nsp: bool, masking: Masking) -> PretrainSequences {
        PretrainSequences {
            max_len: 64,
            short_seq_prob: 0.1,
            nsp,
            masked_lm_prob: Some(0.15),
            max_predictions_per_seq: None,
            whole_word_mask: false,
            masking,
            dupe_factor: 1,
            partner_buffer_docs: 50,
            mask_spec: Some(MaskSpec {
                masked_lm_prob: 0.15,
                max_predictions_per_seq: 10,
                whole_word_mask: false,
                mask_id: 103,
                special_ids: vec![0, 100, CLS, SEP, 103],
                vocab_size: 30522,
                words: Default::default(),
            }),
        }
    }

    /// Document k owns the token range [1000 + 100·k, …): any token tells its document.
    /// Sentences of 3–20 tokens, some longer than a row.
    fn docs(n: usize) -> Vec<Document> {
        let mut rng = Rng(3);
        (0..n)
            .map(|k| {
                let mut tokens = Vec::new();
                let mut ends = Vec::new();
                for _ in 0..1 + rng.below(12) {
                    let len = if rng.chance(0.03) { 70 + rng.below(40) } else { 3 + rng.below(18) };
                    for _ in 0..len {
                        tokens.push(1000 + 100 * k as u32 + rng.below(100) as u32);
                    }
                    ends.push(tokens.len() as u32);
                }
                Document { id: format!("d{k}"), tokens, sentence_ends: ends, ..Default::default() }
            })
            .collect()
    }

    fn owner(t: u32) -> usize {
        ((t - 1000) / 100) as usize
    }

    fn build(step: &PretrainSequences, docs: &[Document]) -> (Vec<PretrainSequence>, PretrainStats) {
        let mut b = PretrainBuilder::new(step, 42, SpecialIds::bert(0, 100, CLS, SEP, 103));
        let mut rows: Vec<PretrainSequence> = docs.iter().flat_map(|d| b.add(d)).collect();
        rows.extend(b.finish());
        (rows, b.stats)
    }

    #[test]
    fn nsp_pairs_fit_and_random_partners_come_from_other_documents() {
        let s = step(true, Masking::Dynamic);
        let (rows, stats) = build(&s, &docs(400));
        assert!(rows.len() > 300);
        let (mut random, mut follows) = (0, 0);
        for r in &rows {
            assert!(r.input_ids.len() <= s.max_len);
            assert_eq!(r.input_ids[0], CLS);
            let sep1 = r.input_ids.iter().position(|&t| t == SEP).unwrap();
            let (a, b) = (&r.input_ids[1..sep1], &r.input_ids[sep1 + 1..r.input_ids.len() - 1]);
            assert!(!a.is_empty() && !b.is_empty());
            assert_eq!(r.token_type_ids.iter().filter(|&&t| t == 0).count(), sep1 + 1);
            let doc_a = owner(a[0]);
            assert!(a.iter().all(|&t| owner(t) == doc_a), "A spans documents");
            let doc_b = owner(b[0]);
            assert!(b.iter().all(|&t| owner(t) == doc_b), "B spans documents");
            match r.next_sentence_label {
                Some(1) => {
                    assert_ne!(doc_a, doc_b, "a random partner from the same document");
                    random += 1;
                }
                Some(0) => {
                    assert_eq!(doc_a, doc_b);
                    follows += 1;
                }
                other => panic!("label {other:?}"),
            }
        }
        assert_eq!((random, follows), (stats.nsp_random, stats.nsp_follows));
        // 50/50: a forced random B (a document's lone last sentence) is repaid by the next free
        // choice, so only the coin's own noise remains (3 sigma).
        let n = (random + follows) as f64;
        let share = random as f64 / n;
        assert!((share - 0.5).abs() < 0.01_f64.max(1.5 / n.sqrt()), "NSP random share {share} of {n} rows");
    }

    #[test]
    fn packing_is_lossless() {
        let s = step(false, Masking::Dynamic);
        let input = docs(300);
        let (rows, stats) = build(&s, &input);
        // Rebuild every document's token stream from the rows and their boundaries.
        let mut rebuilt: Vec<Vec<u32>> = Vec::new();
        for r in &rows {
            assert!(r.input_ids.len() <= s.max_len);
            let ids = &r.input_ids;
            let b = r.doc_boundaries.as_ref().unwrap();
            let end = ids.len() - 1;
            let first = b.first().map_or(end, |&x| x as usize);
            if first > 1 {
                // the row starts with the rest of the previous document
                let cont_end = if b.is_empty() { end } else { first - 1 };
                rebuilt.last_mut().expect("a continuation follows a document").extend_from_slice(&ids[1..cont_end]);
                if !b.is_empty() {
                    assert_eq!(ids[first - 1], SEP);
                }
            }
            for (k, &start) in b.iter().enumerate() {
                let stop = b.get(k + 1).map_or(end, |&n| n as usize - 1);
                rebuilt.push(ids[start as usize..stop].to_vec());
            }
        }
        let want: Vec<Vec<u32>> = input.iter().map(|d| d.tokens.clone()).collect();
        assert_eq!(rebuilt, want);
        assert!(stats.packing_efficiency > 0.9, "{}", stats.packing_efficiency);
    }

    #[test]
    fn dynamic_masking_reproduces_static_masking() {
        let input = docs(200);
        for nsp in [true, false] {
            let (stat, _) = build(&step(nsp, Masking::Static), &input);
            let (dynamic, _) = build(&step(nsp, Masking::Dynamic), &input);
            assert_eq!(stat.len(), dynamic.len());
            let spec = step(nsp, Masking::Static).mask_spec.unwrap();
            for (i, (st, dy)) in stat.iter().zip(&dynamic).enumerate() {
                let m = spec.mask(&dy.input_ids, 42, 0, i as u64);
                assert_eq!(st.input_ids, m.input_ids, "row {i}");
                assert_eq!(st.masked.as_ref().unwrap(), &(m.positions, m.labels), "row {i}");
                assert!(dy.masked.is_none());
            }
        }
    }

    #[test]
    fn same_documents_same_rows() {
        let input = docs(100);
        assert_eq!(build(&step(true, Masking::Static), &input).0, build(&step(true, Masking::Static), &input).0);
    }

    /// Whole-word masking with a tokenizer that marks no words is refused, by the pipeline and
    /// the trainer alike (both build the masking here), instead of masking single tokens.
    #[test]
    fn whole_word_masking_needs_a_tokenizer_that_marks_words() {
        let mut st = step(false, Masking::Static);
        st.whole_word_mask = true;
        let info = TokenizerInfo {
            vocab_sha256: String::new(),
            vocab_id: None,
            vocab_size: 30522,
            lowercase: true,
            strip_accents: None,
            special_ids: SpecialIds::bert(0, 100, CLS, SEP, 103),
            encoder: "tokenizers".into(),
        };
        let err = st.mask_spec(&info, Words::default(), 0.15).unwrap_err().to_string();
        assert!(err.contains("whole_word_mask: false"), "{err}");
        let words = Words::continuation_prefix([("play", 0), ("##ing", 1)], "##");
        assert!(st.mask_spec(&info, words, 0.15).unwrap().whole_word_mask);

        // A rate the step sets wins; unset, the caller's (the model family's) applies, and the
        // cap on predictions follows the rate in use: 64 tokens at 30% → 19.
        st.whole_word_mask = false;
        let spec = st.mask_spec(&info, Words::default(), 0.3).unwrap();
        assert_eq!((spec.masked_lm_prob, spec.max_predictions_per_seq), (0.15, 10));
        st.masked_lm_prob = None;
        let spec = st.mask_spec(&info, Words::default(), 0.3).unwrap();
        assert_eq!((spec.masked_lm_prob, spec.max_predictions_per_seq), (0.3, 19));
    }
}
