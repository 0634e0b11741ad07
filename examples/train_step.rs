//! Median seconds per BERT sequence-classification training step (forward, backward, clip,
//! AdamW) in candle on the CPU — the same work as `../shared/bench/torch_step.py`, for
//! `benches/train.sh`.
//!
//! `cargo run --release --example train_step -- LAYERS HIDDEN HEADS BATCH SEQ [STEPS]`
//! (`BERTPIPE_REAL_LENGTHS=1`: IMDb-shaped lengths up to SEQ, length-grouped, padded per batch;
//! prints tokens/s without padding; `BERTPIPE_DTYPE=bf16`: bf16 matrix products, f32 master
//! weights, as `dtype: bf16` in a training config; `BERTPIPE_FAMILY=roberta`: a RoBERTa of the
//! same size — 50,265 tokens, 514 positions, one token type, its classification head — and
//! `modernbert` one of ModernBERT-base's shape at this depth, for `benches/families.sh`).

use anyhow::Result;
use bertpipe::model::bert::{ForwardPass, Inputs};
use bertpipe::model::config::BertConfig;
use bertpipe::model::{BertWithHead, ModelKind};
use bertpipe::rng::Rng;
use bertpipe::train::optim::{clip_coefficient, AdamW};
use candle_core::Tensor;

