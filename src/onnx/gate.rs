//! `eval --baseline BASE.onnx`: what changed between two models on the same rows — typically an
//! int8 or fp16 export against the float32 one it came from. Agreement, the change in accuracy,
//! F1 and loss overall and per slice (the length and noise slices `eval` reports), the largest
//! shifts in probability and every flipped prediction; the model fails the gate when it loses
//! more than `--max-drop` accuracy points.

use serde::Serialize;

use super::rows::RowResult;
use crate::metrics::{argmax, ClassificationMetrics, Predictions};

/// The default `--max-drop`, in accuracy points: half a point, the loss the quantisation
/// recipes (ONNX Runtime's, Optimum's) call acceptable for dynamic int8 on BERT.
pub const DEFAULT_MAX_DROP: f64 = 0.5;

/// How many flipped rows and probability shifts are listed (all are counted).
const LISTED: usize = 100;

/// A metric on the baseline and on the model, and the change (model − baseline).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Change {
    pub baseline: f64,
    pub model: f64,
    pub change: f64,
}

impl Change {
    fn of(baseline: f64, model: f64) -> Change {
        Change { baseline, model, change: model - baseline }
    }
}

/// One slice of the rows (the same slice on both sides).
#[derive(Debug, Clone, Serialize)]
pub struct SliceChange {
    pub bucket: String,
    pub examples: usize,
    /// Share of the slice's rows with the same predicted class.
    pub agreement: f64,
    pub accuracy: Change,
    pub f1: Change,
}

/// A row whose probabilities moved.
#[derive(Debug, Clone, Serialize)]
pub struct Shift {
    pub id: String,
    /// The class whose probability moved most.
    pub class: String,
    pub baseline_probability: f64,
    pub probability: f64,
    /// |probability − baseline_probability|.
    pub shift: f64,
}

/// A row predicted differently.
#[derive(Debug, Clone, Serialize)]
pub struct Flip {
    pub id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub baseline_prediction: String,
    pub prediction: String,
    pub baseline_confidence: f64,
    pub confidence: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The gate: `metrics.json`'s `gate` key.
#[derive(Debug, Clone, Serialize)]
pub struct Gate {
    pub baseline: String,
    pub baseline_precision: String,
    pub precision: String,
    /// Throughput of each, run one after the other in this process (same runtime, threads and
    /// batches), and the model's over the baseline's.
    pub baseline_docs_per_second: f64,
    pub docs_per_second: f64,
    pub speedup: f64,
    pub rows: usize,
    /// Share of rows with the same predicted class.
    pub agreement: f64,
    pub flipped: usize,
    /// What the accuracy drop is measured on: `documents` when rows are windows of documents
    /// (their mean probabilities, as `eval` scores them), else `rows`.
    pub level: String,
    pub accuracy: Change,
    pub f1: Change,
    pub loss: Change,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document_accuracy: Option<Change>,
    pub by_length: Vec<SliceChange>,
    pub by_noise: Vec<SliceChange>,
    pub max_probability_shift: f64,
    pub mean_probability_shift: f64,
    /// The largest shifts, largest first (at most 100).
    pub largest_shifts: Vec<Shift>,
    /// Flipped rows, most confident (on the model's side) first (at most 100).
    pub flips: Vec<Flip>,
    /// The allowed loss, in accuracy points.
    pub max_drop: f64,
    /// Accuracy points lost on `level`: 100 · (baseline − model); negative when the model gained.
    pub drop: f64,
    pub passed: bool,
}

/// How a row falls into slices: the names of its length and noise buckets.
pub struct Slicing<'a> {
    pub length: &'a dyn Fn(&RowResult) -> Option<String>,
    pub length_order: &'a [String],
    pub noise: &'a dyn Fn(&RowResult) -> Option<String>,
    pub noise_order: &'a [String],
}

/// Who ran, for the report.
pub struct Sides<'a> {
    pub baseline: &'a str,
    pub baseline_precision: &'a str,
    pub precision: &'a str,
    pub baseline_docs_per_second: f64,
    pub docs_per_second: f64,
}

