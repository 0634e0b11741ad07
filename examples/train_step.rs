//! Median seconds per BERT sequence-classification training step (forward, backward, clip,
//! AdamW) in candle on the CPU — the same work as `../shared/bench/torch_step.py`, for
//! `benches/train.sh`.
//!
//! `cargo run --release --example train_step -- LAYERS HIDDEN HEADS BATCH SEQ [STEPS]`

use anyhow::Result;
use bertpipe::model::bert::{Inputs, Mode};
use bertpipe::model::config::BertConfig;
use bertpipe::model::{BertTask, ModelKind};
use bertpipe::rng::Rng;
use bertpipe::train::optim::{clip_coefficient, AdamW};
use candle_core::Tensor;

fn main() -> Result<()> {
    let a: Vec<usize> = std::env::args().skip(1).map(|x| x.parse().expect("numbers")).collect();
    let (l, h, heads, b, s) = (a[0], a[1], a[2], a[3], a[4]);
    let steps = a.get(5).copied().unwrap_or(8);
    // As `bertpipe train` does (BERTPIPE_DEFAULT_MALLOC=1 measures without it).
    if std::env::var_os("BERTPIPE_DEFAULT_MALLOC").is_none() {
        bertpipe::train::keep_freed_memory();
    }
    let dev = bertpipe::train::device::open(&std::env::var("BERTPIPE_DEVICE").unwrap_or("cpu".into()))?;
    let config = BertConfig::new(30522, l, h, heads, 4 * h);
    let model = BertTask::fresh(ModelKind::SequenceClassification, &config, &dev, 0)?;
    let mut opt = AdamW::new(&model.params, 0.9, 0.999, 1e-8, 0.01)?;
    let mut rng = Rng(1);
    let ids: Vec<u32> = (0..b * s).map(|_| 1000 + rng.below(29000) as u32).collect();
    let inputs = Inputs::new(&ids, &vec![0; b * s], &vec![1; b * s], b, s, &dev)?;
    let labels: Vec<u32> = (0..b).map(|_| rng.below(2) as u32).collect();
    let labels = Tensor::from_slice(&labels, b, &dev)?;
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
        let logits = model.forward(&inputs, None, &mut Mode::train(0, i as u64))?.logits.expect("logits");
        let loss = candle_nn::loss::cross_entropy(&logits, &labels)?;
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
    times.sort_by(f64::total_cmp);
    let med = times[times.len() / 2];
    println!(
        "candle L{l} H{h} A{heads} batch {b}x{s}: {med:.3} s/step, {:.1} samples/s, {:.0} tokens/s",
        b as f64 / med,
        (b * s) as f64 / med
    );
    Ok(())
}
