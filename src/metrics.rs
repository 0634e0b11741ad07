//! Classification and pretraining metrics, shared by `train` (evaluation during training) and
//! `eval` (ONNX Runtime): accuracy, precision / recall / F1 (binary: the positive class 1;
//! more classes: macro and per class), ROC-AUC (binary; one-vs-rest macro otherwise), the
//! confusion matrix, calibration bins and mean cross-entropy, as running sums ([`Tally`]) so a
//! split of any size is scored row by row. Windowed rows are first averaged per document.

use std::collections::BTreeMap;

use serde::Serialize;

/// Predicted class probabilities and true labels of a set of examples.
#[derive(Debug, Clone, Default)]
pub struct Predictions {
    pub num_labels: usize,
    /// Row-major `[n, num_labels]`, each row sums to 1.
    pub probs: Vec<f64>,
    pub labels: Vec<usize>,
}

impl Predictions {
    pub fn new(num_labels: usize) -> Predictions {
        Predictions { num_labels, ..Default::default() }
    }

    pub fn len(&self) -> usize {
        self.labels.len()
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Adds one example from its logits (softmax taken here, in f64).
    pub fn push_logits(&mut self, logits: &[f32], label: usize) {
        self.push_probs(&softmax(logits), label);
    }

    pub fn push_probs(&mut self, probs: &[f64], label: usize) {
        debug_assert_eq!(probs.len(), self.num_labels);
        self.probs.extend_from_slice(probs);
        self.labels.push(label);
    }

    pub fn probs(&self, i: usize) -> &[f64] {
        &self.probs[i * self.num_labels..(i + 1) * self.num_labels]
    }

    /// Index of the largest probability (the first on ties).
    pub fn predicted(&self, i: usize) -> usize {
        argmax(self.probs(i))
    }

    /// One example per document: the mean of its windows' probabilities. `doc_ids[i]` names
    /// the document of row `i`; documents keep the order of their first row.
    pub fn per_document(&self, doc_ids: &[String]) -> Predictions {
        let mut order: Vec<&str> = Vec::new();
        let mut sums: BTreeMap<&str, (Vec<f64>, usize, usize)> = BTreeMap::new();
        for (i, doc) in doc_ids.iter().enumerate() {
            let e = sums.entry(doc.as_str()).or_insert_with(|| {
                order.push(doc.as_str());
                (vec![0.0; self.num_labels], 0, self.labels[i])
            });
            for (s, p) in e.0.iter_mut().zip(self.probs(i)) {
                *s += p;
            }
            e.1 += 1;
        }
        let mut out = Predictions::new(self.num_labels);
        for doc in order {
            let (sum, n, label) = &sums[doc];
            let mean: Vec<f64> = sum.iter().map(|s| s / *n as f64).collect();
            out.push_probs(&mean, *label);
        }
        out
    }
}

/// The largest |a − b| of two outputs compared element by element, or NaN when either side
/// holds a NaN or an infinity, or their lengths differ: `max_abs_diff(a, b) <= tol` then fails.
/// (`fold(0.0, f64::max)` skips NaN, so an all-NaN output would pass a tolerance check.)
pub fn max_abs_diff<A: Copy + Into<f64>, B: Copy + Into<f64>>(a: &[A], b: &[B]) -> f64 {
    if a.len() != b.len() {
        return f64::NAN;
    }
    let mut worst = 0.0f64;
    for (&x, &y) in a.iter().zip(b) {
        let (x, y): (f64, f64) = (x.into(), y.into());
        if !x.is_finite() || !y.is_finite() {
            return f64::NAN;
        }
        worst = worst.max((x - y).abs());
    }
    worst
}

/// The largest |x|, NaN when any value is not finite.
pub fn max_abs<A: Copy + Into<f64>>(xs: &[A]) -> f64 {
    xs.iter().map(|&x| x.into()).try_fold(0.0f64, |m, x: f64| x.is_finite().then(|| m.max(x.abs()))).unwrap_or(f64::NAN)
}

/// The worst of several differences, NaN when any is NaN.
pub fn worst_of(diffs: impl IntoIterator<Item = f64>) -> f64 {
    diffs.into_iter().fold(0.0, |m, d| if m.is_nan() || d.is_nan() { f64::NAN } else { m.max(d) })
}

pub fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &x| m.max(x as f64));
    let e: Vec<f64> = logits.iter().map(|&x| (x as f64 - max).exp()).collect();
    let sum: f64 = e.iter().sum();
    e.into_iter().map(|x| x / sum).collect()
}

