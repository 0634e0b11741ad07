//! `export onnx --verify`: the exported model in ONNX Runtime against the checkpoint in our
//! candle model, on random and real (tokenized) inputs, padded batches included.

use std::path::Path;

use anyhow::{bail, Result};
use candle_core::{DType, Device};

use super::runtime::Model;
use crate::model::bert::{ForwardPass, Inputs};
use crate::model::BertWithHead;
use crate::rng::Rng;

/// The largest difference allowed between ONNX Runtime's and candle's logits (float32).
pub const TOLERANCE: f32 = 1e-4;

/// The largest difference `--verify` allows for a precision: `abs + rel · max |logit|` of the
/// case (candle's float32 logits), so a model with large logits is not held to a smaller share
/// of them. float32 is exact to rounding. int8 and fp16 change every weight; their bounds come
/// from measurements (docs/export-eval.md, "Precision"), with headroom: on real text (the tokenized
/// sentences) and, looser for int8, on random token ids — inputs no corpus has, whose
/// activations per-tensor quantisation represents worst (MiniLM-L6 with a trained head: mean
/// |Δ| 0.14 over 240 random rows, worst 0.54 at |logit| ≈ 1; ONNX Runtime's own
/// `quantize_dynamic` gives 0.15 / 0.39 per channel and 0.26 / 0.71 with its defaults).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    /// `(abs, rel)` on real text.
    pub text: (f32, f32),
    /// `(abs, rel)` on random token ids.
    pub random: (f32, f32),
}

impl Tolerance {
    pub fn of(p: super::export::Precision) -> Tolerance {
        use super::export::Precision::*;
        match p {
            Fp32 => Tolerance { text: (TOLERANCE, 0.0), random: (TOLERANCE, 0.0) },
            Int8 => Tolerance { text: (0.1, 0.1), random: (0.75, 0.25) },
            Fp16 => Tolerance { text: (5e-3, 1e-2), random: (5e-3, 1e-2) },
        }
    }

    /// The bound for a case (of real text or not) whose largest |logit| is `scale`.
    pub fn limit(&self, text: bool, scale: f32) -> f32 {
        let (abs, rel) = if text { self.text } else { self.random };
        abs + rel * scale
    }

    /// Whether `diff` is within the bound (NaN never is); float32's bound is strict.
    pub fn allows(&self, text: bool, scale: f32, diff: f32) -> bool {
        let limit = self.limit(text, scale);
        if self.text.1 == 0.0 {
            diff < limit
        } else {
            diff <= limit
        }
    }

    pub fn describe(&self) -> String {
        let one = |(abs, rel): (f32, f32)| {
            if rel == 0.0 {
                format!("< {abs:.0e}")
            } else {
                format!("≤ {abs} + {rel}·max |logit|")
            }
        };
        if self.text == self.random {
            one(self.text)
        } else {
            format!("{} on text, {} on random ids", one(self.text), one(self.random))
        }
    }
}

/// One batch of inputs, row-major `[batch, seq]`.
#[derive(Debug, Clone)]
pub struct Case {
    pub name: String,
    /// Tokenized text (else random token ids).
    pub text: bool,
    pub batch: usize,
    pub seq: usize,
    pub input_ids: Vec<i64>,
    pub attention_mask: Vec<i64>,
    pub token_type_ids: Vec<i64>,
}

impl Case {
    /// Right-padded rows of (ids, token types).
    pub fn from_rows(name: &str, rows: &[(Vec<u32>, Vec<u32>)], pad: u32) -> Case {
        let seq = rows.iter().map(|r| r.0.len()).max().unwrap_or(1).max(1);
        let mut c = Case {
            name: name.to_string(),
            text: false,
            batch: rows.len(),
            seq,
            input_ids: Vec::new(),
            attention_mask: Vec::new(),
            token_type_ids: Vec::new(),
        };
        for (ids, types) in rows {
            for j in 0..seq {
                let real = j < ids.len();
                c.input_ids.push(if real { ids[j] } else { pad } as i64);
                c.token_type_ids.push(if real { types[j] } else { 0 } as i64);
                c.attention_mask.push(real as i64);
            }
        }
        c
    }
}

