//! Scoring a predictions file in bounded memory: what `eval` reports, computed from the file
//! inference wrote (or a task array's merge assembled), so one process and an array of any size
//! report the same figures from the same rows.
//!
//! Two passes over the file. The first reads lengths and noise scores for the slices' edges (a
//! histogram of lengths; the noise scores, 4 bytes per row). The second feeds running sums:
//! confusion matrices, loss, calibration bins, per slice and part, documents averaged as their
//! windows go by (a document's windows are consecutive rows), and the comparison with a baseline
//! side by side. What grows with the split is what ROC-AUC needs, one f64 per row and scored
//! class ([`crate::metrics::Tally`]), plus the same per document when rows are windows.

use std::collections::HashSet;
use std::path::Path;

use anyhow::{bail, Result};
use serde::Serialize;

use super::gate::{self, Change, Shift, SliceChange};
use super::predictions::{for_each_length, for_each_pair, for_each_row, RowView};
use crate::metrics::{all_finite, argmax, softmax, CalibrationBin, ClassificationMetrics, RocScores, Tally};

/// Metrics of one slice of the rows.
#[derive(Debug, Clone, Serialize)]
pub struct Slice {
    pub bucket: String,
    pub examples: usize,
    pub accuracy: f64,
    pub f1: f64,
}

/// The scores of a part of the split's documents (with all their rows).
#[derive(Debug, Clone, Serialize)]
pub struct PartScores {
    pub documents: usize,
    pub rows: usize,
    pub metrics: Option<ClassificationMetrics>,
    /// Windows averaged per document (only when rows are windows).
    pub document_metrics: Option<ClassificationMetrics>,
}

/// The slices' edges: length slices' upper edges and their names, noise quartiles and theirs.
#[derive(Debug, Clone)]
pub struct Edges {
    pub length: Vec<usize>,
    pub length_names: Vec<String>,
    pub noise: Option<[f32; 3]>,
    pub noise_names: Vec<String>,
}

impl Edges {
    fn length_bucket(&self, tokens: usize) -> usize {
        self.length.iter().position(|&e| tokens <= e).unwrap_or(self.length.len())
    }

    fn noise_bucket(&self, x: Option<f32>) -> Option<usize> {
        let (e, x) = (self.noise.as_ref()?, x?);
        Some(e.iter().position(|&q| x <= q).unwrap_or(3))
    }
}

/// The first pass: the slices' edges from the labelled, finite rows — fixed length edges when
/// given, else the rows' length quartiles; the noise-score quartiles when the rows carry them.
pub fn edges(path: &Path, fixed: Option<&[usize]>) -> Result<Edges> {
    let mut lengths: Vec<u64> = Vec::new();
    let mut noise: Vec<f32> = Vec::new();
    for_each_length(path, |label, finite, tokens, n| {
        if label.is_some() && finite {
            if lengths.len() <= tokens {
                lengths.resize(tokens + 1, 0);
            }
            lengths[tokens] += 1;
            noise.extend(n);
        }
    })?;
    let length = match fixed {
        Some(e) => e.to_vec(),
        None => length_quartiles(&lengths),
    };
    let noise = quartile_edges(noise);
    Ok(Edges { length_names: length_bucket_names(&length), noise_names: noise_bucket_names(&noise), length, noise })
}

/// The upper edges of the length slices at the rows' token-length quartiles (Q1, median, Q3;
/// the lower of two middle values, so edges are lengths that occur), from a histogram of
/// lengths. Equal edges merge: on a corpus where most rows have one length there are fewer,
/// fuller slices, never empty ones.
pub fn length_quartiles(histogram: &[u64]) -> Vec<usize> {
    let n: u64 = histogram.iter().sum();
    if n == 0 {
        return Vec::new();
    }
    // The length at 0-based position `pos` of the sorted lengths.
    let at = |pos: u64| {
        let mut seen = 0;
        for (len, &c) in histogram.iter().enumerate() {
            seen += c;
            if seen > pos {
                return len;
            }
        }
        histogram.len() - 1
    };
    let q = |p: f64| at(((n - 1) as f64 * p).floor() as u64);
    let mut edges = vec![q(0.25), q(0.5), q(0.75)];
    edges.dedup();
    if edges.last() == Some(&at(n - 1)) {
        edges.pop();
    }
    edges
}

