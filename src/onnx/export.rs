//! `bertpipe export onnx`: an HF BERT sequence-classification checkpoint (ours or theirs) to an
//! ONNX model, graph written node by node (not traced).
//!
//! Signature (DESIGN.md, "ONNX"): inputs `input_ids`, `attention_mask`, `token_type_ids`
//! (int64 `[batch, sequence]`, both dynamic), output `logits` (float32 `[batch, num_labels]`);
//! opset 17; weights as `raw_data` initializers (in `model.onnx.data` beside the model past
//! 2 GB); metadata `vocab_sha256`, `max_len`, `id2label`, `created_by`.
//!
//! Two graphs compute the same function:
//! - plain ONNX ops (`LayerNormalization`, `MatMul`, `Softmax`, `Erf`, …): runs anywhere;
//! - `--optimize`: ONNX Runtime's fused `com.microsoft` ops (`EmbedLayerNormalization`,
//!   `Attention`, `SkipLayerNormalization`, `BiasGelu`), which ONNX Runtime's own optimiser
//!   does not produce when shapes are dynamic.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use prost::Message;

use super::graph::{externalize, Attr, Graph};
use super::proto::{data_type, ModelProto, OperatorSetIdProto, StringStringEntryProto, ValueInfoProto, IR_VERSION};
use crate::model::bert::{BertLayer, LayerNorm, Linear};
use crate::model::config::Activation;
use crate::model::{BertWithHead, Head, ModelKind};

pub const OPSET: i64 = 17;
/// Protobuf refuses messages past 2 GiB; weights move to an external file well before.
const EXTERNAL_DATA_BYTES: usize = 1 << 30;

/// What `export onnx` was asked to do.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub checkpoint: PathBuf,
    pub out: PathBuf,
    /// Emit ONNX Runtime's fused contrib ops.
    pub optimize: bool,
    /// The vocabulary the model expects (default: the checkpoint's vocab.txt or tokenizer.json).
    pub vocab: Option<PathBuf>,
    /// The longest input (default: tokenizer_config.json's `model_max_length`, else the
    /// position table's size).
    pub max_len: Option<usize>,
    /// Weights in `OUT.data` beside the model even when it would fit in one file (always
    /// done past protobuf's 2 GB limit).
    pub external_data: bool,
    /// More metadata entries (an experiment's stage keys).
    pub metadata: Vec<(String, String)>,
}

/// What was written, and the model it came from (for `--verify`, without a second load).
pub struct Exported {
    pub model: BertWithHead,
    pub max_len: usize,
    pub lowercase: bool,
    pub path: PathBuf,
    pub external_data: Option<PathBuf>,
    pub bytes: u64,
    pub nodes: usize,
    pub parameters: usize,
    pub metadata: Vec<(String, String)>,
    pub vocab_file: PathBuf,
}

/// The vocabulary file of a checkpoint: vocab.txt, else tokenizer.json.
pub fn checkpoint_vocab(dir: &Path) -> Option<PathBuf> {
    ["vocab.txt", "tokenizer.json"].iter().map(|f| dir.join(f)).find(|p| p.is_file())
}

/// Loads a sequence-classification checkpoint on the CPU, refusing one without a trained
/// classifier (a bare encoder would export random logits).
pub fn load_classifier(dir: &Path) -> Result<BertWithHead> {
    let model = BertWithHead::from_checkpoint(ModelKind::SequenceClassification, dir, None, &Device::Cpu, 0)?;
    let missing: Vec<&String> =
        model.initialised.iter().filter(|n| n.starts_with("classifier") || n.starts_with("bert.pooler")).collect();
    if !missing.is_empty() {
        bail!(
            "'{}' is not a sequence-classification checkpoint: it has no {} (a bare encoder such as a BertModel or BertForMaskedLM); fine-tune it first with `bertpipe train` (task: classify, model.init_from: {})",
            dir.display(),
            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", "),
            dir.display()
        );
    }
    if !model.initialised.is_empty() {
        bail!(
            "'{}' lacks tensors the model needs ({}); the export would carry random weights",
            dir.display(),
            model.initialised.join(", ")
        );
    }
    Ok(model)
}