/// Random token ids with the given row lengths (`[CLS] … [SEP]` shape is not needed for a
/// numeric check), token types 0 then 1 halfway.
pub fn random_case(name: &str, lengths: &[usize], vocab: usize, types: usize, pad: u32, rng: &mut Rng) -> Case {
    let rows: Vec<(Vec<u32>, Vec<u32>)> = lengths
        .iter()
        .map(|&n| {
            let ids = (0..n).map(|_| rng.below(vocab) as u32).collect();
            let tt = (0..n).map(|j| if types > 1 && j >= n / 2 { 1 } else { 0 }).collect();
            (ids, tt)
        })
        .collect();
    Case::from_rows(name, &rows, pad)
}

/// Texts for the "real input" cases: short and long, a pair, punctuation, accents.
pub const SENTENCES: &[(&str, Option<&str>)] = &[
    ("This movie was wonderful: the acting, the music, everything.", None),
    ("I want those two hours of my life back. Dreadful!", None),
    ("An okay film.", Some("Not great, not terrible; the ending drags on far too long.")),
    (
        "The director's earlier work had a certain charm, but this sequel squanders it with a plot that makes no sense, \
         dialogue that sounds like it was written by committee, and a runtime that overstays its welcome by at least forty minutes.",
        None,
    ),
    ("Café au lait, naïve résumé — 10/10!!!", None),
];