/// Slice names for upper edges `e1 < e2 < …`: `1-e1`, `e1+1-e2`, …, `>eN`.
pub fn length_bucket_names(edges: &[usize]) -> Vec<String> {
    let mut names = Vec::new();
    let mut lo = 1;
    for &e in edges {
        names.push(if lo == e { format!("{e}") } else { format!("{lo}-{e}") });
        lo = e + 1;
    }
    names.push(match edges.last() {
        Some(e) => format!(">{e}"),
        None => "all".to_string(),
    });
    names
}

/// Quartiles (Q1, median, Q3, interpolated) of noise scores; `None` without any. NaN scores
/// sort last (they do not stall the sort) and are left out.
pub fn quartile_edges(mut xs: Vec<f32>) -> Option<[f32; 3]> {
    xs.retain(|x| !x.is_nan());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f32::total_cmp);
    let q = |p| crate::clean::filter::quantile_linear(&xs, p);
    Some([q(0.25), q(0.5), q(0.75)])
}

pub fn noise_bucket_names(edges: &Option<[f32; 3]>) -> Vec<String> {
    match edges {
        Some([a, b, c]) => {
            vec![format!("Q1 <={a:.2}"), format!("Q2 <={b:.2}"), format!("Q3 <={c:.2}"), format!("Q4 >{c:.2}")]
        }
        None => Vec::new(),
    }
}

/// Windows averaged per document as they go by: a document ends where the next row's document
/// differs.
#[derive(Default)]
struct DocMean {
    current: Option<(String, Vec<f64>, usize, usize)>,
}

impl DocMean {
    /// Adds a row; the previous document's mean probabilities and label when this row starts
    /// another.
    fn add(&mut self, doc: &str, probs: &[f64], label: usize) -> Option<(Vec<f64>, usize)> {
        let done = match &self.current {
            Some((d, ..)) if d != doc => self.finish(),
            _ => None,
        };
        let e = self.current.get_or_insert_with(|| (doc.to_string(), vec![0.0; probs.len()], 0, label));
        for (s, p) in e.1.iter_mut().zip(probs) {
            *s += p;
        }
        e.2 += 1;
        done
    }

    fn finish(&mut self) -> Option<(Vec<f64>, usize)> {
        let (_, sum, n, label) = self.current.take()?;
        Some((sum.iter().map(|s| s / n as f64).collect(), label))
    }
}

/// Counts documents (runs of rows with one document id) and checks that a document's windows
/// are consecutive: a run that starts past its first window means they were not.
#[derive(Default)]
struct DocCount {
    last: Option<String>,
    documents: usize,
}

impl DocCount {
    fn add(&mut self, r: &RowView) -> Result<()> {
        if self.last.as_deref() != Some(r.doc_id) {
            if r.chunk.is_some_and(|c| c > 0) {
                bail!(
                    "window {} of document `{}` (row `{}`) does not follow its document's earlier windows: the windows of a document must be consecutive rows",
                    r.chunk.unwrap_or_default(),
                    r.doc_id,
                    r.id
                );
            }
            self.documents += 1;
            self.last = Some(r.doc_id.to_string());
        }
        Ok(())
    }
}

/// Rows and documents of one part of the split, scored.
struct PartTally {
    rows: usize,
    labelled: Tally,
    docs: Tally,
    doc_mean: DocMean,
    count: DocCount,
}

impl PartTally {
    fn new(k: usize, keep_scores: bool) -> PartTally {
        PartTally {
            rows: 0,
            labelled: Tally::new(k, keep_scores),
            docs: Tally::new(k, keep_scores),
            doc_mean: DocMean::default(),
            count: DocCount::default(),
        }
    }

