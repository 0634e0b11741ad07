//! ModernBERT's ONNX graph, in plain ONNX ops (fp32, or int8 encoder products): inputs
//! `input_ids` and `attention_mask` (no token types), output `logits`.
//!
//! Positions are computed in the graph from the input's length (`Range`), so any length up to
//! the model's runs: the rotary `cos`/`sin` as `position · inv_freq` (float32, the
//! frequencies an initializer), the local layers' window as `|q − k| > half window` combined
//! with the padding mask by `Min` (a key masked twice is masked once, as in
//! [`crate::model::modernbert::ModernBertModel::layer_inputs`]). There is no fused graph
//! (`--optimize`): ONNX Runtime's fused `Attention` has no rotary, windowed variant for it.

use anyhow::{bail, Result};

use super::export::{activation, attention_core, layer_norm, model_proto, padding_bias, product, Precision};
use super::graph::{Attr, Graph};
use super::proto::{data_type, ModelProto, ValueInfoProto};
use crate::model::bert::{Linear, MASKED};
use crate::model::config::Pooling;
use crate::model::modernbert::{inverse_frequencies, Dense, ModernBertEncoderLayer, ModernBertModel};
use crate::model::{BertWithHead, Head};

/// The rotary tables of one kind of layer: `cos` and `sin`, `[seq, head_dim]`.
struct Rotary {
    cos: String,
    sin: String,
}

/// What a layer reads besides its input: its mask and rotary tables.
struct Attend<'a> {
    mask: &'a str,
    rotary: &'a Rotary,
}

