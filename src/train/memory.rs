//! What a training run's peak memory will be, before it runs (`train --dry-run`): a count of
//! the bytes the trainer holds at each of its peaks, with the few constants of the allocator
//! and the process measured by `benches/train_memory.sh` (the cells it measured are in
//! `benches/results/train_memory.tsv`; a unit test holds this estimate to ±20% of each).
//!
//! The peaks, each on top of the process itself and the model state (f32 weights, gradients
//! and AdamW's two moments: 16 bytes a parameter):
//! - **a training step**: what the forward pass keeps for backward — per layer and token, the
//!   q/k/v products and their split heads, the context, three `hidden`-wide outputs of the
//!   attention block, the intermediate product and its GELU, three outputs of the MLP block
//!   (`14·hidden + 2·intermediate` floats), and the attention scores and probabilities
//!   (`2·heads·seq` floats) — plus the gradients of the top layer's activations while backward
//!   runs. With gradient checkpointing only each layer's input is kept (`hidden` floats a
//!   token a layer), and one layer is recomputed at a time.
//! - **an evaluation** (no graph): one layer's activations for one evaluation batch.
//! - **a checkpoint**: the optimiser state serialised (8 bytes a parameter) beside the model.

use crate::model::config::BertConfig;

/// Everything the estimate depends on.
#[derive(Debug, Clone)]
pub struct Shape {
    pub layers: u64,
    pub hidden: u64,
    pub heads: u64,
    pub intermediate: u64,
    pub vocab: u64,
    pub params: u64,
    /// Rows per training micro-batch, and the padded length of the longest batch.
    pub batch: u64,
    pub seq: u64,
    /// Rows of the largest evaluation batch (0: no evaluation).
    pub eval_rows: u64,
    /// Masked positions per training batch (pretraining; 0 for classification).
    pub mlm_positions: u64,
    pub checkpointing: bool,
}

impl Shape {
    /// The shape of a BERT of `config` with its head's parameters (`params`), trained at
    /// `batch × seq`; evaluation batches of `eval_batch` rows bounded by `eval_max_tokens`.
    pub fn new(config: &BertConfig, params: u64, batch: u64, seq: u64, eval: Option<(u64, u64)>) -> Shape {
        let eval_rows = eval.map_or(0, |(rows, max_tokens)| rows.min((max_tokens / seq.max(1)).max(1)));
        Shape {
            layers: config.num_hidden_layers as u64,
            hidden: config.hidden_size as u64,
            heads: config.num_attention_heads as u64,
            // ModernBERT's gated MLP keeps `Wi`'s doubled output, its activation and the
            // gated product: an intermediate twice as wide in this count.
            intermediate: config.intermediate_size as u64
                * if config.family() == crate::model::config::Family::ModernBert { 2 } else { 1 },
            vocab: config.vocab_size as u64,
            params,
            batch,
            seq,
            eval_rows,
            mlm_positions: 0,
            checkpointing: false,
        }
    }
}

/// The estimate, in bytes, by part.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The process before the model: code, libraries, thread pools, the shards' metadata.
    pub process: u64,
    /// Weights, gradients and AdamW moments.
    pub model_state: u64,
    /// The largest of a training step's activations, an evaluation batch's and a checkpoint's
    /// serialised state, on top of the two above.
    pub step: u64,
    pub eval: u64,
    pub save: u64,
    /// `process + model_state + max(step, eval, save)`.
    pub peak: u64,
}

/// Resident memory of the process before the model: the binary, its libraries, the thread
/// pools, the shards' metadata, and what loading them freed. Fitted to the measured cells (with
/// [`ALLOCATOR`] and [`ALLOCATOR_CHECKPOINTED`]).
const PROCESS: u64 = 128 << 20;
/// Resident bytes per live activation byte: freed buffers stay with the allocator for a second
/// for reuse (the binary's `keep_freed_memory_a_second`, and [`crate::contract::keep_freed_memory`] under
/// glibc) and are not always the size the next one needs, so resident memory runs about a fifth
/// above the tensors alive at the peak. Fitted to the measured cells (the smallest worst error
/// over the 128/256/512-token cells of BERT-mini, MiniLM-L6 and BERT-base: 13%).
const ALLOCATOR: f64 = 1.22;
/// The same with gradient checkpointing: every layer's activations are made twice a step (the
/// graph-free forward, then the recomputation one layer at a time), and the buffers of one pass,
/// kept for reuse, are not the sizes the other asks for in its order. Fitted to the three
/// checkpointed cells with the two constants above.
const ALLOCATOR_CHECKPOINTED: f64 = 1.75;