    /// Counts a row; `probs` when it is labelled and finite.
    fn add(&mut self, r: &RowView, scored: Option<(&[f64], usize)>) -> Result<()> {
        self.rows += 1;
        self.count.add(r)?;
        if let Some((probs, label)) = scored {
            self.labelled.add(probs, label);
            if let Some((mean, l)) = self.doc_mean.add(r.doc_id, probs, label) {
                self.docs.add(&mean, l);
            }
        }
        Ok(())
    }

    fn finish(&mut self, names: &[String], windows: bool) -> PartScores {
        if let Some((mean, l)) = self.doc_mean.finish() {
            self.docs.add(&mean, l);
        }
        let n = self.labelled.examples();
        PartScores {
            documents: self.count.documents,
            rows: self.rows,
            metrics: (n > 0).then(|| self.labelled.metrics(names)),
            document_metrics: (windows && self.docs.examples() > 0).then(|| self.docs.metrics(names)),
        }
    }
}

/// One scored class's ROC curve and the area under it.
pub struct RocCurve {
    pub class: usize,
    pub auc: Option<f64>,
    pub points: Vec<(f64, f64)>,
}

/// What the predictions score.
pub struct Scores {
    pub rows: usize,
    pub documents: usize,
    pub unlabelled: usize,
    /// Rows whose logits are not all finite: counted, left out of every metric.
    pub nonfinite: usize,
    pub metrics: Option<ClassificationMetrics>,
    pub document_metrics: Option<ClassificationMetrics>,
    pub by_length: Vec<Slice>,
    pub by_noise: Vec<Slice>,
    pub calibration: Vec<CalibrationBin>,
    /// Per scored class: its ROC-AUC and curve (for the chart).
    pub roc: Vec<RocCurve>,
    /// The clean and the leaked documents apart, when asked.
    pub parts: Option<(PartScores, PartScores)>,
}

/// The second pass over a predictions file. `leaked`: the documents to score apart (with the
/// rest), when asked.
pub fn score(
    path: &Path,
    names: &[String],
    edges: &Edges,
    windows: bool,
    leaked: Option<&HashSet<String>>,
) -> Result<Scores> {
    let k = names.len();
    let mut all = PartTally::new(k, true);
    let mut parts = leaked.map(|_| (PartTally::new(k, false), PartTally::new(k, false)));
    let mut by_length: Vec<Tally> = (0..edges.length_names.len()).map(|_| Tally::new(k, false)).collect();
    let mut by_noise: Vec<Tally> = (0..edges.noise_names.len()).map(|_| Tally::new(k, false)).collect();
    let (mut unlabelled, mut nonfinite) = (0, 0);
    for_each_row(path, |r| {
        let finite = all_finite(r.logits);
        nonfinite += !finite as usize;
        unlabelled += r.label.is_none() as usize;
        let probs = (finite && r.label.is_some()).then(|| softmax(r.logits));
        let scored = probs.as_deref().map(|p| (p, r.label.unwrap_or(0) as usize));
        all.add(&r, scored)?;
        if let (Some((clean, dirty)), Some(set)) = (&mut parts, leaked) {
            let part = if set.contains(r.doc_id) { dirty } else { clean };
            part.add(&r, scored)?;
        }
        if let Some((p, label)) = scored {
            by_length[edges.length_bucket(r.tokens)].add(p, label);
            if let Some(b) = edges.noise_bucket(r.noise) {
                by_noise[b].add(p, label);
            }
        }
        Ok(())
    })?;
    let slices = |tallies: &mut [Tally], order: &[String]| -> Vec<Slice> {
        tallies
            .iter_mut()
            .zip(order)
            .filter(|(t, _)| t.examples() > 0)
            .map(|(t, name)| {
                let m = t.metrics(names);
                Slice { bucket: name.clone(), examples: m.examples, accuracy: m.accuracy, f1: m.f1 }
            })
            .collect()
    };
    let by_length = slices(&mut by_length, &edges.length_names);
    let by_noise = slices(&mut by_noise, &edges.noise_names);
    let calibration = all.labelled.calibration();
    let roc = all
        .labelled
        .roc_scores()
        .iter_mut()
        .filter(|r| r.has_both())
        .map(|r: &mut RocScores| RocCurve { class: r.class, auc: r.auc(), points: r.curve() })
        .collect();
    let whole = all.finish(names, windows);
    Ok(Scores {
        rows: whole.rows,
        documents: whole.documents,
        unlabelled,
        nonfinite,
        metrics: whole.metrics,
        document_metrics: whole.document_metrics,
        by_length,
        by_noise,
        calibration,
        roc,
        parts: parts.map(|(mut c, mut d)| (c.finish(names, windows), d.finish(names, windows))),
    })
}