pub fn export(opts: &ExportOptions) -> Result<Exported> {
    let model = load_classifier(&opts.checkpoint)?;
    let vocab_file = match &opts.vocab {
        Some(v) => v.clone(),
        None => checkpoint_vocab(&opts.checkpoint).with_context(|| {
            format!(
                "'{}' has no vocab.txt or tokenizer.json, so the model's vocabulary cannot be recorded; give it with --vocab FILE",
                opts.checkpoint.display()
            )
        })?,
    };
    let tokenizer_config = crate::tokenize::TokenizerConfig::read(&opts.checkpoint)?;
    let vocab = crate::tokenize::file_vocab(&vocab_file, &tokenizer_config)?;
    let max_len = match opts.max_len {
        Some(n) => n,
        None => tokenizer_config.model_max_length.unwrap_or(model.config.max_position_embeddings),
    };
    if max_len > model.config.max_position_embeddings {
        bail!("max_len {max_len} exceeds the model's {} position embeddings", model.config.max_position_embeddings);
    }
    let id2label: serde_json::Map<String, serde_json::Value> = model
        .config
        .label_names()
        .into_iter()
        .enumerate()
        .map(|(i, n)| (i.to_string(), serde_json::Value::String(n)))
        .collect();
    let mut metadata = vec![
        ("vocab_sha256".to_string(), vocab.sha256.clone()),
        ("vocab_id".to_string(), vocab.id.clone().unwrap_or_default()),
        ("max_len".to_string(), max_len.to_string()),
        ("id2label".to_string(), serde_json::Value::Object(id2label).to_string()),
        ("created_by".to_string(), format!("bertpipe {}", env!("CARGO_PKG_VERSION"))),
        ("graph".to_string(), if opts.optimize { "com.microsoft fused" } else { "onnx" }.to_string()),
    ];
    metadata.extend(opts.metadata.iter().cloned());
    let (mut proto, nodes) = build(&model, opts.optimize, &metadata)?;
    let parameters = model.params.vars.iter().map(|(_, v)| v.elem_count()).sum();

    let out = &opts.out;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    }
    let graph = proto.graph.as_mut().expect("built with a graph");
    let weight_bytes: usize = graph.initializer.iter().map(|t| t.raw_data.len()).sum();
    let mut external_data = None;
    if opts.external_data || weight_bytes > EXTERNAL_DATA_BYTES {
        let name = format!("{}.data", out.file_name().and_then(|n| n.to_str()).unwrap_or("model.onnx"));
        let mut data = Vec::with_capacity(weight_bytes + 4096);
        externalize(&mut graph.initializer, &name, &mut data);
        let path = out.with_file_name(&name);
        crate::contract::write_file_atomic(&path, &data)?;
        external_data = Some(path);
    }
    let bytes = proto.encode_to_vec();
    crate::contract::write_file_atomic(out, &bytes)?;
    Ok(Exported {
        lowercase: tokenizer_config.lowercase,
        model,
        max_len,
        path: out.clone(),
        external_data,
        bytes: bytes.len() as u64,
        nodes,
        parameters,
        metadata,
        vocab_file,
    })
}