pub fn estimate(s: &Shape) -> Estimate {
    let f = 4; // f32
    let tokens = s.batch * s.seq;
    let (h, i, a) = (s.hidden, s.intermediate, s.heads);
    // What one layer keeps for backward, per token (floats).
    let layer = 14 * h + 2 * i + 2 * a * s.seq;
    // While backward runs through a layer: the gradients of its scores and probabilities and
    // of a few hidden-wide and intermediate-wide activations.
    let backward = 2 * a * s.seq + 4 * h + 2 * i;
    // The MLM head's logits over the vocabulary, their softmax and its gradient.
    let mlm = 3 * s.mlm_positions * s.vocab;
    let step_floats = if s.checkpointing {
        // Each layer's input (and the copy its recomputation starts from), then one layer.
        (s.layers + 2) * h * tokens + (layer + backward) * tokens + mlm
    } else {
        s.layers * layer * tokens + backward * tokens + mlm
    };
    // An evaluation runs in the same process as the steps, among the buffers they left: it
    // takes the same factor.
    let allocator = if s.checkpointing { ALLOCATOR_CHECKPOINTED } else { ALLOCATOR };
    let step = (step_floats as f64 * f as f64 * allocator) as u64;
    // Evaluation: no graph, so one layer's scores and probabilities and its widest outputs.
    let eval_tokens = s.eval_rows * s.seq;
    let eval = ((2 * a * s.seq + 2 * i + 6 * h) * eval_tokens * f) as f64 * allocator;
    let save = 2 * s.params * f;
    let model_state = 4 * s.params * f;
    let step_part = step.max(eval as u64).max(save);
    Estimate { process: PROCESS, model_state, step, eval: eval as u64, save, peak: PROCESS + model_state + step_part }
}

/// `MemAvailable` of `/proc/meminfo` (Linux); the test hook `BERTPIPE_MEMORY_AVAILABLE`
/// (bytes) stands for a smaller machine.
pub fn available_bytes() -> Option<u64> {
    if let Some(b) = crate::contract::test_hook("BERTPIPE_MEMORY_AVAILABLE") {
        return Some(b);
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// With `BERTPIPE_TRACE_MEMORY=1`: one stderr line per phase of training (after a step's
/// forward pass, its backward pass, the optimiser step, an evaluation, a checkpoint) with the
/// resident memory then and the peak so far (`VmRSS`, `VmHWM` of `/proc/self/status`), to see
/// which phase sets the peak.
pub fn trace(step: u64, phase: &str) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*ON.get_or_init(|| std::env::var_os("BERTPIPE_TRACE_MEMORY").is_some_and(|v| v != "0")) {
        return;
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| -> String {
        let kib = status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0);
        crate::contract::progress::human_bytes(kib * 1024)
    };
    eprintln!("memory: step {step} {phase:<15} rss {:>10}  peak {:>10}", field("VmRSS:"), field("VmHWM:"));
}

/// Parameters of a BERT of `config` with a classifier of `labels` classes (and its pooler):
/// the count the estimate uses where no model is at hand (the tests and benches).
pub fn classifier_params(c: &BertConfig, labels: u64) -> u64 {
    let (h, i, l) = (c.hidden_size as u64, c.intermediate_size as u64, c.num_hidden_layers as u64);
    let embeddings = (c.vocab_size as u64 + c.max_position_embeddings as u64 + c.type_vocab_size as u64) * h + 2 * h;
    let layer = 4 * (h * h + h) + 2 * h * i + i + h + 4 * h;
    embeddings + l * layer + (h * h + h) + (h * labels + labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cells `benches/train_memory.sh` measured (SAVE=benches/results/train_memory.tsv):
    /// the estimate of each configuration within ±20% of bertpipe's measured peak RSS.
    #[test]
    fn the_estimate_is_within_a_fifth_of_every_measured_cell() {
        let tsv = include_str!("../../benches/results/train_memory.tsv");
        let mut lines = tsv.lines();
        let header: Vec<&str> = lines.next().unwrap().split('\t').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap_or_else(|| panic!("column {name}"));
        let mut checked = 0;
        let mut report = String::new();
        let mut worst: f64 = 0.0;
        for line in lines.filter(|l| !l.is_empty()) {
            let v: Vec<&str> = line.split('\t').collect();
            if v[col("side")] != "bertpipe" {
                continue;
            }
            let n = |name: &str| v[col(name)].parse::<u64>().unwrap();
            let c = BertConfig::new(
                n("vocab") as usize,
                n("layers") as usize,
                n("hidden") as usize,
                n("heads") as usize,
                n("intermediate") as usize,
            );
            let mut shape = Shape::new(
                &c,
                classifier_params(&c, 2),
                n("batch"),
                n("max_len"),
                Some((n("eval_batch"), n("eval_max_tokens"))),
            );
            shape.checkpointing = v[col("checkpointing")] == "true";
            let measured = v[col("peak_kib")].parse::<f64>().unwrap() * 1024.0;
            let e = estimate(&shape);
            let ratio = e.peak as f64 / measured;
            worst = worst.max((ratio - 1.0).abs());
            report.push_str(&format!(
                "{} len {} batch {} ckpt {}: estimate {:.0} MiB, measured {:.0} MiB, ratio {ratio:.2} ({e:?})\n",
                v[col("model")],
                n("max_len"),
                n("batch"),
                v[col("checkpointing")],
                e.peak as f64 / 1048576.0,
                measured / 1048576.0
            ));
            checked += 1;
        }
        assert!(checked >= 9, "the measured cells are missing:\n{report}");
        assert!(worst <= 0.20, "an estimate is off by more than 20%:\n{report}");
    }

    #[test]
    fn parameters_are_counted_as_the_models_are() {
        // MiniLM-L6-H384 with a 2-class head: 22,713,986 parameters (HF's count).
        let c = BertConfig::new(30522, 6, 384, 12, 1536);
        assert_eq!(classifier_params(&c, 2), 22_713_986);
    }
}
