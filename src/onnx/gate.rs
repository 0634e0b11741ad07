//! `eval --baseline BASE.onnx`: what changed between two models on the same rows — typically an
//! int8 or fp16 export against the float32 one it came from. Agreement, the change in accuracy,
//! F1 and loss overall and per slice (the length and noise slices `eval` reports), the largest
//! shifts in probability and every flipped prediction. The model fails the gate when it loses
//! more than `--max-drop` accuracy points *and* the loss is unlikely to be noise: McNemar's exact
//! test on the rows (documents) only one side gets right gives p < `--gate-alpha` (0.05). With
//! `--strict-gate` the drop alone decides. On 189 rows one flipped prediction is 0.53 points, and
//! p = 1: that passes; a model wrong where the baseline was right on 8 of 8 discordant rows fails.

use serde::{Deserialize, Serialize};

use super::score::GateCounts;

/// The default `--max-drop`, in accuracy points: half a point, the loss the quantisation
/// recipes (ONNX Runtime's, Optimum's) call acceptable for dynamic int8 on BERT.
pub const DEFAULT_MAX_DROP: f64 = 0.5;

/// The default `--gate-alpha`: a loss above `--max-drop` fails the gate when McNemar's exact
/// test puts its p-value below this.
pub const DEFAULT_ALPHA: f64 = 0.05;

/// How many flipped rows and probability shifts are listed (all are counted).
pub const LISTED: usize = 100;

/// When a loss above `max_drop` fails the gate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GateRule {
    /// Whatever its p-value (`--strict-gate`).
    pub strict: bool,
    /// Otherwise only when McNemar's exact p is below this.
    pub alpha: f64,
}

/// A metric on the baseline and on the model, and the change (model − baseline).
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Change {
    pub baseline: f64,
    pub model: f64,
    pub change: f64,
}

impl Change {
    pub fn of(baseline: f64, model: f64) -> Change {
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
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
    /// Rows compared: those with finite outputs on both sides.
    pub rows: usize,
    /// Rows left out because the baseline's or the model's logits are not finite.
    #[serde(skip_serializing_if = "is_zero")]
    pub baseline_nonfinite: usize,
    #[serde(skip_serializing_if = "is_zero")]
    pub model_nonfinite: usize,
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
    /// Its 95% confidence interval (paired proportions, Wald), in points.
    pub drop_ci95: [f64; 2],
    /// Labelled examples on `level`, and how many of them only one side gets right.
    pub examples: usize,
    pub baseline_only_right: usize,
    pub model_only_right: usize,
    /// McNemar's exact test (two-sided binomial on the discordant examples): the chance of a split
    /// at least this uneven if the two models were equally accurate.
    pub mcnemar_p: f64,
    /// `significant` (fail only when p < alpha) or `strict` (the drop alone decides).
    pub rule: String,
    pub alpha: f64,
    pub passed: bool,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// McNemar's exact test: P(a Binomial(b + c, ½) split at least as uneven as b : c), two-sided,
/// summed in log space (no underflow at millions of rows).
pub fn mcnemar_exact(b: usize, c: usize) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let m = b.min(c);
    // ln P(X = i) for i = 0..=m, from ln P(X = 0) = −n ln 2 by the ratio (n − i) / (i + 1).
    let mut ln_term = -(n as f64) * std::f64::consts::LN_2;
    let mut terms = Vec::with_capacity(m + 1);
    for i in 0..=m {
        terms.push(ln_term);
        ln_term += ((n - i) as f64).ln() - ((i + 1) as f64).ln();
    }
    let top = terms.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let tail = top.exp() * terms.iter().map(|t| (t - top).exp()).sum::<f64>();
    (2.0 * tail).min(1.0)
}

/// The accuracy change's 95% interval in points: the paired difference (b − c) / n with its
/// Wald standard error √((b + c) − (b − c)² / n) / n.
pub fn drop_interval(b: usize, c: usize, n: usize) -> [f64; 2] {
    if n == 0 {
        return [f64::NAN, f64::NAN];
    }
    let (b, c, n) = (b as f64, c as f64, n as f64);
    let d = (b - c) / n;
    let se = (((b + c) - (b - c) * (b - c) / n).max(0.0)).sqrt() / n;
    [100.0 * (d - 1.96 * se), 100.0 * (d + 1.96 * se)]
}

/// Who ran, for the report.
pub struct Sides<'a> {
    pub baseline: &'a str,
    pub baseline_precision: &'a str,
    pub precision: &'a str,
    pub baseline_docs_per_second: f64,
    pub docs_per_second: f64,
}