/// Candle's logits for a case, `[batch × labels]`.
pub fn candle_logits(model: &BertWithHead, case: &Case) -> Result<Vec<f32>> {
    let u = |v: &[i64]| v.iter().map(|&x| x as u32).collect::<Vec<u32>>();
    let inputs = Inputs::new(
        &u(&case.input_ids),
        &u(&case.token_type_ids),
        &u(&case.attention_mask),
        case.batch,
        case.seq,
        &Device::Cpu,
    )?;
    let out = model.forward(&inputs, None, &mut ForwardPass::eval())?;
    let logits = out.logits.expect("a classifier gives logits");
    Ok(logits.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// One case's result.
#[derive(Debug, Clone)]
pub struct Checked {
    pub name: String,
    pub batch: usize,
    pub seq: usize,
    pub max_abs_diff: f32,
    /// Tokenized text (else random ids).
    pub text: bool,
    /// The largest |logit| candle gave (what a relative tolerance scales with).
    pub max_abs_logit: f32,
}

/// Runs every case in both and measures the differences (failing on a non-finite output).
pub fn compare(model: &BertWithHead, session: &mut Model, cases: &[Case]) -> Result<Vec<Checked>> {
    let mut out = Vec::new();
    for case in cases {
        let want = candle_logits(model, case)?;
        let (got, _) =
            session.logits(&case.input_ids, &case.attention_mask, &case.token_type_ids, case.batch, case.seq)?;
        if got.len() != want.len() {
            bail!("case `{}`: ONNX Runtime gave {} logits, candle {}", case.name, got.len(), want.len());
        }
        // Either side non-finite fails: a model that gives NaN in both still is broken.
        if want.iter().any(|x| !x.is_finite()) {
            bail!("case `{}`: candle's logits of the checkpoint are not finite (NaN or infinite weights?)", case.name);
        }
        if got.iter().any(|x| !x.is_finite()) {
            bail!("case `{}`: ONNX Runtime returned non-finite logits", case.name);
        }
        let max_abs_diff = crate::metrics::max_abs_diff(&got, &want) as f32;
        let max_abs_logit = crate::metrics::max_abs(&want) as f32;
        out.push(Checked {
            name: case.name.clone(),
            batch: case.batch,
            seq: case.seq,
            max_abs_diff,
            text: case.text,
            max_abs_logit,
        });
    }
    Ok(out)
}

/// `export onnx --verify`: the written model in ONNX Runtime (CPU) against the checkpoint's
/// candle model (float32) on the [`standard_cases`]; fails past the precision's [`Tolerance`],
/// naming the case. A model that fails is removed (with its external weights), so it is never
/// left looking finished; `export onnx` checks it where it was written aside
/// ([`super::export::Staged`]), before it is renamed into place.
pub fn verify_export(rt: &super::runtime::Runtime, done: &super::export::Exported) -> Result<Vec<Checked>> {
    let checked = check_export(rt, done);
    if checked.is_err() {
        crate::contract::interrupt::remove_path(&done.path);
        if let Some(data) = &done.external_data {
            crate::contract::interrupt::remove_path(data);
        }
    }
    checked
}

fn check_export(rt: &super::runtime::Runtime, done: &super::export::Exported) -> Result<Vec<Checked>> {
    let mut session = rt.open(&done.path, super::runtime::Provider::Cpu, 0)?;
    let cases = standard_cases(&done.model, &done.vocab_file, done.lowercase, done.max_len)?;
    let checked = compare(&done.model, &mut session, &cases)?;
    let tol = Tolerance::of(done.precision);
    for c in &checked {
        let limit = tol.limit(c.text, c.max_abs_logit);
        if !tol.allows(c.text, c.max_abs_logit, c.max_abs_diff) {
            bail!(
                "verification failed: the {} model in ONNX Runtime {} differs from candle by {:.3e} on `{}` (limit {limit:.3e}: {})",
                done.precision.name(),
                rt.version,
                c.max_abs_diff,
                c.name,
                tol.describe()
            );
        }
    }
    Ok(checked)
}

/// The standard cases: random padded batches of several shapes (a single token, a full
/// `max_len` row), and the [`SENTENCES`] tokenized with the model's vocabulary.
pub fn standard_cases(model: &BertWithHead, vocab_file: &Path, lowercase: bool, max_len: usize) -> Result<Vec<Case>> {
    let c = &model.config;
    let pad = c.pad_token_id.unwrap_or(0) as u32;
    let mut rng = Rng::for_key(0x5eed_0bb7, &[]);
    let (v, t) = (c.vocab_size, c.type_vocab_size);
    let long = max_len.min(c.max_sequence());
    let mut cases = Vec::new();
    for lengths in [vec![1], vec![37, 20, 5, 31], vec![128, 64, 100], vec![long, long / 3 + 1]] {
        let lengths: Vec<usize> = lengths.into_iter().map(|n| n.min(long)).collect();
        let name = format!("random {}×{}{}", lengths.len(), lengths[0], if lengths.len() > 1 { " padded" } else { "" });
        cases.push(random_case(&name, &lengths, v, t, pad, &mut rng));
    }
    let encoder = crate::tokenize::Tokenize::of_file(vocab_file, lowercase, None).load()?;
    let sp = encoder.info().special_ids;
    let mut rows = Vec::new();
    for (a, b) in SENTENCES {
        // The tokenizer's layout: `cls A sep` or `cls A sep… B sep`.
        let mut ids = vec![sp.cls];
        encoder.encode(a, &mut ids)?;
        ids.push(sp.sep);
        if b.is_some() {
            ids.extend(std::iter::repeat_n(sp.sep, sp.pair_separators as usize - 1));
        }
        let mut types = vec![0; ids.len()];
        if let Some(b) = b {
            encoder.encode(b, &mut ids)?;
            ids.push(sp.sep);
            types.resize(ids.len(), sp.pair_type_ids as u32);
        }
        ids.truncate(long);
        types.truncate(long);
        rows.push((ids, types));
    }
    let mut sentences = Case::from_rows("sentences (tokenized, padded)", &rows, sp.pad);
    sentences.text = true;
    cases.push(sentences);
    Ok(cases)
}