/// The ONNX model of `model` (a classifier), and its node count.
pub fn build(model: &BertWithHead, optimize: bool, metadata: &[(String, String)]) -> Result<(ModelProto, usize)> {
    let Head::Classifier { classifier, .. } = &model.head else {
        bail!("only sequence-classification models are exported");
    };
    let c = &model.config;
    let mut g = Graph::default();
    let dims = [Err("batch"), Err("sequence")];
    for name in ["input_ids", "attention_mask", "token_type_ids"] {
        g.inputs.push(ValueInfoProto::tensor(name, data_type::INT64, &dims));
    }

    let mut x = if optimize { embeddings_fused(&mut g, model)? } else { embeddings(&mut g, model)? };
    // Attention mask → additive bias `[batch, 1, 1, seq]`: 0 for tokens, −1e9 for padding
    // (the fused Attention op takes the raw int32 mask instead).
    let mask = if optimize {
        g.op("Cast", "/mask/to_int32", &["attention_mask"], vec![("to", Attr::Int(data_type::INT32 as i64))])
    } else {
        let m = g.op("Cast", "/mask/to_float", &["attention_mask"], vec![("to", Attr::Int(data_type::FLOAT as i64))]);
        let one = g.scalar("/mask/one", 1.0);
        let inv = g.op("Sub", "/mask/invert", &[&one, &m], vec![]);
        let big = g.scalar("/mask/masked_value", crate::model::bert::MASKED);
        let bias = g.op("Mul", "/mask/bias", &[&inv, &big], vec![]);
        let axes = g.i64_init("/mask/axes", &[2], &[1, 2]);
        g.op("Unsqueeze", "/mask/unsqueeze", &[&bias, &axes], vec![])
    };
    for (i, layer) in model.bert.layers.iter().enumerate() {
        x = if optimize {
            layer_fused(&mut g, i, layer, &x, &mask, c.num_attention_heads, c.layer_norm_eps, c.hidden_act)?
        } else {
            layer_plain(&mut g, i, layer, &x, &mask, c.num_attention_heads, c.layer_norm_eps, c.hidden_act)?
        };
    }

    // Pooler: tanh(dense(hidden[:, 0])).
    let zero = g.i64_init("/pooler/first_token", &[], &[0]);
    let first = g.op("Gather", "/pooler/first_token", &[&x, &zero], vec![("axis", Attr::Int(1))]);
    let pooler = model.bert.pooler.as_ref().context("the model has no pooler")?;
    let pooled = linear(&mut g, "bert.pooler.dense", pooler, &first)?;
    let pooled = g.op("Tanh", "/pooler/tanh", &[&pooled], vec![]);
    // Classifier (dropout is the identity at inference).
    let logits = linear(&mut g, "classifier", classifier, &pooled)?;
    g.rename_output(&logits, "logits");
    g.outputs.push(ValueInfoProto::tensor("logits", data_type::FLOAT, &[Err("batch"), Ok(c.num_labels() as i64)]));

    let nodes = g.node_count();
    let mut opset_import = vec![OperatorSetIdProto { domain: String::new(), version: OPSET }];
    if g.uses_ms_domain {
        opset_import.push(OperatorSetIdProto { domain: super::graph::MS_DOMAIN.to_string(), version: 1 });
    }
    let graph = g.finish(
        "bert_sequence_classification",
        &format!(
            "BERT {}L/{}H/{}A, {} labels, exported by bertpipe",
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.num_labels()
        ),
    );
    Ok((
        ModelProto {
            ir_version: IR_VERSION,
            opset_import,
            producer_name: "bertpipe".into(),
            producer_version: env!("CARGO_PKG_VERSION").into(),
            graph: Some(graph),
            metadata_props: metadata
                .iter()
                .map(|(k, v)| StringStringEntryProto { key: k.clone(), value: v.clone() })
                .collect(),
            ..Default::default()
        },
        nodes,
    ))
}

fn values(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

fn weight(g: &mut Graph, name: &str, t: &Tensor) -> Result<String> {
    Ok(g.f32_init(name, t.dims(), &values(t)?))
}

/// `W` stored as `[in, out]` (HF keeps `[out, in]`), so the product is a plain `MatMul`.
fn weight_t(g: &mut Graph, name: &str, t: &Tensor) -> Result<String> {
    let tt = t.t()?.contiguous()?;
    Ok(g.f32_init(name, tt.dims(), &values(&tt)?))
}

/// `x @ Wᵀ + b`.
fn linear(g: &mut Graph, name: &str, l: &Linear, x: &str) -> Result<String> {
    let w = weight_t(g, &format!("{name}.weight"), &l.weight)?;
    let b = weight(g, &format!("{name}.bias"), &l.bias)?;
    let y = g.op("MatMul", &format!("/{name}/MatMul"), &[x, &w], vec![]);
    Ok(g.op("Add", &format!("/{name}/Add"), &[&y, &b], vec![]))
}

fn layer_norm(g: &mut Graph, name: &str, ln: &LayerNorm, x: &str, eps: f64) -> Result<String> {
    let w = weight(g, &format!("{name}.weight"), &ln.weight)?;
    let b = weight(g, &format!("{name}.bias"), &ln.bias)?;
    Ok(g.op(
        "LayerNormalization",
        &format!("/{name}/LayerNormalization"),
        &[x, &w, &b],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps as f32))],
    ))
}