/// Per slice of the gate: both sides' tallies and how often they agree.
struct SliceTally {
    base: Tally,
    model: Tally,
    agree: usize,
}

impl SliceTally {
    fn new(k: usize) -> SliceTally {
        SliceTally { base: Tally::new(k, false), model: Tally::new(k, false), agree: 0 }
    }
}

/// The gate's comparison of a model's predictions with its baseline's, row by row: running
/// sums, plus the 100 largest probability shifts.
pub struct GateInput<'a> {
    pub model: &'a Path,
    pub baseline: &'a Path,
    pub names: &'a [String],
    pub edges: &'a Edges,
    pub windows: bool,
}

/// What the gate counts; [`gate::finish`] turns it into the report.
pub struct GateCounts {
    pub rows: usize,
    pub agree: usize,
    pub flipped: usize,
    /// Rows left out because one side's logits are not finite.
    pub baseline_nonfinite: usize,
    pub model_nonfinite: usize,
    pub accuracy: Change,
    pub f1: Change,
    pub loss: Change,
    pub document_accuracy: Option<Change>,
    /// On the gated level (documents when rows are windows): labelled examples, and the
    /// discordant pairs — right only on the baseline's side, right only on the model's.
    pub examples: usize,
    pub baseline_only_right: usize,
    pub model_only_right: usize,
    pub by_length: Vec<SliceChange>,
    pub by_noise: Vec<SliceChange>,
    pub max_probability_shift: f64,
    pub mean_probability_shift: f64,
    pub largest_shifts: Vec<Shift>,
}