/// Index of the largest value, the first on ties. NaN never wins (index 0 when every value is
/// NaN): a NaN row used to become class 0 whatever its other values. Callers that score rows
/// set non-finite ones aside before (see [`all_finite`]).
pub fn argmax(xs: &[f64]) -> usize {
    let mut best: Option<usize> = None;
    for (i, &x) in xs.iter().enumerate() {
        if x.is_nan() {
            continue;
        }
        match best {
            Some(b) if x <= xs[b] => {}
            _ => best = Some(i),
        }
    }
    best.unwrap_or(0)
}

/// Whether every value is finite: a row of logits the metrics can use.
pub fn all_finite(xs: &[f32]) -> bool {
    xs.iter().all(|x| x.is_finite())
}

/// Metrics of one class against the rest.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassMetrics {
    pub label: String,
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    pub support: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ClassificationMetrics {
    pub examples: usize,
    /// Mean cross-entropy of the true class (natural log).
    pub loss: f64,
    pub accuracy: f64,
    /// Binary: of the positive class (1). More classes: macro average.
    pub precision: f64,
    pub recall: f64,
    pub f1: f64,
    /// Binary: P(class 1) as the score. More classes: one-vs-rest, macro. `None` when a class
    /// needed for it is absent from the labels.
    pub roc_auc: Option<f64>,
    pub per_class: Vec<ClassMetrics>,
    /// `confusion[true][predicted]`.
    pub confusion: Vec<Vec<usize>>,
}

impl ClassificationMetrics {
    pub fn compute(p: &Predictions, names: &[String]) -> ClassificationMetrics {
        let mut t = Tally::new(p.num_labels, true);
        for i in 0..p.len() {
            t.add(p.probs(i), p.labels[i]);
        }
        t.metrics(names)
    }

    /// A metric by the name used in `metric_for_best_model` (`accuracy`, `f1`, `loss`, …).
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name.strip_prefix("eval_").unwrap_or(name) {
            "loss" => self.loss,
            "accuracy" => self.accuracy,
            "precision" => self.precision,
            "recall" => self.recall,
            "f1" => self.f1,
            "roc_auc" => self.roc_auc?,
            _ => return None,
        })
    }
}

pub const CLASSIFY_METRICS: &[&str] = &["loss", "accuracy", "precision", "recall", "f1", "roc_auc"];

/// 0 when the denominator is 0 (scikit-learn's `zero_division=0`).
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 {
        0.0
    } else {
        a / b
    }
}

/// The confidence bins of the reliability diagram.
pub const CALIBRATION_BINS: usize = 10;

/// Running sums for [`ClassificationMetrics`], one row at a time, so a split of any size is
/// scored without holding its rows: the confusion matrix, the summed loss, the calibration bins,
/// and — the only part that grows with the rows — each scored class's probabilities for ROC-AUC
/// (8 bytes per row when binary, 8 per class and row otherwise; none without `keep_scores`).
#[derive(Debug, Clone)]
pub struct Tally {
    k: usize,
    confusion: Vec<Vec<usize>>,
    loss_sum: f64,
    /// Class 1 when binary, every class otherwise; empty without scores.
    roc: Vec<RocScores>,
    /// Per bin: summed confidence, right, rows.
    calibration: Vec<(f64, usize, usize)>,
}

impl Tally {
    pub fn new(num_labels: usize, keep_scores: bool) -> Tally {
        let scored: Vec<usize> = match (keep_scores, num_labels) {
            (false, _) => Vec::new(),
            (true, 2) => vec![1],
            (true, k) => (0..k).collect(),
        };
        Tally {
            k: num_labels,
            confusion: vec![vec![0; num_labels]; num_labels],
            loss_sum: 0.0,
            roc: scored.into_iter().map(RocScores::new).collect(),
            calibration: vec![(0.0, 0, 0); CALIBRATION_BINS],
        }
    }