/// Embeddings: word + position + token type, then LayerNorm.
fn embeddings(g: &mut Graph, model: &BertWithHead) -> Result<String> {
    let e = &model.bert.embeddings;
    let word = weight(g, "bert.embeddings.word_embeddings.weight", &e.word_embeddings)?;
    let pos = weight(g, "bert.embeddings.position_embeddings.weight", &e.position_embeddings)?;
    let types = weight(g, "bert.embeddings.token_type_embeddings.weight", &e.token_type_embeddings)?;
    let words = g.op("Gather", "/embeddings/word_embeddings", &[&word, "input_ids"], vec![]);
    let type_rows = g.op("Gather", "/embeddings/token_type_embeddings", &[&types, "token_type_ids"], vec![]);
    // Positions 0..seq: the first `seq` rows of the table (Slice by the input's length).
    let seq = g.op(
        "Shape",
        "/embeddings/sequence_length",
        &["input_ids"],
        vec![("start", Attr::Int(1)), ("end", Attr::Int(2))],
    );
    let zero = g.i64_init("/embeddings/zero", &[1], &[0]);
    let positions = g.op("Slice", "/embeddings/position_embeddings", &[&pos, &zero, &seq, &zero], vec![]);
    let sum = g.op("Add", "/embeddings/add_token_types", &[&words, &type_rows], vec![]);
    let sum = g.op("Add", "/embeddings/add_positions", &[&sum, &positions], vec![]);
    layer_norm(g, "bert.embeddings.LayerNorm", &e.layer_norm, &sum, model.config.layer_norm_eps)
}

/// Embeddings as one `EmbedLayerNormalization` (int32 ids).
fn embeddings_fused(g: &mut Graph, model: &BertWithHead) -> Result<String> {
    let e = &model.bert.embeddings;
    let to_i32 = vec![("to", Attr::Int(data_type::INT32 as i64))];
    let ids = g.op("Cast", "/embeddings/input_ids_int32", &["input_ids"], to_i32);
    let types = g.op(
        "Cast",
        "/embeddings/token_type_ids_int32",
        &["token_type_ids"],
        vec![("to", Attr::Int(data_type::INT32 as i64))],
    );
    let word = weight(g, "bert.embeddings.word_embeddings.weight", &e.word_embeddings)?;
    let pos = weight(g, "bert.embeddings.position_embeddings.weight", &e.position_embeddings)?;
    let type_table = weight(g, "bert.embeddings.token_type_embeddings.weight", &e.token_type_embeddings)?;
    let gamma = weight(g, "bert.embeddings.LayerNorm.weight", &e.layer_norm.weight)?;
    let beta = weight(g, "bert.embeddings.LayerNorm.bias", &e.layer_norm.bias)?;
    let outs = g.ms_op(
        "EmbedLayerNormalization",
        "/embeddings/EmbedLayerNormalization",
        &[&ids, &types, &word, &pos, &type_table, &gamma, &beta],
        vec![("epsilon", Attr::Float(model.config.layer_norm_eps as f32))],
        2,
    );
    Ok(outs[0].clone())
}

fn activation(g: &mut Graph, name: &str, act: Activation, x: &str) -> String {
    match act {
        // 0.5·x·(1 + erf(x/√2)).
        Activation::Gelu => {
            let sqrt2 = g.scalar(&format!("/{name}/sqrt2"), std::f32::consts::SQRT_2);
            let one = g.scalar(&format!("/{name}/one"), 1.0);
            let half = g.scalar(&format!("/{name}/half"), 0.5);
            let d = g.op("Div", &format!("/{name}/Div"), &[x, &sqrt2], vec![]);
            let erf = g.op("Erf", &format!("/{name}/Erf"), &[&d], vec![]);
            let p = g.op("Add", &format!("/{name}/Add"), &[&erf, &one], vec![]);
            let m = g.op("Mul", &format!("/{name}/Mul"), &[x, &p], vec![]);
            g.op("Mul", &format!("/{name}/Mul_half"), &[&m, &half], vec![])
        }
        // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
        Activation::GeluNew => {
            let c = g.scalar(&format!("/{name}/sqrt_2_over_pi"), (2.0f32 / std::f32::consts::PI).sqrt());
            let k = g.scalar(&format!("/{name}/k"), 0.044715);
            let three = g.scalar(&format!("/{name}/three"), 3.0);
            let one = g.scalar(&format!("/{name}/one"), 1.0);
            let half = g.scalar(&format!("/{name}/half"), 0.5);
            let cube = g.op("Pow", &format!("/{name}/Pow"), &[x, &three], vec![]);
            let kc = g.op("Mul", &format!("/{name}/Mul_k"), &[&cube, &k], vec![]);
            let inner = g.op("Add", &format!("/{name}/Add_x"), &[x, &kc], vec![]);
            let scaled = g.op("Mul", &format!("/{name}/Mul_c"), &[&inner, &c], vec![]);
            let t = g.op("Tanh", &format!("/{name}/Tanh"), &[&scaled], vec![]);
            let p = g.op("Add", &format!("/{name}/Add_one"), &[&t, &one], vec![]);
            let m = g.op("Mul", &format!("/{name}/Mul"), &[x, &p], vec![]);
            g.op("Mul", &format!("/{name}/Mul_half"), &[&m, &half], vec![])
        }
        Activation::Relu => g.op("Relu", &format!("/{name}/Relu"), &[x], vec![]),
    }
}