pub fn compare(g: &GateInput) -> Result<GateCounts> {
    let (names, k) = (g.names, g.names.len());
    let (mut base, mut model) = (Tally::new(k, false), Tally::new(k, false));
    let (mut base_docs, mut model_docs) = (Tally::new(k, false), Tally::new(k, false));
    let (mut base_mean, mut model_mean) = (DocMean::default(), DocMean::default());
    let mut length: Vec<SliceTally> = (0..g.edges.length_names.len()).map(|_| SliceTally::new(k)).collect();
    let mut noise: Vec<SliceTally> = (0..g.edges.noise_names.len()).map(|_| SliceTally::new(k)).collect();
    let (mut rows, mut agree, mut flipped, mut base_bad, mut model_bad) = (0, 0, 0, 0, 0);
    let (mut row_b, mut row_c, mut doc_b, mut doc_c) = (0, 0, 0, 0);
    let (mut shift_sum, mut shift_max, mut shift_floor) = (0.0f64, 0.0f64, 0.0f64);
    let mut shifts: Vec<(f64, u64, Shift)> = Vec::new();
    let mut index = 0u64;
    let discordant = |b: &[f64], m: &[f64], label: usize, bc: (&mut usize, &mut usize)| {
        let (br, mr) = (argmax(b) == label, argmax(m) == label);
        *bc.0 += (br && !mr) as usize;
        *bc.1 += (!br && mr) as usize;
    };
    for_each_pair(g.model, g.baseline, |m, b| {
        index += 1;
        let (bf, mf) = (all_finite(b.logits), all_finite(m.logits));
        base_bad += !bf as usize;
        model_bad += !mf as usize;
        if !(bf && mf) {
            return Ok(());
        }
        let (pb, pm) = (softmax(b.logits), softmax(m.logits));
        rows += 1;
        let same = argmax(&pb) == argmax(&pm);
        agree += same as usize;
        flipped += !same as usize;
        // The class whose probability moved most (the last of equals).
        let mut c = 0;
        for i in 0..k {
            if (pm[i] - pb[i]).abs() >= (pm[c] - pb[c]).abs() {
                c = i;
            }
        }
        let shift = (pm[c] - pb[c]).abs();
        shift_sum += shift;
        shift_max = shift_max.max(shift);
        if shift >= shift_floor {
            let s = Shift {
                id: m.id.to_string(),
                class: names[c].clone(),
                baseline_probability: pb[c],
                probability: pm[c],
                shift,
            };
            shifts.push((shift, index, s));
            if shifts.len() >= 2 * gate::LISTED {
                keep_largest(&mut shifts);
                // A row below the smallest kept shift can never be listed.
                shift_floor = shifts.last().map_or(0.0, |s| s.0);
            }
        }
        let Some(label) = b.label.map(|l| l as usize) else { return Ok(()) };
        base.add(&pb, label);
        model.add(&pm, label);
        discordant(&pb, &pm, label, (&mut row_b, &mut row_c));
        let slice = |t: &mut SliceTally| {
            t.base.add(&pb, label);
            t.model.add(&pm, label);
            t.agree += same as usize;
        };
        slice(&mut length[g.edges.length_bucket(b.tokens)]);
        if let Some(i) = g.edges.noise_bucket(b.noise) {
            slice(&mut noise[i]);
        }
        if g.windows {
            if let (Some(db), Some(dm)) = (base_mean.add(b.doc_id, &pb, label), model_mean.add(b.doc_id, &pm, label)) {
                base_docs.add(&db.0, db.1);
                model_docs.add(&dm.0, dm.1);
                discordant(&db.0, &dm.0, db.1, (&mut doc_b, &mut doc_c));
            }
        }
        Ok(())
    })?;
    if let (Some(db), Some(dm)) = (base_mean.finish(), model_mean.finish()) {
        base_docs.add(&db.0, db.1);
        model_docs.add(&dm.0, dm.1);
        discordant(&db.0, &dm.0, db.1, (&mut doc_b, &mut doc_c));
    }
    if base.examples() == 0 {
        bail!("the split has no labelled rows with finite outputs on both sides: the gate compares accuracy, so --baseline needs labels");
    }
    let (mb, mm) = (base.metrics(names), model.metrics(names));
    let document_accuracy =
        g.windows.then(|| Change::of(base_docs.metrics(names).accuracy, model_docs.metrics(names).accuracy));
    let (examples, b_only, m_only) = match document_accuracy {
        Some(_) => (base_docs.examples(), doc_b, doc_c),
        None => (base.examples(), row_b, row_c),
    };
    let slice_changes = |tallies: &mut [SliceTally], order: &[String]| -> Vec<SliceChange> {
        tallies
            .iter_mut()
            .zip(order)
            .filter(|(t, _)| t.base.examples() > 0)
            .map(|(t, name)| {
                let (b, m) = (t.base.metrics(names), t.model.metrics(names));
                SliceChange {
                    bucket: name.clone(),
                    examples: b.examples,
                    agreement: t.agree as f64 / b.examples as f64,
                    accuracy: Change::of(b.accuracy, m.accuracy),
                    f1: Change::of(b.f1, m.f1),
                }
            })
            .collect()
    };
    keep_largest(&mut shifts);
    Ok(GateCounts {
        rows,
        agree,
        flipped,
        baseline_nonfinite: base_bad,
        model_nonfinite: model_bad,
        accuracy: Change::of(mb.accuracy, mm.accuracy),
        f1: Change::of(mb.f1, mm.f1),
        loss: Change::of(mb.loss, mm.loss),
        document_accuracy,
        examples,
        baseline_only_right: b_only,
        model_only_right: m_only,
        by_length: slice_changes(&mut length, &g.edges.length_names),
        by_noise: slice_changes(&mut noise, &g.edges.noise_names),
        max_probability_shift: shift_max,
        mean_probability_shift: shift_sum / rows.max(1) as f64,
        largest_shifts: shifts.into_iter().map(|s| s.2).collect(),
    })
}