    /// One row: its class probabilities and true label.
    pub fn add(&mut self, probs: &[f64], label: usize) {
        debug_assert_eq!(probs.len(), self.k);
        let pred = argmax(probs);
        self.confusion[label][pred] += 1;
        self.loss_sum -= probs[label].max(1e-300).ln();
        for r in &mut self.roc {
            r.push(probs[r.class], label == r.class);
        }
        let c = probs[pred];
        let b = ((c * CALIBRATION_BINS as f64) as usize).min(CALIBRATION_BINS - 1);
        let bin = &mut self.calibration[b];
        bin.0 += c;
        bin.1 += (pred == label) as usize;
        bin.2 += 1;
    }

    pub fn examples(&self) -> usize {
        self.confusion.iter().flatten().sum()
    }

    pub fn confusion(&self) -> &[Vec<usize>] {
        &self.confusion
    }

    /// The metrics of the rows added so far (`roc_auc` only when scores were kept).
    pub fn metrics(&mut self, names: &[String]) -> ClassificationMetrics {
        let k = self.k;
        let n = self.examples();
        let confusion = self.confusion.clone();
        let correct: usize = (0..k).map(|c| confusion[c][c]).sum();
        let per_class: Vec<ClassMetrics> = (0..k)
            .map(|c| {
                let tp = confusion[c][c] as f64;
                let predicted: usize = (0..k).map(|t| confusion[t][c]).sum();
                let support: usize = confusion[c].iter().sum();
                let precision = ratio(tp, predicted as f64);
                let recall = ratio(tp, support as f64);
                let f1 = ratio(2.0 * precision * recall, precision + recall);
                let label = names.get(c).cloned().unwrap_or_else(|| format!("LABEL_{c}"));
                ClassMetrics { label, precision, recall, f1, support }
            })
            .collect();
        let (precision, recall, f1) = if k == 2 {
            (per_class[1].precision, per_class[1].recall, per_class[1].f1)
        } else {
            let mean = |f: fn(&ClassMetrics) -> f64| per_class.iter().map(f).sum::<f64>() / k as f64;
            (mean(|m| m.precision), mean(|m| m.recall), mean(|m| m.f1))
        };
        let roc_auc = if self.roc.is_empty() {
            None
        } else {
            let aucs: Option<Vec<f64>> = self.roc.iter_mut().map(RocScores::auc).collect();
            aucs.map(|a| a.iter().sum::<f64>() / a.len() as f64)
        };
        ClassificationMetrics {
            examples: n,
            loss: if n > 0 { self.loss_sum / n as f64 } else { f64::NAN },
            accuracy: ratio(correct as f64, n as f64),
            precision,
            recall,
            f1,
            roc_auc,
            per_class,
            confusion,
        }
    }

    /// The reliability diagram: rows binned by the predicted class's probability
    /// ([`CALIBRATION_BINS`] equal-width bins over [0, 1]); empty bins left out.
    pub fn calibration(&self) -> Vec<CalibrationBin> {
        self.calibration
            .iter()
            .filter(|b| b.2 > 0)
            .map(|&(c, right, n)| CalibrationBin {
                confidence: c / n as f64,
                accuracy: right as f64 / n as f64,
                examples: n,
            })
            .collect()
    }

    /// The scored classes' probabilities (ROC curves are drawn from them).
    pub fn roc_scores(&mut self) -> &mut [RocScores] {
        &mut self.roc
    }
}

/// One confidence bin of the reliability diagram.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CalibrationBin {
    pub confidence: f64,
    pub accuracy: f64,
    pub examples: usize,
}

/// One class's probability on the rows of that class (positives) and on the others.
#[derive(Debug, Clone, Default)]
pub struct RocScores {
    pub class: usize,
    pos: Vec<f64>,
    neg: Vec<f64>,
    sorted: bool,
}

impl RocScores {
    pub fn new(class: usize) -> RocScores {
        RocScores { class, ..Default::default() }
    }