/// One encoder layer in plain ONNX ops.
#[allow(clippy::too_many_arguments)]
fn layer_plain(
    g: &mut Graph,
    i: usize,
    layer: &BertLayer,
    x: &str,
    mask_bias: &str,
    heads: usize,
    eps: f64,
    act: Activation,
) -> Result<String> {
    let p = format!("bert.encoder.layer.{i}");
    let ctx = attention_plain(g, &p, layer, x, mask_bias, heads)?;
    // Attention output: dense, residual, LayerNorm.
    let a = linear(g, &format!("{p}.attention.output.dense"), &layer.attention_output.dense, &ctx)?;
    let a = g.op("Add", &format!("/{p}/attention/output/residual"), &[&a, x], vec![]);
    let a = layer_norm(g, &format!("{p}.attention.output.LayerNorm"), &layer.attention_output.layer_norm, &a, eps)?;
    // Feed-forward: dense, activation, dense, residual, LayerNorm.
    let inter = linear(g, &format!("{p}.intermediate.dense"), &layer.intermediate, &a)?;
    let inter = activation(g, &format!("{p}/intermediate/act"), act, &inter);
    let o = linear(g, &format!("{p}.output.dense"), &layer.output.dense, &inter)?;
    let o = g.op("Add", &format!("/{p}/output/residual"), &[&o, &a], vec![]);
    layer_norm(g, &format!("{p}.output.LayerNorm"), &layer.output.layer_norm, &o, eps)
}

/// Self-attention in plain ops: `[b, s, h]` in, the merged heads' context `[b, s, h]` out.
fn attention_plain(
    g: &mut Graph,
    p: &str,
    layer: &BertLayer,
    x: &str,
    mask_bias: &str,
    heads: usize,
) -> Result<String> {
    let hidden = layer.attention.query.weight.dim(0)?;
    let head_dim = hidden / heads;
    // Self-attention: project, split heads `[b, s, h] → [b, heads, s, d]`.
    let split = g.i64_init(&format!("/{p}/attention/heads_shape"), &[4], &[0, 0, heads as i64, head_dim as i64]);
    let project = |g: &mut Graph, which: &str, l: &Linear, perm: [i64; 4]| -> Result<String> {
        let y = linear(g, &format!("{p}.attention.self.{which}"), l, x)?;
        let y = g.op("Reshape", &format!("/{p}/attention/{which}/Reshape"), &[&y, &split], vec![]);
        Ok(g.op(
            "Transpose",
            &format!("/{p}/attention/{which}/Transpose"),
            &[&y],
            vec![("perm", Attr::Ints(perm.to_vec()))],
        ))
    };
    let q = project(g, "query", &layer.attention.query, [0, 2, 1, 3])?;
    // Keys come transposed, `[b, heads, d, s]`, ready for the product.
    let k = project(g, "key", &layer.attention.key, [0, 2, 3, 1])?;
    let v = project(g, "value", &layer.attention.value, [0, 2, 1, 3])?;
    // Scores q·kᵀ/√d + mask bias, softmax over keys, then the weighted values.
    let scores = g.op("MatMul", &format!("/{p}/attention/scores"), &[&q, &k], vec![]);
    let sqrt_d = g.scalar(&format!("/{p}/attention/sqrt_head_dim"), (head_dim as f32).sqrt());
    let scores = g.op("Div", &format!("/{p}/attention/scale"), &[&scores, &sqrt_d], vec![]);
    let scores = g.op("Add", &format!("/{p}/attention/mask"), &[&scores, mask_bias], vec![]);
    let probs = g.op("Softmax", &format!("/{p}/attention/Softmax"), &[&scores], vec![("axis", Attr::Int(-1))]);
    let ctx = g.op("MatMul", &format!("/{p}/attention/context"), &[&probs, &v], vec![]);
    // Merge heads `[b, heads, s, d] → [b, s, h]`.
    let ctx = g.op(
        "Transpose",
        &format!("/{p}/attention/merge_heads"),
        &[&ctx],
        vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))],
    );
    let merge = g.i64_init(&format!("/{p}/attention/merged_shape"), &[3], &[0, 0, hidden as i64]);
    let ctx = g.op("Reshape", &format!("/{p}/attention/merge_heads_reshape"), &[&ctx, &merge], vec![]);
    Ok(ctx)
}