/// Compares the two models' rows (the same rows, in the same order).
pub fn compare(
    baseline: &[RowResult],
    model: &[RowResult],
    names: &[String],
    slicing: &Slicing,
    sides: &Sides,
    max_drop: f64,
) -> anyhow::Result<Gate> {
    if baseline.len() != model.len() || baseline.iter().zip(model).any(|(b, m)| b.meta.id != m.meta.id) {
        anyhow::bail!("the baseline and the model were not run on the same rows");
    }
    let pairs: Vec<(&RowResult, &RowResult)> = baseline.iter().zip(model).collect();
    let labelled: Vec<(&RowResult, &RowResult)> =
        pairs.iter().copied().filter(|(b, _)| b.meta.label.is_some()).collect();
    if labelled.is_empty() {
        anyhow::bail!("the split has no labelled rows: the gate compares accuracy, so --baseline needs labels");
    }
    let same = |(b, m): &(&RowResult, &RowResult)| argmax(&b.probs) == argmax(&m.probs);
    let agreement = pairs.iter().filter(|p| same(p)).count() as f64 / pairs.len().max(1) as f64;
    let (mb, mm) = (metrics(labelled.iter().map(|p| p.0), names), metrics(labelled.iter().map(|p| p.1), names));

    // Windows of documents: the drop is on documents, scored as `eval` scores them.
    let windows = pairs.iter().any(|(b, _)| b.meta.doc_id.is_some());
    let document_accuracy = windows.then(|| {
        let ids: Vec<String> =
            labelled.iter().map(|(b, _)| b.meta.doc_id.clone().unwrap_or_else(|| b.meta.id.clone())).collect();
        let side = |model_side: bool| {
            let mut p = Predictions::new(names.len());
            for (b, m) in &labelled {
                let r = if model_side { m } else { b };
                p.push_probs(&r.probs, r.meta.label.unwrap_or(0) as usize);
            }
            ClassificationMetrics::compute(&p.per_document(&ids), names).accuracy
        };
        Change::of(side(false), side(true))
    });
    let accuracy = Change::of(mb.accuracy, mm.accuracy);
    let (level, gated) = match document_accuracy {
        Some(d) => ("documents", d),
        None => ("rows", accuracy),
    };
    let drop = 100.0 * (gated.baseline - gated.model);

    let slice = |bucket: &dyn Fn(&RowResult) -> Option<String>, order: &[String]| -> Vec<SliceChange> {
        order
            .iter()
            .filter_map(|name| {
                let rows: Vec<_> = labelled.iter().copied().filter(|(b, _)| bucket(b).as_ref() == Some(name)).collect();
                if rows.is_empty() {
                    return None;
                }
                let (b, m) = (metrics(rows.iter().map(|p| p.0), names), metrics(rows.iter().map(|p| p.1), names));
                Some(SliceChange {
                    bucket: name.clone(),
                    examples: rows.len(),
                    agreement: rows.iter().filter(|p| same(p)).count() as f64 / rows.len() as f64,
                    accuracy: Change::of(b.accuracy, m.accuracy),
                    f1: Change::of(b.f1, m.f1),
                })
            })
            .collect()
    };

    let mut shifts: Vec<Shift> = pairs
        .iter()
        .map(|(b, m)| {
            let c = (0..names.len())
                .max_by(|&i, &j| (m.probs[i] - b.probs[i]).abs().total_cmp(&(m.probs[j] - b.probs[j]).abs()))
                .unwrap_or(0);
            Shift {
                id: m.meta.id.clone(),
                class: names[c].clone(),
                baseline_probability: b.probs[c],
                probability: m.probs[c],
                shift: (m.probs[c] - b.probs[c]).abs(),
            }
        })
        .collect();
    let mean_probability_shift = shifts.iter().map(|s| s.shift).sum::<f64>() / shifts.len().max(1) as f64;
    // Largest first; ties in input order (the sort is stable).
    shifts.sort_by(|a, b| b.shift.total_cmp(&a.shift));
    let max_probability_shift = shifts.first().map_or(0.0, |s| s.shift);
    shifts.truncate(LISTED);

    let mut flips: Vec<Flip> = pairs
        .iter()
        .filter(|p| !same(p))
        .map(|(b, m)| {
            let (pb, pm) = (argmax(&b.probs), argmax(&m.probs));
            Flip {
                id: m.meta.id.clone(),
                label: m.meta.label.map(|l| names[l as usize].clone()),
                baseline_prediction: names[pb].clone(),
                prediction: names[pm].clone(),
                baseline_confidence: b.probs[pb],
                confidence: m.probs[pm],
                text: m.meta.text.clone(),
            }
        })
        .collect();
    let flipped = flips.len();
    flips.sort_by(|a, b| b.confidence.total_cmp(&a.confidence));
    flips.truncate(LISTED);

    Ok(Gate {
        baseline: sides.baseline.to_string(),
        baseline_precision: sides.baseline_precision.to_string(),
        precision: sides.precision.to_string(),
        baseline_docs_per_second: sides.baseline_docs_per_second,
        docs_per_second: sides.docs_per_second,
        speedup: sides.docs_per_second / sides.baseline_docs_per_second.max(1e-12),
        rows: pairs.len(),
        agreement,
        flipped,
        level: level.to_string(),
        accuracy,
        f1: Change::of(mb.f1, mm.f1),
        loss: Change::of(mb.loss, mm.loss),
        document_accuracy,
        by_length: slice(slicing.length, slicing.length_order),
        by_noise: slice(slicing.noise, slicing.noise_order),
        max_probability_shift,
        mean_probability_shift,
        largest_shifts: shifts,
        flips,
        max_drop,
        drop,
        // NaN never passes.
        passed: drop <= max_drop,
    })
}