    pub fn from_slices(scores: &[f64], positive: &[bool]) -> RocScores {
        let mut r = RocScores::new(1);
        for (&s, &p) in scores.iter().zip(positive) {
            r.push(s, p);
        }
        r
    }

    pub fn push(&mut self, score: f64, positive: bool) {
        if positive {
            self.pos.push(score)
        } else {
            self.neg.push(score)
        }
        self.sorted = false;
    }

    /// Whether both positives and negatives occur (what a curve needs).
    pub fn has_both(&self) -> bool {
        !self.pos.is_empty() && !self.neg.is_empty()
    }

    /// Ascending in the total order of f64 (NaN above +inf), so ties are exact and a NaN
    /// cannot stall a loop that groups them.
    fn sort(&mut self) {
        if !self.sorted {
            self.pos.sort_unstable_by(f64::total_cmp);
            self.neg.sort_unstable_by(f64::total_cmp);
            self.sorted = true;
        }
    }

    /// Area under the ROC curve: the Mann–Whitney U statistic with ties counted half (what
    /// scikit-learn's trapezoidal `roc_auc_score` gives), counted exactly. `None` unless both
    /// classes occur.
    pub fn auc(&mut self) -> Option<f64> {
        if !self.has_both() {
            return None;
        }
        self.sort();
        let (pos, neg) = (&self.pos, &self.neg);
        let mut u = 0.0f64;
        let (mut i, mut below) = (0, 0);
        while i < pos.len() {
            let s = pos[i];
            let mut group = 0usize;
            while i < pos.len() && pos[i].total_cmp(&s).is_eq() {
                group += 1;
                i += 1;
            }
            while below < neg.len() && neg[below].total_cmp(&s).is_lt() {
                below += 1;
            }
            let mut equal = 0usize;
            while below + equal < neg.len() && neg[below + equal].total_cmp(&s).is_eq() {
                equal += 1;
            }
            u += group as f64 * (below as f64 + 0.5 * equal as f64);
        }
        Some(u / (pos.len() as f64 * neg.len() as f64))
    }

    /// ROC curve points (false positive rate, true positive rate), thresholds descending, one
    /// point per distinct score.
    pub fn curve(&mut self) -> Vec<(f64, f64)> {
        self.sort();
        let (pos, neg) = (&self.pos, &self.neg);
        let n_pos = pos.len().max(1) as f64;
        let n_neg = neg.len().max(1) as f64;
        let (mut i, mut j) = (pos.len(), neg.len());
        let (mut tp, mut fp) = (0usize, 0usize);
        let mut points = vec![(0.0, 0.0)];
        while i > 0 || j > 0 {
            let s = match (i, j) {
                (0, _) => neg[j - 1],
                (_, 0) => pos[i - 1],
                _ => std::cmp::max_by(pos[i - 1], neg[j - 1], f64::total_cmp),
            };
            while i > 0 && pos[i - 1].total_cmp(&s).is_eq() {
                tp += 1;
                i -= 1;
            }
            while j > 0 && neg[j - 1].total_cmp(&s).is_eq() {
                fp += 1;
                j -= 1;
            }
            points.push((fp as f64 / n_neg, tp as f64 / n_pos));
        }
        points
    }
}

/// Area under the ROC curve of `scores` (see [`RocScores::auc`]). `None` unless both classes
/// occur.
pub fn roc_auc_binary(scores: &[f64], positive: &[bool]) -> Option<f64> {
    RocScores::from_slices(scores, positive).auc()
}

/// ROC curve points (false positive rate, true positive rate), thresholds descending.
pub fn roc_curve(scores: &[f64], positive: &[bool]) -> Vec<(f64, f64)> {
    RocScores::from_slices(scores, positive).curve()
}

/// Pretraining evaluation: masked-LM loss / accuracy / perplexity and NSP loss / accuracy.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct PretrainMetrics {
    pub examples: usize,
    pub mlm_tokens: usize,
    pub mlm_loss: f64,
    pub mlm_accuracy: f64,
    pub perplexity: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nsp_loss: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nsp_accuracy: Option<f64>,
    /// `mlm_loss + nsp_loss`: what training minimises.
    pub loss: f64,
}