/// One encoder layer in ONNX Runtime's fused ops: `Attention` (packed QKV weights, raw
/// int32 mask), `SkipLayerNormalization` (bias + residual + LayerNorm), `BiasGelu`.
#[allow(clippy::too_many_arguments)]
fn layer_fused(
    g: &mut Graph,
    i: usize,
    layer: &BertLayer,
    x: &str,
    mask_i32: &str,
    heads: usize,
    eps: f64,
    act: Activation,
) -> Result<String> {
    let p = format!("bert.encoder.layer.{i}");
    let att = &layer.attention;
    // Packed `[hidden, 3·hidden]`: row r is (Wqᵀ[r], Wkᵀ[r], Wvᵀ[r]).
    let qkv_t = Tensor::cat(&[&att.query.weight, &att.key.weight, &att.value.weight], 0)?.t()?.contiguous()?;
    let qkv_b = Tensor::cat(&[&att.query.bias, &att.key.bias, &att.value.bias], 0)?;
    let w = g.f32_init(&format!("{p}.attention.self.qkv.weight"), qkv_t.dims(), &values(&qkv_t)?);
    let b = weight(g, &format!("{p}.attention.self.qkv.bias"), &qkv_b)?;
    let ctx = g.ms_op(
        "Attention",
        &format!("/{p}/attention/Attention"),
        &[x, &w, &b, mask_i32],
        vec![("num_heads", Attr::Int(heads as i64)), ("mask_filter_value", Attr::Float(crate::model::bert::MASKED))],
        1,
    )[0]
    .clone();
    let a = skip_layer_norm(
        g,
        &format!("{p}.attention.output"),
        &layer.attention_output.dense,
        &layer.attention_output.layer_norm,
        &ctx,
        x,
        eps,
    )?;
    let wi = weight_t(g, &format!("{p}.intermediate.dense.weight"), &layer.intermediate.weight)?;
    let bi = weight(g, &format!("{p}.intermediate.dense.bias"), &layer.intermediate.bias)?;
    let inter = g.op("MatMul", &format!("/{p}/intermediate/MatMul"), &[&a, &wi], vec![]);
    let inter = match act {
        Activation::Gelu => {
            g.ms_op("BiasGelu", &format!("/{p}/intermediate/BiasGelu"), &[&inter, &bi], vec![], 1)[0].clone()
        }
        Activation::GeluNew => {
            g.ms_op("FastGelu", &format!("/{p}/intermediate/FastGelu"), &[&inter, &bi], vec![], 1)[0].clone()
        }
        Activation::Relu => {
            let y = g.op("Add", &format!("/{p}/intermediate/Add"), &[&inter, &bi], vec![]);
            g.op("Relu", &format!("/{p}/intermediate/Relu"), &[&y], vec![])
        }
    };
    skip_layer_norm(g, &format!("{p}.output"), &layer.output.dense, &layer.output.layer_norm, &inter, &a, eps)
}

/// `LayerNorm(x @ Wᵀ + b + residual)` as `MatMul` + `SkipLayerNormalization`.
fn skip_layer_norm(
    g: &mut Graph,
    name: &str,
    dense: &Linear,
    ln: &LayerNorm,
    x: &str,
    residual: &str,
    eps: f64,
) -> Result<String> {
    let w = weight_t(g, &format!("{name}.dense.weight"), &dense.weight)?;
    let b = weight(g, &format!("{name}.dense.bias"), &dense.bias)?;
    let gamma = weight(g, &format!("{name}.LayerNorm.weight"), &ln.weight)?;
    let beta = weight(g, &format!("{name}.LayerNorm.bias"), &ln.bias)?;
    let y = g.op("MatMul", &format!("/{name}/MatMul"), &[x, &w], vec![]);
    Ok(g.ms_op(
        "SkipLayerNormalization",
        &format!("/{name}/SkipLayerNormalization"),
        &[&y, residual, &gamma, &beta, &b],
        vec![("epsilon", Attr::Float(eps as f32))],
        1,
    )[0]
    .clone())
}