fn metrics<'a>(rows: impl Iterator<Item = &'a RowResult>, names: &[String]) -> ClassificationMetrics {
    let mut p = Predictions::new(names.len());
    for r in rows {
        p.push_probs(&r.probs, r.meta.label.unwrap_or(0) as usize);
    }
    ClassificationMetrics::compute(&p, names)
}

/// The gate as lines for the terminal report.
pub fn format(g: &Gate) -> Vec<String> {
    let mut out = vec![String::new()];
    out.push(format!(
        "against the baseline {} ({}), this model {}: agreement {:.2}% ({} of {} rows flipped)",
        g.baseline,
        g.baseline_precision,
        g.precision,
        100.0 * g.agreement,
        g.flipped,
        g.rows
    ));
    let line = |name: &str, c: &Change, digits: usize| {
        format!("  {name:<18} {:>9.digits$} → {:>9.digits$}  ({:+.digits$})", c.baseline, c.model, c.change)
    };
    out.push(line("accuracy", &g.accuracy, 4));
    if let Some(d) = &g.document_accuracy {
        out.push(line("document accuracy", d, 4));
    }
    out.push(line("f1", &g.f1, 4));
    out.push(line("loss", &g.loss, 4));
    out.push(format!("  probability shift  max {:.4}, mean {:.2e}", g.max_probability_shift, g.mean_probability_shift));
    out.push(format!(
        "  throughput         {:.1} → {:.1} docs/s ({:.2}×)",
        g.baseline_docs_per_second, g.docs_per_second, g.speedup
    ));
    for (title, slices) in [("by length (tokens)", &g.by_length), ("by noise score", &g.by_noise)] {
        if slices.is_empty() {
            continue;
        }
        out.push(format!("  {title:<18} {:>8} {:>9} {:>17}", "examples", "agreement", "accuracy change"));
        for s in slices {
            out.push(format!(
                "    {:<16} {:>8} {:>8.2}% {:>+17.4}",
                s.bucket,
                s.examples,
                100.0 * s.agreement,
                s.accuracy.change
            ));
        }
    }
    if !g.flips.is_empty() {
        out.push("  flipped predictions (most confident first):".to_string());
        for f in g.flips.iter().take(10) {
            let text = f
                .text
                .as_ref()
                .map(|t| format!("  \"{}…\"", t.chars().take(70).collect::<String>()))
                .unwrap_or_default();
            out.push(format!(
                "    {} (label {}): {} {:.3} → {} {:.3}{text}",
                f.id,
                f.label.as_deref().unwrap_or("-"),
                f.baseline_prediction,
                f.baseline_confidence,
                f.prediction,
                f.confidence
            ));
        }
        if g.flipped > 10 {
            out.push(format!("    … {} more in metrics.json", g.flipped.min(LISTED) - 10));
        }
    }
    out.push(format!(
        "gate: {} — {:.2} accuracy points {} on {} (--max-drop {})",
        if g.passed { "passed" } else { "FAILED" },
        g.drop.abs(),
        if g.drop >= 0.0 { "lost" } else { "gained" },
        g.level,
        g.max_drop
    ));
    out
}