/// Sums for [`PretrainMetrics`], filled batch by batch.
#[derive(Debug, Clone, Default)]
pub struct PretrainTally {
    pub examples: usize,
    pub mlm_tokens: usize,
    pub mlm_loss_sum: f64,
    pub mlm_correct: usize,
    pub nsp_examples: usize,
    pub nsp_loss_sum: f64,
    pub nsp_correct: usize,
}

impl PretrainTally {
    /// One prediction over `k` classes (vocabulary or NSP) from logits.
    fn score(logits: &[f32], label: usize) -> (f64, bool) {
        let p = softmax(logits);
        (-p[label].max(1e-300).ln(), argmax(&p) == label)
    }

    pub fn add_mlm(&mut self, logits: &[f32], label: usize) {
        let (loss, ok) = Self::score(logits, label);
        self.mlm_tokens += 1;
        self.mlm_loss_sum += loss;
        self.mlm_correct += ok as usize;
    }

    pub fn add_nsp(&mut self, logits: &[f32], label: usize) {
        let (loss, ok) = Self::score(logits, label);
        self.nsp_examples += 1;
        self.nsp_loss_sum += loss;
        self.nsp_correct += ok as usize;
    }

    pub fn finish(&self) -> PretrainMetrics {
        let mlm_loss = ratio(self.mlm_loss_sum, self.mlm_tokens as f64);
        let nsp = (self.nsp_examples > 0).then(|| {
            (self.nsp_loss_sum / self.nsp_examples as f64, self.nsp_correct as f64 / self.nsp_examples as f64)
        });
        PretrainMetrics {
            examples: self.examples,
            mlm_tokens: self.mlm_tokens,
            mlm_loss,
            mlm_accuracy: ratio(self.mlm_correct as f64, self.mlm_tokens as f64),
            perplexity: mlm_loss.exp(),
            nsp_loss: nsp.map(|n| n.0),
            nsp_accuracy: nsp.map(|n| n.1),
            loss: mlm_loss + nsp.map(|n| n.0).unwrap_or(0.0),
        }
    }
}

impl PretrainMetrics {
    pub fn get(&self, name: &str) -> Option<f64> {
        Some(match name.strip_prefix("eval_").unwrap_or(name) {
            "loss" => self.loss,
            "mlm_loss" => self.mlm_loss,
            "mlm_accuracy" => self.mlm_accuracy,
            "perplexity" => self.perplexity,
            "nsp_loss" => self.nsp_loss?,
            "nsp_accuracy" => self.nsp_accuracy?,
            _ => return None,
        })
    }
}

