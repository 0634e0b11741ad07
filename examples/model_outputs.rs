//! Runs a checkpoint on a batch read from stdin and prints its outputs as JSON, for the
//! dev-time comparisons with `transformers` in `scripts/check_checkpoint.py`.
//!
//! stdin: `{"input_ids": [[…]], "attention_mask": [[…]], "token_type_ids": [[…]]}`
//! `cargo run --release --example model_outputs -- CHECKPOINT (classify|hidden) [cpu|cuda] < batch.json`

use std::io::Read;

use anyhow::{Context, Result};
use bertpipe::model::bert::{ForwardPass, Inputs};
use bertpipe::model::{BertWithHead, ModelKind};
use candle_core::DType;
use serde_json::{json, Value};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (dir, what) = (args.get(1).context("usage: model_outputs CHECKPOINT (classify|hidden)")?, args.get(2));
    let mut text = String::new();
    std::io::stdin().read_to_string(&mut text)?;
    let batch: Value = serde_json::from_str(&text)?;
    let rows = |k: &str| -> Vec<Vec<u32>> {
        batch[k]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect())
            .collect()
    };
    let (ids, mask, types) = (rows("input_ids"), rows("attention_mask"), rows("token_type_ids"));
    let (b, s) = (ids.len(), ids[0].len());
    let device = bertpipe::train::device::open(args.get(3).map(String::as_str).unwrap_or("cpu"))?;
    let inputs = Inputs::new(&ids.concat(), &types.concat(), &mask.concat(), b, s, &device)?;
    let kind = if what.map(String::as_str) == Some("hidden") {
        ModelKind::MaskedLm
    } else {
        ModelKind::SequenceClassification
    };
    let model = BertWithHead::from_checkpoint(kind, dir.as_ref(), None, &device, 0)?;
    let out = if kind == ModelKind::MaskedLm {
        let h = model.encoder.forward(&inputs, &mut ForwardPass::eval())?;
        json!({"hidden": h.to_dtype(DType::F32)?.to_vec3::<f32>()?, "initialised": model.initialised})
    } else {
        let l = model.forward(&inputs, None, &mut ForwardPass::eval())?.logits.context("logits")?;
        json!({"logits": l.to_vec2::<f32>()?})
    };
    println!("{out}");
    Ok(())
}