pub fn proto(
    model: &BertWithHead,
    m: &ModernBertModel,
    optimize: bool,
    p: Precision,
    metadata: &[(String, String)],
) -> Result<(ModelProto, usize)> {
    if optimize {
        bail!("ModernBERT has no fused ONNX graph (ONNX Runtime's fused attention has no rotary, windowed form): export it without --optimize");
    }
    if p == Precision::Fp16 {
        bail!("ModernBERT exports in fp32 or int8 (`--quantize int8`); fp16 is not built for it");
    }
    let Head::ModernBertClassifier { head, classifier, pooling, .. } = &model.head else {
        bail!("only sequence-classification models are exported");
    };
    let c = &model.config;
    let s = &m.settings;
    let mut g = Graph::default();
    let dims = [Err("batch"), Err("sequence")];
    for name in ["input_ids", "attention_mask"] {
        g.inputs.push(ValueInfoProto::tensor(name, data_type::INT64, &dims));
    }

    // Embeddings: norm(tok_embeddings[ids]); the table stays float32 in int8 (a gather).
    let table = super::export::param(
        &mut g,
        "model.embeddings.tok_embeddings.weight",
        &m.embeddings.tok_embeddings,
        Precision::Fp32,
    )?;
    let words = g.op("Gather", "/embeddings/tok_embeddings", &[&table, "input_ids"], vec![]);
    let mut x = layer_norm(&mut g, "model.embeddings.norm", &m.embeddings.norm, &words, s.norm_eps, Precision::Fp32)?;

    // Positions 0..seq, the global mask (padding) and the local one (padding or too far).
    let seq = g.op("Shape", "/positions/length", &["input_ids"], vec![("start", Attr::Int(1)), ("end", Attr::Int(2))]);
    let axis0 = g.i64_init("/positions/axis0", &[1], &[0]);
    let seq = g.op("Squeeze", "/positions/length_scalar", &[&seq, &axis0], vec![]);
    let (zero, one) = (g.i64_init("/positions/zero", &[], &[0]), g.i64_init("/positions/one", &[], &[1]));
    let positions = g.op("Range", "/positions/range", &[&zero, &seq, &one], vec![]);
    let global_mask = padding_bias(&mut g);
    let axis1 = g.i64_init("/positions/axis1", &[1], &[1]);
    let rows = g.op("Unsqueeze", "/window/rows", &[&positions, &axis1], vec![]);
    let cols = g.op("Unsqueeze", "/window/cols", &[&positions, &axis0], vec![]);
    let distance = g.op("Sub", "/window/offset", &[&rows, &cols], vec![]);
    let distance = g.op("Abs", "/window/distance", &[&distance], vec![]);
    let half = g.i64_init("/window/half_window", &[], &[s.half_window() as i64]);
    let far = g.op("Greater", "/window/far", &[&distance, &half], vec![]);
    let (masked, open) = (g.scalar("/window/masked_value", MASKED), g.scalar("/window/open", 0.0));
    let window = g.op("Where", "/window/bias", &[&far, &masked, &open], vec![]);
    let local_mask = g.op("Min", "/window/with_padding", &[&global_mask, &window], vec![]);
    let position_f =
        g.op("Cast", "/positions/to_float", &[&positions], vec![("to", Attr::Int(data_type::FLOAT as i64))]);
    let position_f = g.op("Unsqueeze", "/positions/column", &[&position_f, &axis1], vec![]);
    let d = c.head_dim();
    let rotary = |g: &mut Graph, kind: &str, theta: f64| -> Rotary {
        let inv = g.f32_init(&format!("/rotary/{kind}/inv_freq"), &[1, d / 2], &inverse_frequencies(theta, d));
        let freqs = g.op("Mul", &format!("/rotary/{kind}/angles"), &[&position_f, &inv], vec![]);
        let angles =
            g.op("Concat", &format!("/rotary/{kind}/both_halves"), &[&freqs, &freqs], vec![("axis", Attr::Int(-1))]);
        Rotary {
            cos: g.op("Cos", &format!("/rotary/{kind}/cos"), &[&angles], vec![]),
            sin: g.op("Sin", &format!("/rotary/{kind}/sin"), &[&angles], vec![]),
        }
    };
    let global_rotary = rotary(&mut g, "global", s.rope_theta(true));
    let local_rotary = rotary(&mut g, "local", s.rope_theta(false));

    for (i, layer) in m.layers.iter().enumerate() {
        let at = if layer.global {
            Attend { mask: &global_mask, rotary: &global_rotary }
        } else {
            Attend { mask: &local_mask, rotary: &local_rotary }
        };
        x = encoder_layer(&mut g, i, layer, &x, &at, c.num_attention_heads, s.norm_eps, s.hidden_activation, p)?;
    }
    let hidden = layer_norm(&mut g, "model.final_norm", &m.final_norm, &x, s.norm_eps, Precision::Fp32)?;

    // Pooling, `head`, classifier: float32 in every precision (one vector per row).
    let pooled = match pooling {
        Pooling::Cls => {
            let first = g.i64_init("/pooling/first_token", &[], &[0]);
            g.op("Gather", "/pooling/first_token", &[&hidden, &first], vec![("axis", Attr::Int(1))])
        }
        Pooling::Mean => {
            let keep = g.op(
                "Cast",
                "/pooling/mask_float",
                &["attention_mask"],
                vec![("to", Attr::Int(data_type::FLOAT as i64))],
            );
            let axis2 = g.i64_init("/pooling/axis2", &[1], &[2]);
            let keep3 = g.op("Unsqueeze", "/pooling/mask_column", &[&keep, &axis2], vec![]);
            let kept = g.op("Mul", "/pooling/masked", &[&hidden, &keep3], vec![]);
            let sum = g.op("ReduceSum", "/pooling/sum", &[&kept, &axis1], vec![("keepdims", Attr::Int(0))]);
            let count = g.op("ReduceSum", "/pooling/count", &[&keep, &axis1], vec![("keepdims", Attr::Int(1))]);
            g.op("Div", "/pooling/mean", &[&sum, &count], vec![])
        }
    };
    let h = dense(&mut g, "head.dense", &head.dense, &pooled, Precision::Fp32)?;
    let h = activation(&mut g, "head/act", s.classifier_activation, &h, Precision::Fp32);
    let h = layer_norm(&mut g, "head.norm", &head.norm, &h, s.norm_eps, Precision::Fp32)?;
    let logits = linear(&mut g, "classifier", classifier, &h)?;
    g.rename_output(&logits, "logits");
    g.outputs.push(ValueInfoProto::tensor("logits", data_type::FLOAT, &[Err("batch"), Ok(c.num_labels() as i64)]));
    Ok(model_proto(g, c, "ModernBERT", p, metadata))
}

/// A ModernBERT linear layer in the precision (no bias unless the config has them).
fn dense(g: &mut Graph, name: &str, l: &Dense, x: &str, p: Precision) -> Result<String> {
    product(g, name, &l.weight, l.bias.as_ref(), x, p)
}

fn linear(g: &mut Graph, name: &str, l: &Linear, x: &str) -> Result<String> {
    product(g, name, &l.weight, Some(&l.bias), x, Precision::Fp32)
}

/// `x·cos + rotate_half(x)·sin` on `[b, heads, s, d]`.
fn rotate(g: &mut Graph, pre: &str, x: &str, r: &Rotary, d: usize) -> String {
    let axis = g.i64_init(&format!("/{pre}/last_axis"), &[1], &[-1]);
    let (start, mid, end) = (
        g.i64_init(&format!("/{pre}/start"), &[1], &[0]),
        g.i64_init(&format!("/{pre}/middle"), &[1], &[(d / 2) as i64]),
        g.i64_init(&format!("/{pre}/end"), &[1], &[d as i64]),
    );
    let first = g.op("Slice", &format!("/{pre}/first_half"), &[x, &start, &mid, &axis], vec![]);
    let second = g.op("Slice", &format!("/{pre}/second_half"), &[x, &mid, &end, &axis], vec![]);
    let second = g.op("Neg", &format!("/{pre}/negate"), &[&second], vec![]);
    let rotated = g.op("Concat", &format!("/{pre}/rotate_half"), &[&second, &first], vec![("axis", Attr::Int(-1))]);
    let a = g.op("Mul", &format!("/{pre}/cos"), &[x, &r.cos], vec![]);
    let b = g.op("Mul", &format!("/{pre}/sin"), &[&rotated, &r.sin], vec![]);
    g.op("Add", &format!("/{pre}/rotary"), &[&a, &b], vec![])
}