pub const PRETRAIN_METRICS: &[&str] = &["loss", "mlm_loss", "mlm_accuracy", "perplexity", "nsp_loss", "nsp_accuracy"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roc_terminates_and_ends_at_one_one_with_nan_infinite_and_equal_scores() {
        let cases: [Vec<f64>; 4] = [
            vec![f64::NAN, 0.3, f64::NAN, 0.9, 0.1, f64::NAN],
            vec![f64::INFINITY, f64::NEG_INFINITY, 0.5, f64::INFINITY, 0.2, 0.8],
            vec![0.5; 6],
            vec![f64::NAN; 6],
        ];
        let positive = [true, false, true, false, true, false];
        for scores in cases {
            let curve = roc_curve(&scores, &positive);
            assert!(curve.len() <= scores.len() + 1, "{scores:?}: {curve:?}");
            assert_eq!(*curve.last().unwrap(), (1.0, 1.0), "{scores:?}");
            assert!(curve.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1), "{scores:?}: {curve:?}");
            let auc = roc_auc_binary(&scores, &positive).unwrap();
            assert!((0.0..=1.0).contains(&auc), "{scores:?}: {auc}");
        }
    }

    #[test]
    fn every_metric_terminates_on_nan_infinite_and_equal_scores() {
        // argmax: NaN never wins; all NaN is class 0; ties go to the first.
        assert_eq!(argmax(&[f64::NAN, 0.2, 0.7]), 2);
        assert_eq!(argmax(&[0.3, f64::NAN]), 0);
        assert_eq!(argmax(&[f64::NAN, 0.3]), 1);
        assert_eq!(argmax(&[f64::NAN, f64::NAN]), 0);
        assert_eq!(argmax(&[f64::NEG_INFINITY, f64::INFINITY]), 1);
        assert_eq!(argmax(&[0.5, 0.5, 0.5]), 0);
        assert!(!all_finite(&[f32::INFINITY, 0.0]) && !all_finite(&[f32::NAN]) && all_finite(&[1e38, -1e38]));
        // What softmax makes of logits that overflowed: NaN, which all_finite catches first.
        assert!(softmax(&[f32::INFINITY, 1.0]).iter().any(|p| p.is_nan()));
        let k3 = |a: f64, b: f64, c: f64| [a, b, c];
        let cases: [Vec<[f64; 3]>; 4] = [
            vec![k3(f64::NAN, 0.5, 0.5), k3(0.2, f64::NAN, 0.8), k3(0.1, 0.1, 0.8), k3(f64::NAN, f64::NAN, f64::NAN)],
            vec![k3(f64::INFINITY, 0.0, 0.0), k3(f64::NEG_INFINITY, 1.0, 0.0), k3(0.3, 0.3, 0.4), k3(0.0, 0.0, 1.0)],
            vec![k3(1.0 / 3.0, 1.0 / 3.0, 1.0 / 3.0); 4],
            vec![k3(f64::NAN, f64::NAN, f64::NAN); 4],
        ];
        for rows in cases {
            let mut p = Predictions::new(3);
            for (i, r) in rows.iter().enumerate() {
                p.push_probs(r, i % 3);
            }
            let mut t = Tally::new(3, true);
            for i in 0..p.len() {
                t.add(p.probs(i), p.labels[i]);
            }
            let m = t.metrics(&[]);
            assert_eq!(m.confusion.iter().flatten().sum::<usize>(), rows.len(), "{rows:?}");
            assert!((0.0..=1.0).contains(&m.accuracy) && (0.0..=1.0).contains(&m.f1), "{rows:?}: {m:?}");
            assert!(m.roc_auc.is_none_or(|a| (0.0..=1.0).contains(&a)), "{rows:?}: {m:?}");
            let bins = t.calibration();
            assert_eq!(bins.iter().map(|b| b.examples).sum::<usize>(), rows.len(), "{rows:?}");
            for r in t.roc_scores() {
                let curve = r.curve();
                assert!(curve.len() <= rows.len() + 1, "{rows:?}: {curve:?}");
            }
            assert_eq!(ClassificationMetrics::compute(&p, &[]).confusion, m.confusion);
        }
    }

    #[test]
    fn auc_from_sorted_scores_equals_the_rank_sum_on_random_data() {
        let mut rng = crate::rng::Rng(5);
        for n in [2usize, 7, 50, 301] {
            // Coarse scores, so ties are common.
            let scores: Vec<f64> = (0..n).map(|_| rng.below(9) as f64 / 8.0).collect();
            let positive: Vec<bool> = (0..n).map(|i| i % 3 == 0 || rng.below(2) == 0).collect();
            let (np, nn) = (positive.iter().filter(|&&p| p).count(), positive.iter().filter(|&&p| !p).count());
            if np == 0 || nn == 0 {
                continue;
            }
            let mut wins = 0.0;
            for i in 0..n {
                for j in 0..n {
                    if positive[i] && !positive[j] {
                        wins += if scores[i] > scores[j] {
                            1.0
                        } else if scores[i] == scores[j] {
                            0.5
                        } else {
                            0.0
                        };
                    }
                }
            }
            assert_eq!(roc_auc_binary(&scores, &positive), Some(wins / (np * nn) as f64), "n={n}");
        }
    }

    #[test]
    fn a_difference_with_a_nan_or_infinity_on_either_side_fails_any_tolerance() {
        assert_eq!(max_abs_diff(&[1.0f32, 2.0], &[1.0f32, 2.5]), 0.5);
        for (a, b) in [
            (vec![f32::NAN, f32::NAN], vec![f32::NAN, f32::NAN]),
            (vec![1.0, f32::NAN], vec![1.0, 2.0]),
            (vec![1.0, 2.0], vec![f32::INFINITY, 2.0]),
            (vec![f32::INFINITY], vec![f32::INFINITY]),
        ] {
            let d = max_abs_diff(&a, &b);
            assert!(d.partial_cmp(&1e-4) != Some(std::cmp::Ordering::Less), "{a:?} vs {b:?}: {d}");
        }
        assert!(max_abs_diff(&[1.0f32], &[1.0f32, 2.0]).is_nan(), "lengths differ");
        assert!(max_abs(&[1.0f64, f64::NAN]).is_nan() && max_abs(&[-3.0f64, 2.0]) == 3.0);
        assert!(worst_of([0.1, f64::NAN, 0.2]).is_nan() && worst_of([0.1, 0.3]) == 0.3);
    }

    fn preds(rows: &[([f64; 2], usize)]) -> Predictions {
        let mut p = Predictions::new(2);
        for (probs, l) in rows {
            p.push_probs(probs, *l);
        }
        p
    }

    #[test]
    fn binary_metrics_by_hand() {
        // labels 1 1 0 0 1; predicted 1 0 0 1 1 → tp 2, fn 1, fp 1, tn 1.
        let p = preds(&[([0.2, 0.8], 1), ([0.6, 0.4], 1), ([0.9, 0.1], 0), ([0.3, 0.7], 0), ([0.1, 0.9], 1)]);
        let m = ClassificationMetrics::compute(&p, &["neg".into(), "pos".into()]);
        assert_eq!(m.confusion, vec![vec![1, 1], vec![1, 2]]);
        assert!((m.accuracy - 0.6).abs() < 1e-12);
        assert!((m.precision - 2.0 / 3.0).abs() < 1e-12);
        assert!((m.recall - 2.0 / 3.0).abs() < 1e-12);
        assert!((m.f1 - 2.0 / 3.0).abs() < 1e-12);
        // Positive scores 0.8 0.4 0.9 vs negative 0.1 0.7: pairs won 2+1+2 of 6 → 5/6.
        assert!((m.roc_auc.unwrap() - 5.0 / 6.0).abs() < 1e-12);
        let loss = -(0.8f64.ln() + 0.4f64.ln() + 0.9f64.ln() + 0.3f64.ln() + 0.9f64.ln()) / 5.0;
        assert!((m.loss - loss).abs() < 1e-12);
        assert_eq!(m.per_class[0].support, 2);
    }

    #[test]
    fn auc_counts_ties_half_and_needs_both_classes() {
        assert_eq!(roc_auc_binary(&[0.5, 0.5], &[true, false]), Some(0.5));
        assert_eq!(roc_auc_binary(&[0.1, 0.2], &[true, true]), None);
        let curve = roc_curve(&[0.9, 0.1, 0.8, 0.3], &[true, false, true, false]);
        assert_eq!(curve.first(), Some(&(0.0, 0.0)));
        assert_eq!(curve.last(), Some(&(1.0, 1.0)));
    }

    #[test]
    fn windows_average_per_document() {
        let p = preds(&[([0.8, 0.2], 1), ([0.0, 1.0], 1), ([0.7, 0.3], 0)]);
        let docs = vec!["a".to_string(), "a".into(), "b".into()];
        let d = p.per_document(&docs);
        assert_eq!(d.len(), 2);
        assert!((d.probs(0)[1] - 0.6).abs() < 1e-12);
        assert_eq!(d.labels, vec![1, 0]);
    }

    #[test]
    fn multiclass_is_macro() {
        let mut p = Predictions::new(3);
        for (probs, l) in [([0.7, 0.2, 0.1], 0), ([0.1, 0.8, 0.1], 1), ([0.2, 0.5, 0.3], 2), ([0.1, 0.1, 0.8], 2)] {
            p.push_probs(&probs, l);
        }
        let m = ClassificationMetrics::compute(&p, &[]);
        // per class f1: 1, 2/3, 2/3.
        assert!((m.f1 - (1.0 + 2.0 / 3.0 + 2.0 / 3.0) / 3.0).abs() < 1e-12);
        assert!((m.accuracy - 0.75).abs() < 1e-12);
        assert!(m.roc_auc.is_some());
    }
}
