//! `bertpipe predict`: raw text through exactly a pipeline's cleaning, tokenisation and
//! sequence building, then the model. Windowed documents are voted by the mean of their
//! windows' probabilities, as `eval` does. Texts a step rejects are reported with the reason.
//!
//! Corpus-level steps do not apply to single texts: `dedup` is skipped (the same text twice
//! gets two answers), and a `filter` `max_noise_quantile` (resolved over a whole corpus) is
//! not applied; every per-document rule is.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::runtime::Model;
use crate::config::{Pipeline, PipelineStep};
use crate::contract::document::Document;
use crate::contract::Verdict;
use crate::metrics::{argmax, softmax};

/// One input text and where it came from.
#[derive(Debug, Clone)]
pub struct Text {
    pub id: String,
    pub text: String,
}

/// What became of one input.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub id: String,
    /// `None` when a step rejected the text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub confidence: Option<f64>,
    /// By label name, in label order.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probabilities: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
}

/// Inputs from the command line (`text:1`, …) or a file: `.jsonl` (a `text` field, and `id`
/// when present), else one text per line (`FILE:LINE`).
pub fn read_inputs(texts: &[String], file: Option<&Path>) -> Result<Vec<Text>> {
    let mut out: Vec<Text> =
        texts.iter().enumerate().map(|(i, t)| Text { id: format!("text:{}", i + 1), text: t.clone() }).collect();
    if let Some(path) = file {
        let body = if path == Path::new("-") {
            std::io::read_to_string(std::io::stdin()).context("could not read standard input")?
        } else {
            std::fs::read_to_string(path).with_context(|| format!("could not read '{}'", path.display()))?
        };
        let jsonl = path.extension().is_some_and(|e| e == "jsonl" || e == "ndjson");
        for (n, line) in body.lines().enumerate() {
            let at = format!("{}:{}", path.display(), n + 1);
            if line.trim().is_empty() {
                continue;
            }
            if jsonl {
                let v: serde_json::Value =
                    serde_json::from_str(line).with_context(|| format!("{at}: not a JSON object"))?;
                let text = v["text"].as_str().with_context(|| format!("{at}: no string field `text`"))?;
                let id = match &v["id"] {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Number(n) => n.to_string(),
                    _ => at.clone(),
                };
                out.push(Text { id, text: text.to_string() });
            } else {
                out.push(Text { id: at, text: line.to_string() });
            }
        }
    }
    if out.is_empty() {
        bail!("nothing to predict: give texts as arguments or --input FILE (one per line, or .jsonl with `text`)");
    }
    Ok(out)
}

/// The pipeline's steps, prepared, with the corpus-level ones left out; checks that it ends
/// in `classify_sequences` and tokenizes with the model's vocabulary.
pub fn prepare(pipeline: &Pipeline, model: &Model) -> Result<(Vec<PipelineStep>, u32)> {
    let mut steps: Vec<PipelineStep> =
        pipeline.steps.iter().filter(|s| !matches!(s, PipelineStep::Dedup(_))).cloned().collect();
    if !steps.iter().any(|s| matches!(s, PipelineStep::ClassifySequences(_))) {
        bail!("pipeline `{}` has no classify_sequences step; predict needs a classification pipeline", pipeline.name);
    }
    let info = crate::pipeline::prepare_steps(&mut steps)?.context("the pipeline has no tokenize step")?;
    info.expect_vocab(&format!("pipeline `{}` tokenizes", pipeline.name), &model.vocab(), "the model")?;
    Ok((steps, info.special_ids.pad))
}

/// What the pipeline's label names say of the model's classes, when it is worth saying:
/// predictions are always the model's classes by its own names (`id2label`), but a pipeline that
/// labels its corpus with names the model lacks is likely not the one it was trained with, and
/// where the model's classes are unnamed (`LABEL_0`, …) the pipeline's names tell them apart by
/// number (as `eval` matches them, [`crate::shards::match_labels`]). `None` when the pipeline
/// names no labels (numbers, or names only a run finds in the corpus) or they match.
pub fn label_note(pipeline: &Pipeline, model: &Model) -> Option<String> {
    let config = serde_json::to_value(pipeline).ok()?;
    let ours = crate::shards::class_names(&config, &pipeline.source.id2label());
    if crate::shards::unnamed(&ours) {
        return None;
    }
    let theirs = model.label_names();
    let shown = format!("pipeline `{}`", pipeline.name);
    match crate::shards::match_labels(&ours, &theirs, &shown, "the model", "") {
        Err(_) => Some(format!(
            "pipeline `{}` labels its corpus [{}] but the model's classes are [{}]: it may not be the pipeline the model was trained with (the predictions name the model's classes)",
            pipeline.name,
            ours.join(", "),
            theirs.join(", ")
        )),
        Ok(m) if m.by_name.is_none() => Some(format!(
            "the model does not name its classes; pipeline `{}` labels them by number: {}",
            pipeline.name,
            theirs.iter().zip(&ours).map(|(t, o)| format!("{t} = {o}")).collect::<Vec<_>>().join(", ")
        )),
        Ok(_) => None,
    }
}