fn main() -> Result<()> {
    let a: Vec<usize> = std::env::args().skip(1).map(|x| x.parse().expect("numbers")).collect();
    let (l, h, heads, b, s) = (a[0], a[1], a[2], a[3], a[4]);
    let steps = a.get(5).copied().unwrap_or(8);
    // As `bertpipe train` does (BERTPIPE_DEFAULT_MALLOC=1 measures without it).
    if std::env::var_os("BERTPIPE_DEFAULT_MALLOC").is_none() {
        bertpipe::contract::keep_freed_memory();
    }
    let dev = bertpipe::train::device::open(&std::env::var("BERTPIPE_DEVICE").unwrap_or("cpu".into()))?;
    let family = std::env::var("BERTPIPE_FAMILY").unwrap_or("bert".into());
    let config = match family.as_str() {
        "bert" => BertConfig::new(30522, l, h, heads, 4 * h),
        "roberta" => {
            let mut c = BertConfig::new(50265, l, h, heads, 4 * h);
            c.model_type = "roberta".into();
            c.max_position_embeddings = 514;
            c.type_vocab_size = 1;
            c.pad_token_id = Some(1);
            c.layer_norm_eps = 1e-5;
            c
        }
        "modernbert" => {
            // ModernBERT-base's shape at this depth: a 1.5·hidden gated MLP, its vocabulary and
            // padding id, a 128-token local window on two layers of three.
            let mut c = BertConfig::new(50368, l, h, heads, 3 * h / 2);
            c.model_type = "modernbert".into();
            c.max_position_embeddings = 8192;
            c.pad_token_id = Some(50283);
            c
        }
        other => anyhow::bail!("BERTPIPE_FAMILY={other}: expected bert, roberta or modernbert"),
    };
    let model = BertWithHead::fresh(ModelKind::SequenceClassification, &config, &dev, 0)?;
    let mut opt = AdamW::new(&model.params, 0.9, 0.999, 1e-8, 0.01)?;
    let compute = match std::env::var("BERTPIPE_DTYPE").as_deref() {
        Ok("bf16") => candle_core::DType::BF16,
        Ok("f32") | Err(_) => candle_core::DType::F32,
        Ok(other) => anyhow::bail!("BERTPIPE_DTYPE={other}: expected f32 or bf16"),
    };
    let mut rng = Rng(1);
    // Fixed `b × s` batches, or (BERTPIPE_REAL_LENGTHS=1) IMDb-shaped rows: log-normal lengths
    // around 230 tokens capped at `s`, grouped by length into batches of `b`, padded per batch,
    // as `bertpipe train` feeds them.
    let real = std::env::var_os("BERTPIPE_REAL_LENGTHS").is_some();
    let batches: Vec<(Inputs, Tensor, usize)> = if real {
        let mut lengths: Vec<usize> = (0..b * (steps + 2))
            .map(|_| {
                let n = (-2.0 * (1.0 - rng.f64()).ln()).sqrt() * (2.0 * std::f64::consts::PI * rng.f64()).cos();
                ((230f64.ln() + 0.5 * n).exp().round() as usize).clamp(8, s)
            })
            .collect();
        lengths.sort_unstable_by(|x, y| y.cmp(x));
        let mut out = Vec::new();
        for chunk in lengths.chunks(b) {
            let seq = chunk[0];
            let mut ids = Vec::new();
            let mut mask = Vec::new();
            for &n in chunk {
                for j in 0..seq {
                    ids.push(if j < n { 1000 + rng.below(29000) as u32 } else { 0 });
                    mask.push((j < n) as u32);
                }
            }
            let inputs = Inputs::new(&ids, &vec![0; ids.len()], &mask, chunk.len(), seq, &dev)?;
            let labels: Vec<u32> = (0..chunk.len()).map(|_| rng.below(2) as u32).collect();
            out.push((inputs, Tensor::from_slice(&labels, chunk.len(), &dev)?, chunk.iter().sum()));
        }
        // Interleave long and short batches, as a shuffled epoch would.
        let mut mixed = Vec::new();
        let (mut lo, mut hi) = (0, out.len());
        let mut all: Vec<Option<(Inputs, Tensor, usize)>> = out.into_iter().map(Some).collect();
        while lo < hi {
            mixed.push(all[lo].take().expect("each batch once"));
            lo += 1;
            if lo < hi {
                hi -= 1;
                mixed.push(all[hi].take().expect("each batch once"));
            }
        }
        mixed
    } else {
        let ids: Vec<u32> = (0..b * s).map(|_| 1000 + rng.below(29000) as u32).collect();
        let inputs = Inputs::new(&ids, &vec![0; b * s], &vec![1; b * s], b, s, &dev)?;
        let labels: Vec<u32> = (0..b).map(|_| rng.below(2) as u32).collect();
        vec![(inputs, Tensor::from_slice(&labels, b, &dev)?, b * s)]
    };
    let mut real_tokens = 0usize;
    let mut times = Vec::new();
    // Per phase: forward + loss, backward, gradient collection, clipping, optimiser.
    let mut phases: Vec<[f64; 5]> = Vec::new();
    for i in 0..steps + 2 {
        let t = std::time::Instant::now();
        let mut marks = [0f64; 5];
        let mut lap = std::time::Instant::now();
        let mut mark = |k: usize| {
            marks[k] = lap.elapsed().as_secs_f64();
            lap = std::time::Instant::now();
        };
        let (inputs, labels, tokens) = &batches[i % batches.len()];
        let rows: Vec<u64> = (0..labels.dims1()? as u64).collect();
        let logits = model
            .forward(inputs, None, &mut ForwardPass::train(0, i as u64, rows).with_compute(compute))?
            .logits
            .expect("logits");
        let loss = candle_nn::loss::cross_entropy(&logits, labels)?;
        loss.to_scalar::<f32>()?;
        mark(0);
        let store = loss.backward()?;
        mark(1);
        let grads = model.gradients(&store)?;
        mark(2);
        let (_, coef) = clip_coefficient(&grads, 1.0)?;
        mark(3);
        opt.step(&model.params, &grads, 2e-5, coef)?;
        mark(4);
        if i >= 2 {
            times.push(t.elapsed().as_secs_f64());
            phases.push(marks);
            real_tokens += tokens;
        }
    }
    if std::env::var_os("BERTPIPE_STEP_PHASES").is_some() {
        let names = ["forward+loss", "backward", "gradients", "clip", "adamw"];
        for (k, name) in names.iter().enumerate() {
            let mut xs: Vec<f64> = phases.iter().map(|p| p[k]).collect();
            xs.sort_by(f64::total_cmp);
            eprintln!("  {name:<13} {:.3} s", xs[xs.len() / 2]);
        }
    }
    if real {
        let total: f64 = times.iter().sum();
        println!(
            "candle L{l} H{h} A{heads} {compute:?} real lengths (batch {b}, up to {s}, {} steps): {:.0} tokens/s (tokens without padding)",
            times.len(),
            real_tokens as f64 / total
        );
        return Ok(());
    }
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    println!(
        "candle {family} L{l} H{h} A{heads} {compute:?} batch {b}x{s}: {med:.3} s/step, {:.1} samples/s, {:.0} tokens/s",
        b as f64 / med,
        (b * s) as f64 / med
    );
    Ok(())
}