/// The largest shifts first, ties in row order, at most [`gate::LISTED`].
fn keep_largest(shifts: &mut Vec<(f64, u64, Shift)>) {
    shifts.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    shifts.truncate(gate::LISTED);
}

/// Keeps the `n` first of `items` by `order`, for lists built while rows stream by (the most
/// confident mistakes, the flipped rows): call as items are pushed, and once at the end.
pub fn keep_first<T>(items: &mut Vec<T>, n: usize, order: impl Fn(&T, &T) -> std::cmp::Ordering) {
    if items.len() >= 2 * n.max(1) {
        items.sort_by(&order);
        items.truncate(n);
    }
}

/// The final cut of [`keep_first`].
pub fn first<T>(mut items: Vec<T>, n: usize, order: impl Fn(&T, &T) -> std::cmp::Ordering) -> Vec<T> {
    items.sort_by(order);
    items.truncate(n);
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    fn histogram(tokens: &[usize]) -> Vec<u64> {
        let mut h = vec![0; tokens.iter().max().map_or(0, |m| m + 1)];
        for &t in tokens {
            h[t] += 1;
        }
        h
    }

    #[test]
    fn length_and_noise_edges() {
        // Quartiles of the data: short texts get slices of their own, each about a quarter.
        let tokens: Vec<usize> = (0..100).map(|i| 5 + i % 20).collect();
        let edges = length_quartiles(&histogram(&tokens));
        assert_eq!(edges, [9, 14, 19]);
        let names = length_bucket_names(&edges);
        assert_eq!(names, ["1-9", "10-14", "15-19", ">19"]);
        // One length everywhere: one slice, not four (three of them empty).
        assert_eq!(length_bucket_names(&length_quartiles(&histogram(&[7; 10]))), ["all"]);
        assert_eq!(length_bucket_names(&length_quartiles(&histogram(&[7, 7, 7, 9]))), ["1-7", ">7"]);
        assert!(length_quartiles(&[]).is_empty());
        let edges = quartile_edges(vec![4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(edges, [1.75, 2.5, 3.25]);
        assert!(quartile_edges(Vec::new()).is_none());
        // NaN and infinite scores: the quartiles of the numbers, and an end.
        assert_eq!(quartile_edges(vec![f32::NAN, 4.0, 1.0, f32::NAN, 3.0, 2.0]).unwrap(), [1.75, 2.5, 3.25]);
        assert!(quartile_edges(vec![f32::NAN; 3]).is_none());
        let e = quartile_edges(vec![f32::INFINITY, f32::NEG_INFINITY, 0.0, 0.0]).unwrap();
        assert_eq!(e[1], 0.0);
        let fixed = [64, 128, 256, 512];
        let edges = Edges {
            length_names: length_bucket_names(&fixed),
            length: fixed.to_vec(),
            noise: Some([1.0, 2.0, 3.0]),
            noise_names: noise_bucket_names(&Some([1.0, 2.0, 3.0])),
        };
        assert_eq!(edges.length_names, ["1-64", "65-128", "129-256", "257-512", ">512"]);
        assert_eq!((edges.length_bucket(64), edges.length_bucket(65), edges.length_bucket(513)), (0, 1, 4));
        assert_eq!(
            (edges.noise_bucket(Some(1.0)), edges.noise_bucket(Some(9.0)), edges.noise_bucket(None)),
            (Some(0), Some(3), None)
        );
        assert_eq!(edges.noise_bucket(Some(f32::NAN)), Some(3));
    }

    #[test]
    fn documents_are_averaged_as_their_windows_go_by() {
        let mut m = DocMean::default();
        assert!(m.add("a", &[0.8, 0.2], 1).is_none());
        assert!(m.add("a", &[0.0, 1.0], 1).is_none());
        let (mean, label) = m.add("b", &[0.7, 0.3], 0).unwrap();
        assert!((mean[1] - 0.6).abs() < 1e-12 && label == 1);
        let (mean, label) = m.finish().unwrap();
        assert_eq!((mean, label), (vec![0.7, 0.3], 0));
        assert!(m.finish().is_none());
    }
}