/// Runs the steps on one text: its model rows, or the rejection (`step: reason`).
pub fn sequences(steps: &[PipelineStep], input: &Text) -> std::result::Result<Vec<Vec<u32>>, String> {
    let mut doc = Document {
        id: input.id.clone(),
        split: "predict".into(),
        text: input.text.clone(),
        origin: input.id.clone(),
        input_bytes: input.text.len() as u64,
        ..Default::default()
    };
    for step in steps {
        if let Verdict::Reject(reason) = step.as_step().apply(&mut doc) {
            return Err(format!("{}: {reason}", step.type_name()));
        }
    }
    if doc.sequences.is_empty() {
        return Err("classify_sequences: no sequence".into());
    }
    Ok(doc.sequences)
}

pub fn predict(
    model: &mut Model,
    steps: &[PipelineStep],
    pad: u32,
    inputs: &[Text],
    batch_size: usize,
) -> Result<Vec<Prediction>> {
    let names = model.label_names();
    if names.is_empty() {
        bail!("the model records no id2label; was it exported by `bertpipe export onnx`?");
    }
    // Rows of every input, longest first into batches.
    let mut rows: Vec<(usize, Vec<u32>)> = Vec::new();
    let mut results: Vec<Prediction> = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let rejected = match sequences(steps, input) {
            Ok(seqs) => {
                rows.extend(seqs.into_iter().map(|s| (i, s)));
                None
            }
            Err(reason) => Some(reason),
        };
        results.push(Prediction {
            id: input.id.clone(),
            label: None,
            confidence: None,
            probabilities: None,
            windows: None,
            rejected,
        });
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&r| std::cmp::Reverse(rows[r].1.len()));
    let k = names.len();
    let mut sums = vec![vec![0f64; k]; inputs.len()];
    let mut counts = vec![0usize; inputs.len()];
    for chunk in order.chunks(batch_size.max(1)) {
        let seq = chunk.iter().map(|&r| rows[r].1.len()).max().unwrap_or(1).max(1);
        let (mut ids, mut mask) = (Vec::with_capacity(chunk.len() * seq), Vec::with_capacity(chunk.len() * seq));
        for &r in chunk {
            let s = &rows[r].1;
            for j in 0..seq {
                ids.push(*s.get(j).unwrap_or(&pad) as i64);
                mask.push((j < s.len()) as i64);
            }
        }
        let types = vec![0i64; ids.len()];
        let (logits, got) = model.logits(&ids, &mask, &types, chunk.len(), seq)?;
        if got != k {
            bail!("the model returned {got} logits per row, but its id2label names {k}");
        }
        for (b, &r) in chunk.iter().enumerate() {
            let doc = rows[r].0;
            for (s, p) in sums[doc].iter_mut().zip(softmax(&logits[b * k..(b + 1) * k])) {
                *s += p;
            }
            counts[doc] += 1;
        }
    }
    for (i, p) in results.iter_mut().enumerate() {
        if p.rejected.is_some() {
            continue;
        }
        let probs: Vec<f64> = sums[i].iter().map(|s| s / counts[i] as f64).collect();
        let best = argmax(&probs);
        p.label = Some(names[best].clone());
        p.confidence = Some(probs[best]);
        p.probabilities = Some(names.iter().cloned().zip(probs.iter().map(|&x| serde_json::json!(x))).collect());
        p.windows = Some(counts[i]);
    }
    Ok(results)
}

/// A table: id, label, confidence, then each class's probability.
pub fn format_table(preds: &[Prediction], names: &[String]) -> String {
    let idw = preds.iter().map(|p| p.id.chars().count()).max().unwrap_or(2).clamp(2, 40);
    let mut out = vec![format!(
        "{:<idw$}  {:<10} {:>10}  {}",
        "id",
        "label",
        "confidence",
        names.iter().map(|n| format!("{:>10}", format!("p({n})"))).collect::<Vec<_>>().join(" ")
    )];
    for p in preds {
        let id: String = p.id.chars().take(idw).collect();
        match (&p.label, &p.rejected) {
            (_, Some(reason)) => out.push(format!("{id:<idw$}  rejected ({reason})")),
            (Some(label), None) => {
                let probs = p.probabilities.as_ref().expect("set with the label");
                let cols: Vec<String> =
                    names.iter().map(|n| format!("{:>10.4}", probs[n].as_f64().unwrap_or(f64::NAN))).collect();
                let windows = match p.windows {
                    Some(w) if w > 1 => format!("  ({w} windows)"),
                    _ => String::new(),
                };
                out.push(format!(
                    "{id:<idw$}  {label:<10} {:>10.4}  {}{windows}",
                    p.confidence.unwrap_or(0.0),
                    cols.join(" ")
                ));
            }
            (None, None) => {}
        }
    }
    out.join("\n")
}