#[allow(clippy::too_many_arguments)]
fn encoder_layer(
    g: &mut Graph,
    i: usize,
    layer: &ModernBertEncoderLayer,
    x: &str,
    at: &Attend,
    heads: usize,
    eps: f64,
    act: crate::model::config::Activation,
    p: Precision,
) -> Result<String> {
    let pre = format!("model.layers.{i}");
    let normed = match &layer.attn_norm {
        Some(n) => layer_norm(g, &format!("{pre}.attn_norm"), n, x, eps, Precision::Fp32)?,
        None => x.to_string(),
    };
    let hidden = layer.attn.Wo.weight.dim(0)?;
    let d = hidden / heads;
    // Wqkv → `[b, s, 3, heads, d]` → `[3, b, heads, s, d]`, q/k/v taken by index.
    let qkv = dense(g, &format!("{pre}.attn.Wqkv"), &layer.attn.Wqkv, &normed, p)?;
    let split = g.i64_init(&format!("/{pre}/attn/qkv_shape"), &[5], &[0, 0, 3, heads as i64, d as i64]);
    let qkv = g.op("Reshape", &format!("/{pre}/attn/qkv_reshape"), &[&qkv, &split], vec![]);
    let qkv = g.op(
        "Transpose",
        &format!("/{pre}/attn/qkv_transpose"),
        &[&qkv],
        vec![("perm", Attr::Ints(vec![2, 0, 3, 1, 4]))],
    );
    let mut pick = |which: &str, index: i64| {
        let idx = g.i64_init(&format!("/{pre}/attn/{which}_index"), &[], &[index]);
        g.op("Gather", &format!("/{pre}/attn/{which}"), &[&qkv, &idx], vec![("axis", Attr::Int(0))])
    };
    let (q, k, v) = (pick("query", 0), pick("key", 1), pick("value", 2));
    let q = rotate(g, &format!("{pre}/attn/query_rotary"), &q, at.rotary, d);
    let k = rotate(g, &format!("{pre}/attn/key_rotary"), &k, at.rotary, d);
    let kt = g.op("Transpose", &format!("/{pre}/attn/key_t"), &[&k], vec![("perm", Attr::Ints(vec![0, 1, 3, 2]))]);
    let context = attention_core(g, &format!("{pre}/attn"), &q, &kt, &v, at.mask, hidden, heads, Precision::Fp32);
    let attn = dense(g, &format!("{pre}.attn.Wo"), &layer.attn.Wo, &context, p)?;
    let x = g.op("Add", &format!("/{pre}/attn/residual"), &[x, &attn], vec![]);

    // MLP: Wo(act(input) · gate), `input, gate = Wi(x)` halves.
    let normed = layer_norm(g, &format!("{pre}.mlp_norm"), &layer.mlp_norm, &x, eps, Precision::Fp32)?;
    let wide = dense(g, &format!("{pre}.mlp.Wi"), &layer.mlp.Wi, &normed, p)?;
    let inter = layer.mlp.Wo.weight.dim(1)? as i64;
    let axis = g.i64_init(&format!("/{pre}/mlp/last_axis"), &[1], &[-1]);
    let (start, mid, end) = (
        g.i64_init(&format!("/{pre}/mlp/start"), &[1], &[0]),
        g.i64_init(&format!("/{pre}/mlp/middle"), &[1], &[inter]),
        g.i64_init(&format!("/{pre}/mlp/end"), &[1], &[2 * inter]),
    );
    let input = g.op("Slice", &format!("/{pre}/mlp/input"), &[&wide, &start, &mid, &axis], vec![]);
    let gate = g.op("Slice", &format!("/{pre}/mlp/gate"), &[&wide, &mid, &end, &axis], vec![]);
    let input = activation(g, &format!("{pre}/mlp/act"), act, &input, Precision::Fp32);
    let gated = g.op("Mul", &format!("/{pre}/mlp/gated"), &[&input, &gate], vec![]);
    let out = dense(g, &format!("{pre}.mlp.Wo"), &layer.mlp.Wo, &gated, p)?;
    Ok(g.op("Add", &format!("/{pre}/mlp/residual"), &[&x, &out], vec![]))
}