/// The gate from what [`super::score::compare`] counted, the flipped rows listed while inference
/// ran (with their texts), and the rule.
pub fn finish(c: GateCounts, sides: &Sides, flips: Vec<Flip>, max_drop: f64, rule: GateRule) -> Gate {
    let (level, gated) = match c.document_accuracy {
        Some(d) => ("documents", d),
        None => ("rows", c.accuracy),
    };
    let drop = 100.0 * (gated.baseline - gated.model);
    let p = mcnemar_exact(c.baseline_only_right, c.model_only_right);
    // NaN never passes.
    let passed = drop <= max_drop || (!rule.strict && drop.is_finite() && p >= rule.alpha);
    Gate {
        baseline: sides.baseline.to_string(),
        baseline_precision: sides.baseline_precision.to_string(),
        precision: sides.precision.to_string(),
        baseline_docs_per_second: sides.baseline_docs_per_second,
        docs_per_second: sides.docs_per_second,
        speedup: sides.docs_per_second / sides.baseline_docs_per_second.max(1e-12),
        rows: c.rows,
        baseline_nonfinite: c.baseline_nonfinite,
        model_nonfinite: c.model_nonfinite,
        agreement: c.agree as f64 / c.rows.max(1) as f64,
        flipped: c.flipped,
        level: level.to_string(),
        accuracy: c.accuracy,
        f1: c.f1,
        loss: c.loss,
        document_accuracy: c.document_accuracy,
        by_length: c.by_length,
        by_noise: c.by_noise,
        max_probability_shift: c.max_probability_shift,
        mean_probability_shift: c.mean_probability_shift,
        largest_shifts: c.largest_shifts,
        flips,
        max_drop,
        drop,
        drop_ci95: drop_interval(c.baseline_only_right, c.model_only_right, c.examples),
        examples: c.examples,
        baseline_only_right: c.baseline_only_right,
        model_only_right: c.model_only_right,
        mcnemar_p: p,
        rule: if rule.strict { "strict" } else { "significant" }.to_string(),
        alpha: rule.alpha,
        passed,
    }
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
    if g.baseline_nonfinite + g.model_nonfinite > 0 {
        out.push(format!(
            "  left out           rows with non-finite logits: {} on the baseline's side, {} on this model's",
            g.baseline_nonfinite, g.model_nonfinite
        ));
    }
    out.push(format!(
        "  drop on {:<10} {:+.2} points (95% CI {:+.2} to {:+.2}); McNemar exact p = {:.3} ({} of {} right only on the baseline, {} only on this model)",
        g.level, g.drop, g.drop_ci95[0], g.drop_ci95[1], g.mcnemar_p, g.baseline_only_right, g.examples, g.model_only_right
    ));
    let why = match (g.drop <= g.max_drop, g.rule.as_str()) {
        (true, _) => format!("within --max-drop {}", g.max_drop),
        (false, "strict") => format!("above --max-drop {} (--strict-gate)", g.max_drop),
        (false, _) if g.passed => {
            format!(
                "above --max-drop {} but p = {:.3} ≥ {}: not told apart from noise",
                g.max_drop, g.mcnemar_p, g.alpha
            )
        }
        (false, _) => format!("above --max-drop {} and p = {:.3} < {}", g.max_drop, g.mcnemar_p, g.alpha),
    };
    out.push(format!(
        "gate: {} — {:.2} accuracy points {} on {}, {why}",
        if g.passed { "passed" } else { "FAILED" },
        g.drop.abs(),
        if g.drop >= 0.0 { "lost" } else { "gained" },
        g.level,
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(right: usize, b: usize, c: usize, n: usize) -> GateCounts {
        let acc = Change::of(right as f64 / n as f64, (right - b + c) as f64 / n as f64);
        GateCounts {
            rows: n,
            agree: n - b - c,
            flipped: b + c,
            baseline_nonfinite: 0,
            model_nonfinite: 0,
            accuracy: acc,
            f1: acc,
            loss: acc,
            document_accuracy: None,
            examples: n,
            baseline_only_right: b,
            model_only_right: c,
            by_length: Vec::new(),
            by_noise: Vec::new(),
            max_probability_shift: 0.0,
            mean_probability_shift: 0.0,
            largest_shifts: Vec::new(),
        }
    }

    #[test]
    fn a_loss_the_sample_cannot_tell_from_noise_passes_unless_strict() {
        let sides = Sides {
            baseline: "fp32.onnx",
            baseline_precision: "fp32",
            precision: "int8",
            baseline_docs_per_second: 1.0,
            docs_per_second: 2.0,
        };
        let rule = GateRule { strict: false, alpha: DEFAULT_ALPHA };
        // The case: 189 rows, one flipped from right to wrong: 0.53 points, p = 1.
        let g = finish(counts(150, 1, 0, 189), &sides, Vec::new(), 0.5, rule);
        assert!((g.drop - 100.0 / 189.0).abs() < 1e-9 && g.mcnemar_p == 1.0);
        assert!(g.passed, "{g:?}");
        assert!(format(&g).last().unwrap().contains("not told apart from noise"));
        let strict = finish(counts(150, 1, 0, 189), &sides, Vec::new(), 0.5, GateRule { strict: true, ..rule });
        assert!(!strict.passed);
        // Eight rows right only on the baseline's side, none the other way: p = 2/256 < 0.05.
        let g = finish(counts(150, 8, 0, 189), &sides, Vec::new(), 0.5, rule);
        assert!(!g.passed && g.mcnemar_p < 0.01, "{g:?}");
        // Within max_drop passes whatever p says.
        let g = finish(counts(15_000, 40, 0, 18_900), &sides, Vec::new(), 0.5, rule);
        assert!(g.passed && g.mcnemar_p < 1e-6, "{g:?}");
        let [lo, hi] = g.drop_ci95;
        assert!(lo < g.drop && g.drop < hi);
    }

    #[test]
    fn mcnemar_matches_the_binomial_by_hand_and_survives_large_counts() {
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        assert_eq!(mcnemar_exact(1, 0), 1.0);
        // 8 : 0 → 2 · ½⁸.
        assert!((mcnemar_exact(8, 0) - 2.0 / 256.0).abs() < 1e-15);
        // 7 : 2 → 2 · (1 + 9 + 36) / 512.
        assert!((mcnemar_exact(7, 2) - 92.0 / 512.0).abs() < 1e-12);
        assert_eq!(mcnemar_exact(2, 7), mcnemar_exact(7, 2));
        let p = mcnemar_exact(500_000, 499_000);
        assert!(p > 0.0 && p < 1.0 && p.is_finite(), "{p}");
        assert!(mcnemar_exact(600_000, 400_000) < 1e-300);
        // One flip among 189 rows: 0.53 points, and no evidence at all.
        let [lo, hi] = drop_interval(1, 0, 189);
        assert!(lo < 0.0 && hi > 0.53, "{lo} {hi}");
    }
}
