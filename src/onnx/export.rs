//! `bertpipe export onnx`: an HF sequence-classification checkpoint (ours or theirs) of BERT's
//! tree (BERT, RoBERTa) to an ONNX model, graph written node by node (not traced); ModernBERT's
//! graph is [`super::modernbert`].
//!
//! Signature (DESIGN.md, "ONNX"): inputs `input_ids`, `attention_mask`, `token_type_ids`
//! (int64 `[batch, sequence]`, both dynamic; `token_type_ids` only for BERT), output `logits`
//! (float32 `[batch, num_labels]`);
//! opset 17; weights as `raw_data` initializers (in `model.onnx.data` beside the model past
//! 2 GB); metadata `vocab_sha256`, `max_len`, `id2label`, `created_by`.
//!
//! Two graphs compute the same function:
//! - plain ONNX ops (`LayerNormalization`, `MatMul`, `Softmax`, `Erf`, …): runs anywhere;
//! - `--optimize`: ONNX Runtime's fused `com.microsoft` ops (`EmbedLayerNormalization`,
//!   `Attention`, `SkipLayerNormalization`, `BiasGelu`), which ONNX Runtime's own optimiser
//!   does not produce when shapes are dynamic.
//!
//! In three precisions ([`Precision`]), each graph either way:
//! - fp32: the checkpoint's weights as they are.
//! - int8 (`--quantize int8`): dynamic quantisation of the encoder's six linear layers per
//!   layer — weights int8, symmetric, per output channel, 7-bit range ([`INT8_WEIGHT_MAX`]);
//!   activations quantised to uint8 per tensor at run time — as `DynamicQuantizeMatMul`
//!   (`QAttention` for the packed QKV with `--optimize`, whose residuals and activation are then
//!   the plain `Sum` + `LayerNormalization` and `Gelu`: faster than the fused ops around int8
//!   products, see [`int8_layer_tail`]). Float32 stay: the embeddings (a
//!   gather has no arithmetic to speed up), LayerNorm, softmax and the two products of
//!   activations in attention, the pooler and the classifier (one token per row: a negligible
//!   share of the work, and they make the logits).
//! - fp16 (`--fp16`, for CUDA): fp16 weights and activations; LayerNorm statistics, the
//!   attention scores' scale, mask and softmax, the pooler and the classifier in float32;
//!   inputs and `logits` as in the contract (int64 in, float32 out).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use prost::Message;

use super::graph::{externalize, Attr, Graph};
use super::proto::{data_type, ModelProto, OperatorSetIdProto, StringStringEntryProto, ValueInfoProto, IR_VERSION};
use crate::model::bert::{BertLayer, BertModel, LayerNorm, Linear};
use crate::model::config::{Activation, Family};
use crate::model::{BertWithHead, Encoder, Head, ModelKind};

pub const OPSET: i64 = 17;
/// Protobuf refuses messages past 2 GiB; weights move to an external file well before.
const EXTERNAL_DATA_BYTES: usize = 1 << 30;

/// The number format of an exported model (its `precision` metadata).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// float32 weights and arithmetic.
    #[default]
    #[value(alias = "float32")]
    #[serde(alias = "float32")]
    Fp32,
    /// Dynamic quantisation of the encoder's linear layers (weights int8 per output channel,
    /// activations at run time), for fast CPU inference; gate it with `eval --baseline`.
    Int8,
    /// fp16 weights and arithmetic (LayerNorm statistics and softmax in fp32), for CUDA.
    #[value(alias = "float16")]
    #[serde(alias = "float16")]
    Fp16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Int8 => "int8",
            Precision::Fp16 => "fp16",
        }
    }

    /// What the weights and the arithmetic are (the `quantization` metadata).
    pub fn scheme(self) -> &'static str {
        match self {
            Precision::Fp32 => "float32 weights and arithmetic",
            Precision::Int8 => {
                "dynamic: encoder linear weights int8 symmetric per output channel (7-bit range), activations uint8 per tensor at run time; embeddings, LayerNorm, softmax, attention products, pooler and classifier float32"
            }
            Precision::Fp16 => {
                "fp16 weights and activations; LayerNorm statistics, attention softmax, pooler and classifier float32; int64 inputs, float32 logits"
            }
        }
    }

    pub fn parse(s: &str) -> Result<Precision> {
        match s {
            "fp32" | "float32" => Ok(Precision::Fp32),
            "int8" => Ok(Precision::Int8),
            "fp16" | "float16" => Ok(Precision::Fp16),
            _ => bail!("unknown precision `{s}` (fp32, int8 or fp16)"),
        }
    }
}

/// How a checkpoint is exported: the flags of `bertpipe export onnx` and, with the same names
/// and defaults, the keys of an experiment's export stage (`--precision int8` is
/// `precision: int8`). What to export and where to (`--checkpoint`, `--out`) the command takes
/// as flags and a stage wires (`from:` / `checkpoint:`, `OUT/<stage>/model.onnx`).
#[derive(Debug, Clone, Default, PartialEq, clap::Args, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExportSettings {
    /// Run the export in ONNX Runtime and the checkpoint in candle on random and real
    /// (tokenized, padded) batches; fail on any non-finite logit or past the precision's
    /// bound on max |Δ logits|: < 1e-4 for fp32, 5e-3 + 1e-2·max|logit| for fp16, 0.1 +
    /// 0.1·max|logit| for int8 on text (docs/export-eval.md, "Precision").
    #[arg(long)]
    pub verify: bool,
    /// Emit ONNX Runtime's fused com.microsoft ops (EmbedLayerNormalization, Attention,
    /// SkipLayerNormalization, BiasGelu; with int8, QAttention and the int8 products before
    /// plain LayerNormalization and Gelu, which are faster there); the model then runs in ONNX
    /// Runtime only. The fastest int8 model.
    #[arg(long)]
    pub optimize: bool,
    /// The number format: `fp32`; `int8`, dynamic quantisation of the encoder's linear layers
    /// (weights int8 per output channel, activations at run time) for fast CPU inference, to
    /// gate with `eval --baseline FP32.onnx`; `fp16` weights and arithmetic (LayerNorm
    /// statistics and softmax in fp32) for CUDA. Inputs are int64 and logits float32 always.
    #[arg(long, value_enum, default_value_t = Precision::Fp32)]
    pub precision: Precision,
    /// The vocabulary to record (default: the checkpoint's vocab.txt or tokenizer.json).
    #[arg(long, value_name = "FILE")]
    pub vocab: Option<PathBuf>,
    /// The longest input to record (default: the checkpoint's tokenizer_config.json, else
    /// the position table).
    #[arg(long, value_name = "N")]
    pub max_len: Option<usize>,
    /// Write the weights to OUT.data beside the model (automatic past protobuf's 2 GB limit).
    #[arg(long)]
    pub external_data: bool,
    /// With `--precision fp16`: clamp weights beyond fp16's range (±65504) to it, with a warning
    /// naming them (without it such weights fail the export, naming the tensor).
    #[arg(long)]
    pub fp16_clamp: bool,
}

impl ExportSettings {
    /// The call that exports `checkpoint` to `out` with these settings.
    pub fn options(&self, checkpoint: PathBuf, out: PathBuf, metadata: Vec<(String, String)>) -> ExportOptions {
        ExportOptions {
            checkpoint,
            out,
            optimize: self.optimize,
            precision: self.precision,
            vocab: self.vocab.clone(),
            max_len: self.max_len,
            external_data: self.external_data,
            fp16_clamp: self.fp16_clamp,
            metadata,
        }
    }
}

/// What `export onnx` was asked to do.
#[derive(Debug, Clone)]
pub struct ExportOptions {
    pub checkpoint: PathBuf,
    pub out: PathBuf,
    /// Emit ONNX Runtime's fused contrib ops.
    pub optimize: bool,
    /// fp32, int8 (dynamic quantisation) or fp16.
    pub precision: Precision,
    /// The vocabulary the model expects (default: the checkpoint's vocab.txt or tokenizer.json).
    pub vocab: Option<PathBuf>,
    /// The longest input (default: tokenizer_config.json's `model_max_length`, else the
    /// position table's size).
    pub max_len: Option<usize>,
    /// Weights in `OUT.data` beside the model even when it would fit in one file (always
    /// done past protobuf's 2 GB limit).
    pub external_data: bool,
    /// fp16 weights beyond ±65504 are clamped (with a warning) instead of refused.
    pub fp16_clamp: bool,
    /// More metadata entries (an experiment's stage keys).
    pub metadata: Vec<(String, String)>,
}

/// What was written, and the model it came from (for `--verify`, without a second load).
pub struct Exported {
    pub model: BertWithHead,
    pub precision: Precision,
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
    ["vocab.txt", "tokenizer.json"].iter().map(|f| dir.join(f)).find(|p| crate::contract::reads::is_file(p))
}

/// Loads a sequence-classification checkpoint on the CPU, refusing one without a trained
/// classifier (a bare encoder would export random logits).
pub fn load_classifier(dir: &Path) -> Result<BertWithHead> {
    let model = BertWithHead::from_checkpoint(ModelKind::SequenceClassification, dir, None, &Device::Cpu, 0)?;
    // The head: BERT's pooler and `classifier`, RoBERTa's `classifier.dense` and `.out_proj`,
    // ModernBERT's `head` and `classifier`.
    let head = |n: &str| n.starts_with("classifier") || n.starts_with("bert.pooler") || n.starts_with("head.");
    let missing: Vec<&String> = model.initialised.iter().filter(|n| head(n)).collect();
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

/// Exports `opts.checkpoint` to `opts.out`: [`stage`], then [`Staged::commit`].
pub fn export(opts: &ExportOptions) -> Result<Exported> {
    stage(opts)?.commit()
}

/// An export written aside — in a folder beside the output (`.<name>.<pid>-<n>.tmp/`, holding
/// the model and its external weights under their final names) — until [`Staged::commit`]
/// renames it into place. `export onnx --verify` checks it there, so a model that fails its
/// check never lands where a finished one is expected. The folder is scratch
/// ([`crate::contract::interrupt::scratch`]): dropping this (an error, a failed check) or a
/// signal that ends the process removes it, and the output path keeps what it held before.
pub struct Staged {
    done: Exported,
    out: PathBuf,
    folder: crate::contract::interrupt::Scratch,
}

impl Staged {
    /// The model as written aside (its `path` lies in the staging folder).
    pub fn exported(&self) -> &Exported {
        &self.done
    }

    /// Renames the external weights (when any) and then the model into place; the returned
    /// [`Exported`] names the final paths.
    pub fn commit(self) -> Result<Exported> {
        let Staged { mut done, out, folder } = self;
        if let Some(data) = done.external_data.take() {
            let to = out.with_file_name(data.file_name().unwrap_or_default());
            crate::contract::kill_point();
            std::fs::rename(&data, &to).with_context(|| format!("could not write '{}'", to.display()))?;
            done.external_data = Some(to);
        }
        crate::contract::kill_point();
        std::fs::rename(&done.path, &out).with_context(|| format!("could not write '{}'", out.display()))?;
        done.path = out;
        drop(folder);
        Ok(done)
    }
}

/// Refuses a vocabulary the model cannot take: more tokens than the model's word embeddings
/// have rows (`config.json`'s `vocab_size`), or a special token past them. Its ids would index
/// past the embedding table — in `--verify`, and in every evaluation of the exported model.
/// (A vocabulary smaller than the table is fine: tables are often padded.)
pub fn check_vocab_fits(
    tokenizer: &crate::contract::manifest::TokenizerInfo,
    vocab_file: &Path,
    rows: usize,
    checkpoint: &Path,
    given: bool,
) -> Result<()> {
    let fix = if given {
        "export with the vocabulary the model was trained with (--vocab FILE), or leave --vocab out to record the checkpoint's own"
    } else {
        "the checkpoint's files disagree; give the vocabulary the model was trained with as --vocab FILE"
    };
    let (vocab, model) = (vocab_file.display(), checkpoint.display());
    if tokenizer.vocab_size > rows {
        bail!(
            "the vocabulary '{vocab}' does not fit the model '{model}': it has {} tokens, but the model's word embeddings have {rows} rows (config.json vocab_size {rows}); {fix}",
            tokenizer.vocab_size
        );
    }
    let s = &tokenizer.special_ids;
    for (role, id) in [("cls", s.cls), ("sep", s.sep), ("pad", s.pad), ("unk", s.unk), ("mask", s.mask)] {
        if id as usize >= rows {
            bail!(
                "the vocabulary '{vocab}' does not fit the model '{model}': its `{role}` token has id {id}, but the model's word embeddings have {rows} rows (config.json vocab_size {rows}); {fix}"
            );
        }
    }
    Ok(())
}

/// Writes the export of `opts.checkpoint` aside (see [`Staged`]), after checking that the
/// vocabulary fits the model ([`check_vocab_fits`]).
pub fn stage(opts: &ExportOptions) -> Result<Staged> {
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
    let tokenizer =
        crate::tokenize::Tokenize::of_file(&vocab_file, tokenizer_config.lowercase, tokenizer_config.strip_accents)
            .load()
            .with_context(|| format!("could not read the vocabulary '{}'", vocab_file.display()))?
            .info();
    check_vocab_fits(&tokenizer, &vocab_file, model.config.vocab_size, &opts.checkpoint, opts.vocab.is_some())?;
    // The tokenizer just loaded is the vocabulary the model records: not read a second time.
    let vocab = tokenizer.vocab();
    let max_len = match opts.max_len {
        Some(n) => n,
        None => tokenizer_config.model_max_length.unwrap_or(model.config.max_sequence()),
    };
    if max_len < 3 {
        // `eval` and `predict` feed at least [CLS] token [SEP]: a smaller model runs nothing.
        bail!("max_len {max_len} leaves no room for a token between [CLS] and [SEP]: give 3 or more");
    }
    if max_len > model.config.max_sequence() {
        bail!(
            "max_len {max_len} exceeds the {} tokens the model's position embeddings cover",
            model.config.max_sequence()
        );
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
        ("precision".to_string(), opts.precision.name().to_string()),
        ("quantization".to_string(), opts.precision.scheme().to_string()),
    ];
    metadata.extend(opts.metadata.iter().cloned());
    let (mut proto, nodes) = build(&model, opts.optimize, opts.precision, opts.fp16_clamp, &metadata)?;
    let parameters = model.params.vars.iter().map(|(_, v)| v.elem_count()).sum();

    let out = &opts.out;
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
    }
    let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("model.onnx").to_string();
    let folder = crate::contract::interrupt::scratch(crate::contract::temp_path(out));
    std::fs::create_dir(folder.path()).with_context(|| format!("could not create '{}'", folder.path().display()))?;
    let graph = proto.graph.as_mut().expect("built with a graph");
    let weight_bytes: usize = graph.initializer.iter().map(|t| t.raw_data.len()).sum();
    let mut external_data = None;
    if opts.external_data || weight_bytes > EXTERNAL_DATA_BYTES {
        let data_name = format!("{name}.data");
        let mut data = Vec::with_capacity(weight_bytes + 4096);
        externalize(&mut graph.initializer, &data_name, &mut data);
        let path = folder.path().join(&data_name);
        std::fs::write(&path, &data).with_context(|| format!("could not write '{}'", path.display()))?;
        external_data = Some(path);
    }
    let bytes = proto.encode_to_vec();
    let path = folder.path().join(&name);
    std::fs::write(&path, &bytes).with_context(|| format!("could not write '{}'", path.display()))?;
    let done = Exported {
        lowercase: tokenizer_config.lowercase,
        precision: opts.precision,
        model,
        max_len,
        path,
        external_data,
        bytes: bytes.len() as u64,
        nodes,
        parameters,
        metadata,
        vocab_file,
    };
    Ok(Staged { done, out: out.clone(), folder })
}

/// The ONNX model of `model` (a classifier), and its node count.
pub fn build(
    model: &BertWithHead,
    optimize: bool,
    precision: Precision,
    fp16_clamp: bool,
    metadata: &[(String, String)],
) -> Result<(ModelProto, usize)> {
    if !model.head.is_classifier() {
        bail!("only sequence-classification models are exported");
    }
    let c = &model.config;
    let bert = match &model.encoder {
        Encoder::Bert(b) => b,
        Encoder::ModernBert(m) => return super::modernbert::proto(model, m, optimize, precision, metadata),
    };
    let roberta = c.family() == Family::Roberta;
    let p = precision;
    let mut g = Graph::default();
    g.fp16_clamp = fp16_clamp;
    let dims = [Err("batch"), Err("sequence")];
    // RoBERTa has one token type: its export takes no `token_type_ids`, as HF's does not.
    let inputs: &[&str] =
        if roberta { &["input_ids", "attention_mask"] } else { &["input_ids", "attention_mask", "token_type_ids"] };
    for name in inputs {
        g.inputs.push(ValueInfoProto::tensor(name, data_type::INT64, &dims));
    }

    // RoBERTa's position ids come from the input ids, which `EmbedLayerNormalization` does not
    // compute: its embeddings are plain ops under --optimize too (the layers are fused).
    let mut x = if roberta {
        embeddings_roberta(&mut g, model, bert, p)?
    } else if optimize {
        embeddings_fused(&mut g, model, bert, p)?
    } else {
        embeddings(&mut g, model, bert, p)?
    };
    // Attention mask → additive bias `[batch, 1, 1, seq]`: 0 for tokens, −1e9 for padding,
    // float32 in every precision (fp16 scores are cast up before it is added); the fused
    // Attention ops take the raw int32 mask instead.
    let mask = if optimize {
        g.op("Cast", "/mask/to_int32", &["attention_mask"], vec![("to", Attr::Int(data_type::INT32 as i64))])
    } else {
        padding_bias(&mut g)
    };
    let shape = LayerShape {
        prefix: c.family().prefix(),
        heads: c.num_attention_heads,
        eps: c.layer_norm_eps,
        act: c.hidden_act,
        p,
    };
    for (i, layer) in bert.layers.iter().enumerate() {
        x = if optimize {
            layer_fused(&mut g, i, layer, &x, &mask, &shape)?
        } else {
            layer_plain(&mut g, i, layer, &x, &mask, &shape)?
        };
    }

    // Pooler: tanh(dense(hidden[:, 0])). Pooler and classifier stay float32 in every precision:
    // they see one token per row (a negligible share of the work) and make the logits.
    let zero = g.i64_init("/pooler/first_token", &[], &[0]);
    let mut first = g.op("Gather", "/pooler/first_token", &[&x, &zero], vec![("axis", Attr::Int(1))]);
    if p == Precision::Fp16 {
        first = cast(&mut g, "/pooler/to_float32", &first, data_type::FLOAT);
    }
    // Classifier (dropout is the identity at inference).
    let logits = match &model.head {
        Head::Classifier { classifier, .. } => {
            let pooler = bert.pooler.as_ref().context("the model has no pooler")?;
            let pooled = linear(&mut g, "bert.pooler.dense", pooler, &first)?;
            let pooled = g.op("Tanh", "/pooler/tanh", &[&pooled], vec![]);
            linear(&mut g, "classifier", classifier, &pooled)?
        }
        Head::RobertaClassifier { dense, out_proj, .. } => {
            // `RobertaClassificationHead`: dense → tanh → out_proj on `<s>`.
            let h = linear(&mut g, "classifier.dense", dense, &first)?;
            let h = g.op("Tanh", "/classifier/tanh", &[&h], vec![]);
            linear(&mut g, "classifier.out_proj", out_proj, &h)?
        }
        Head::ModernBertClassifier { .. } | Head::Pretraining { .. } => unreachable!("refused above"),
    };
    g.rename_output(&logits, "logits");
    g.outputs.push(ValueInfoProto::tensor("logits", data_type::FLOAT, &[Err("batch"), Ok(c.num_labels() as i64)]));

    Ok(model_proto(g, c, c.class_prefix(), p, metadata))
}

/// The ONNX model around a finished graph `g`, and its node count.
pub(super) fn model_proto(
    g: Graph,
    c: &crate::model::config::BertConfig,
    family: &str,
    p: Precision,
    metadata: &[(String, String)],
) -> (ModelProto, usize) {
    let nodes = g.node_count();
    if !g.clamped.is_empty() {
        eprintln!(
            "warning: --fp16-clamp: {} tensors had weights beyond fp16's ±65504, clamped to it: {}",
            g.clamped.len(),
            g.clamped.join(", ")
        );
    }
    let mut opset_import = vec![OperatorSetIdProto { domain: String::new(), version: OPSET }];
    if g.uses_ms_domain {
        opset_import.push(OperatorSetIdProto { domain: super::graph::MS_DOMAIN.to_string(), version: 1 });
    }
    let graph = g.finish(
        "bert_sequence_classification",
        &format!(
            "{family} {}L/{}H/{}A, {} labels, {}, exported by bertpipe",
            c.num_hidden_layers,
            c.hidden_size,
            c.num_attention_heads,
            c.num_labels(),
            p.name()
        ),
    );
    (
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
    )
}

/// `attention_mask` → additive bias `[batch, 1, 1, seq]`: 0 for tokens, −1e9 for padding.
pub(super) fn padding_bias(g: &mut Graph) -> String {
    let m = g.op("Cast", "/mask/to_float", &["attention_mask"], vec![("to", Attr::Int(data_type::FLOAT as i64))]);
    let one = g.scalar("/mask/one", 1.0);
    let inv = g.op("Sub", "/mask/invert", &[&one, &m], vec![]);
    let big = g.scalar("/mask/masked_value", crate::model::bert::MASKED);
    let bias = g.op("Mul", "/mask/bias", &[&inv, &big], vec![]);
    let axes = g.i64_init("/mask/axes", &[2], &[1, 2]);
    g.op("Unsqueeze", "/mask/unsqueeze", &[&bias, &axes], vec![])
}

/// What every layer builder needs besides the layer.
struct LayerShape {
    /// The encoder's tensor-name prefix (`bert`, `roberta`).
    prefix: &'static str,
    heads: usize,
    eps: f64,
    act: Activation,
    p: Precision,
}

fn values(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

fn weight(g: &mut Graph, name: &str, t: &Tensor) -> Result<String> {
    Ok(g.f32_init(name, t.dims(), &values(t)?))
}

/// A float parameter in the precision's float type (fp16 for `--fp16`, else float32). An fp16
/// parameter beyond fp16's range (±65504) would become infinite: refused, naming it, unless
/// `--fp16-clamp` (then clamped and listed in `g.clamped`).
pub(super) fn param(g: &mut Graph, name: &str, t: &Tensor, p: Precision) -> Result<String> {
    let mut v = values(t)?;
    Ok(match p {
        Precision::Fp16 => {
            let max = half::f16::MAX.to_f32();
            let over = v.iter().filter(|x| x.abs() > max).count();
            if over > 0 {
                let worst = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
                if !g.fp16_clamp {
                    bail!(
                        "`{name}`: {over} of its {} weights lie outside fp16's range (±65504; the largest |w| is {worst:e}), and fp16 would make them infinite: export in fp32, or pass --fp16-clamp to clamp them to ±65504",
                        v.len()
                    );
                }
                for x in &mut v {
                    *x = x.clamp(-max, max);
                }
                g.clamped.push(format!("{name} ({over} weights, the largest |w| {worst:e})"));
            }
            g.f16_init(name, t.dims(), &v)
        }
        _ => g.f32_init(name, t.dims(), &v),
    })
}

/// A scalar constant of the activations' float type.
fn constant(g: &mut Graph, name: &str, value: f32, p: Precision) -> String {
    match p {
        Precision::Fp16 => g.f16_init(name, &[], &[value]),
        _ => g.scalar(name, value),
    }
}

fn cast(g: &mut Graph, name: &str, x: &str, to: i32) -> String {
    g.op("Cast", name, &[x], vec![("to", Attr::Int(to as i64))])
}

/// `W` stored as `[in, out]` (HF keeps `[out, in]`), so the product is a plain `MatMul`.
fn weight_t(g: &mut Graph, name: &str, t: &Tensor) -> Result<String> {
    let tt = t.t()?.contiguous()?;
    Ok(g.f32_init(name, tt.dims(), &values(&tt)?))
}

/// `x @ Wᵀ + b` in float32.
fn linear(g: &mut Graph, name: &str, l: &Linear, x: &str) -> Result<String> {
    let w = weight_t(g, &format!("{name}.weight"), &l.weight)?;
    let b = weight(g, &format!("{name}.bias"), &l.bias)?;
    let y = g.op("MatMul", &format!("/{name}/MatMul"), &[x, &w], vec![]);
    Ok(g.op("Add", &format!("/{name}/Add"), &[&y, &b], vec![]))
}

/// `x @ Wᵀ` (plus `bias` when given) for an encoder weight `W` (`[out, in]`) in the
/// precision: a `MatMul` of float32 or fp16 weights, or for int8 one `DynamicQuantizeMatMul`
/// (x quantised to uint8 per tensor at run time, W int8 per output channel, the bias added in
/// float32 by the same kernel).
pub(super) fn product(
    g: &mut Graph,
    name: &str,
    w: &Tensor,
    bias: Option<&Tensor>,
    x: &str,
    p: Precision,
) -> Result<String> {
    match p {
        Precision::Int8 => {
            let (q, scale, zero) = quantized(g, name, w)?;
            let b = bias.map(|b| weight(g, &format!("{name}.bias"), b)).transpose()?;
            let mut inputs = vec![x, q.as_str(), scale.as_str(), zero.as_str()];
            if let Some(b) = &b {
                inputs.push(b);
            }
            Ok(g.ms_op("DynamicQuantizeMatMul", &format!("/{name}/DynamicQuantizeMatMul"), &inputs, vec![], 1)[0]
                .clone())
        }
        Precision::Fp32 | Precision::Fp16 => {
            let wt = w.t()?.contiguous()?;
            let wn = param(g, &format!("{name}.weight"), &wt, p)?;
            let y = g.op("MatMul", &format!("/{name}/MatMul"), &[x, &wn], vec![]);
            match bias {
                Some(b) => {
                    let b = param(g, &format!("{name}.bias"), b, p)?;
                    Ok(g.op("Add", &format!("/{name}/Add"), &[&y, &b], vec![]))
                }
                None => Ok(y),
            }
        }
    }
}

/// An encoder linear layer `x @ Wᵀ + b` in the precision.
fn dense(g: &mut Graph, name: &str, l: &Linear, x: &str, p: Precision) -> Result<String> {
    product(g, name, &l.weight, Some(&l.bias), x, p)
}

/// The int8 initializers of an encoder weight (`[out, in]`): the quantised `Wᵀ` (`[in, out]`),
/// its per-column scales and zero points (all 0: symmetric).
fn quantized(g: &mut Graph, name: &str, w: &Tensor) -> Result<(String, String, String)> {
    let (out, inp) = w.dims2()?;
    let (q, scales) = quantize_per_channel(&values(w)?, out, inp);
    let q = g.i8_init(&format!("{name}.weight_quantized"), &[inp, out], &q);
    let s = g.f32_init(&format!("{name}.weight_scale"), &[out], &scales);
    let z = g.i8_init(&format!("{name}.weight_zero_point"), &[out], &vec![0; out]);
    Ok((q, s, z))
}

/// The largest magnitude of an int8 weight: 7 bits, not 8. ONNX Runtime multiplies uint8
/// activations by int8 weights with `vpmaddubsw` on x86 CPUs without VNNI (AVX2, and AVX-512
/// before Cascade Lake / Zen 4), which adds two products in a saturating int16: 2·255·127
/// overflows it, 2·255·63 = 32130 cannot. Full-range weights would be exact only on VNNI, ARM
/// and GPUs; the 7-bit range is exact everywhere, for half a bit of weight precision per channel
/// (measured in docs/export-eval.md: no prediction changes on the sample, and logits closer to float32
/// than 8-bit weights gave on this AVX2 machine).
pub const INT8_WEIGHT_MAX: f32 = 63.0;

/// Symmetric per-output-channel quantisation of `W` (`[out, in]`, row-major): returns `Wᵀ`
/// quantised (`[in, out]`, ready for `MatMul`'s B) and one scale per output channel,
/// `max |W[j, :]| / 63`, so `W[j, i] ≈ q[i, j] · scale[j]` with `|q| ≤ 63`. A channel of zeros
/// gets scale 1 (its weights quantise to 0 exactly).
pub fn quantize_per_channel(w: &[f32], out: usize, inp: usize) -> (Vec<i8>, Vec<f32>) {
    debug_assert_eq!(w.len(), out * inp);
    let scales: Vec<f32> = (0..out)
        .map(|j| {
            let m = w[j * inp..(j + 1) * inp].iter().fold(0f32, |m, x| m.max(x.abs()));
            if m > 0.0 && m.is_finite() {
                m / INT8_WEIGHT_MAX
            } else {
                1.0
            }
        })
        .collect();
    let mut q = vec![0i8; out * inp];
    for j in 0..out {
        let s = scales[j];
        for i in 0..inp {
            q[i * out + j] = (w[j * inp + i] / s).round().clamp(-INT8_WEIGHT_MAX, INT8_WEIGHT_MAX) as i8;
        }
    }
    (q, scales)
}

/// LayerNormalization of `x` in the activations' type. In fp16 the mean and variance are still
/// computed in float32 (the op's `stash_type` 1, ONNX's default); scale and bias are fp16.
pub(super) fn layer_norm(g: &mut Graph, name: &str, ln: &LayerNorm, x: &str, eps: f64, p: Precision) -> Result<String> {
    let w = param(g, &format!("{name}.weight"), &ln.weight, p)?;
    let b = param(g, &format!("{name}.bias"), &ln.bias, p)?;
    Ok(g.op(
        "LayerNormalization",
        &format!("/{name}/LayerNormalization"),
        &[x, &w, &b],
        vec![("axis", Attr::Int(-1)), ("epsilon", Attr::Float(eps as f32)), ("stash_type", Attr::Int(1))],
    ))
}

/// Embeddings: word + position + token type, then LayerNorm. The tables stay float32 for int8:
/// a gather does no arithmetic to speed up, and quantised rows would only lose precision.
fn embeddings(g: &mut Graph, model: &BertWithHead, bert: &BertModel, p: Precision) -> Result<String> {
    let e = &bert.embeddings;
    let word = param(g, "bert.embeddings.word_embeddings.weight", &e.word_embeddings, p)?;
    let pos = param(g, "bert.embeddings.position_embeddings.weight", &e.position_embeddings, p)?;
    let types = param(g, "bert.embeddings.token_type_embeddings.weight", &e.token_type_embeddings, p)?;
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
    layer_norm(g, "bert.embeddings.LayerNorm", &e.layer_norm, &sum, model.config.layer_norm_eps, p)
}

/// RoBERTa's embeddings: word + position + the one token type, then LayerNorm; the position
/// ids count the non-padding tokens from `pad + 1` (padding gets `pad`), as HF's
/// `create_position_ids_from_input_ids`: `cumsum(ids ≠ pad) · (ids ≠ pad) + pad`.
fn embeddings_roberta(g: &mut Graph, model: &BertWithHead, bert: &BertModel, p: Precision) -> Result<String> {
    let e = &bert.embeddings;
    let pad = e.padding_idx.context("a RoBERTa model has a padding index")? as i64;
    let word = param(g, "roberta.embeddings.word_embeddings.weight", &e.word_embeddings, p)?;
    let pos = param(g, "roberta.embeddings.position_embeddings.weight", &e.position_embeddings, p)?;
    let types = param(g, "roberta.embeddings.token_type_embeddings.weight", &e.token_type_embeddings, p)?;
    let words = g.op("Gather", "/embeddings/word_embeddings", &[&word, "input_ids"], vec![]);
    let pad_id = g.i64_init("/embeddings/padding_idx", &[], &[pad]);
    let is_pad = g.op("Equal", "/embeddings/is_padding", &["input_ids", &pad_id], vec![]);
    let real = g.op("Not", "/embeddings/is_token", &[&is_pad], vec![]);
    let real = g.op("Cast", "/embeddings/is_token_int64", &[&real], vec![("to", Attr::Int(data_type::INT64 as i64))]);
    let axis = g.i64_init("/embeddings/sequence_axis", &[], &[1]);
    let count = g.op("CumSum", "/embeddings/count_tokens", &[&real, &axis], vec![]);
    let count = g.op("Mul", "/embeddings/count_tokens_only", &[&count, &real], vec![]);
    let position_ids = g.op("Add", "/embeddings/position_ids", &[&count, &pad_id], vec![]);
    let positions = g.op("Gather", "/embeddings/position_embeddings", &[&pos, &position_ids], vec![]);
    // Token type 0 for every token: the table's first row, broadcast.
    let zero = g.i64_init("/embeddings/token_type_zero", &[], &[0]);
    let type_row = g.op("Gather", "/embeddings/token_type_embeddings", &[&types, &zero], vec![]);
    let sum = g.op("Add", "/embeddings/add_positions", &[&words, &positions], vec![]);
    let sum = g.op("Add", "/embeddings/add_token_type", &[&sum, &type_row], vec![]);
    layer_norm(g, "roberta.embeddings.LayerNorm", &e.layer_norm, &sum, model.config.layer_norm_eps, p)
}

/// Embeddings as one `EmbedLayerNormalization` (int32 ids).
fn embeddings_fused(g: &mut Graph, model: &BertWithHead, bert: &BertModel, p: Precision) -> Result<String> {
    let e = &bert.embeddings;
    let ids = cast(g, "/embeddings/input_ids_int32", "input_ids", data_type::INT32);
    let types = cast(g, "/embeddings/token_type_ids_int32", "token_type_ids", data_type::INT32);
    let word = param(g, "bert.embeddings.word_embeddings.weight", &e.word_embeddings, p)?;
    let pos = param(g, "bert.embeddings.position_embeddings.weight", &e.position_embeddings, p)?;
    let type_table = param(g, "bert.embeddings.token_type_embeddings.weight", &e.token_type_embeddings, p)?;
    let gamma = param(g, "bert.embeddings.LayerNorm.weight", &e.layer_norm.weight, p)?;
    let beta = param(g, "bert.embeddings.LayerNorm.bias", &e.layer_norm.bias, p)?;
    let outs = g.ms_op(
        "EmbedLayerNormalization",
        "/embeddings/EmbedLayerNormalization",
        &[&ids, &types, &word, &pos, &type_table, &gamma, &beta],
        vec![("epsilon", Attr::Float(model.config.layer_norm_eps as f32))],
        2,
    );
    Ok(outs[0].clone())
}

pub(super) fn activation(g: &mut Graph, name: &str, act: Activation, x: &str, p: Precision) -> String {
    match act {
        // 0.5·x·(1 + erf(x/√2)).
        Activation::Gelu => {
            let sqrt2 = constant(g, &format!("/{name}/sqrt2"), std::f32::consts::SQRT_2, p);
            let one = constant(g, &format!("/{name}/one"), 1.0, p);
            let half = constant(g, &format!("/{name}/half"), 0.5, p);
            let d = g.op("Div", &format!("/{name}/Div"), &[x, &sqrt2], vec![]);
            let erf = g.op("Erf", &format!("/{name}/Erf"), &[&d], vec![]);
            let p = g.op("Add", &format!("/{name}/Add"), &[&erf, &one], vec![]);
            let m = g.op("Mul", &format!("/{name}/Mul"), &[x, &p], vec![]);
            g.op("Mul", &format!("/{name}/Mul_half"), &[&m, &half], vec![])
        }
        // 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))).
        Activation::GeluNew => {
            let c = constant(g, &format!("/{name}/sqrt_2_over_pi"), (2.0f32 / std::f32::consts::PI).sqrt(), p);
            let k = constant(g, &format!("/{name}/k"), 0.044715, p);
            let three = constant(g, &format!("/{name}/three"), 3.0, p);
            let one = constant(g, &format!("/{name}/one"), 1.0, p);
            let half = constant(g, &format!("/{name}/half"), 0.5, p);
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

/// One encoder layer in plain ONNX ops (int8: the six linear layers as
/// `DynamicQuantizeMatMul`; everything else float32).
fn layer_plain(g: &mut Graph, i: usize, layer: &BertLayer, x: &str, mask_bias: &str, s: &LayerShape) -> Result<String> {
    let pre = format!("{}.encoder.layer.{i}", s.prefix);
    let ctx = attention_plain(g, &pre, layer, x, mask_bias, s.heads, s.p)?;
    let act = |g: &mut Graph, x: &str| activation(g, &format!("{pre}/intermediate/act"), s.act, x, s.p);
    layer_tail(g, &pre, layer, &ctx, x, s, "Add", act)
}

/// The rest of a layer after its attention `ctx`, in plain ops: attention output dense,
/// residual, LayerNorm; intermediate dense, `act`, output dense, residual, LayerNorm. Each
/// dense layer is one product with its bias ([`dense`]); `residual` is the op that adds the
/// residual (`Add`, or `Sum` where ONNX Runtime must not fuse it: [`int8_layer_tail`]).
#[allow(clippy::too_many_arguments)]
fn layer_tail(
    g: &mut Graph,
    pre: &str,
    layer: &BertLayer,
    ctx: &str,
    x: &str,
    s: &LayerShape,
    residual: &str,
    act: impl Fn(&mut Graph, &str) -> String,
) -> Result<String> {
    let (p, eps) = (s.p, s.eps);
    let out = &layer.attention.output;
    let a = dense(g, &format!("{pre}.attention.output.dense"), &out.dense, ctx, p)?;
    let a = g.op(residual, &format!("/{pre}/attention/output/residual"), &[&a, x], vec![]);
    let a = layer_norm(g, &format!("{pre}.attention.output.LayerNorm"), &out.layer_norm, &a, eps, p)?;
    let inter = dense(g, &format!("{pre}.intermediate.dense"), &layer.intermediate.dense, &a, p)?;
    let inter = act(g, &inter);
    let o = dense(g, &format!("{pre}.output.dense"), &layer.output.dense, &inter, p)?;
    let o = g.op(residual, &format!("/{pre}/output/residual"), &[&o, &a], vec![]);
    layer_norm(g, &format!("{pre}.output.LayerNorm"), &layer.output.layer_norm, &o, eps, p)
}

/// Self-attention in plain ops: `[b, s, h]` in, the merged heads' context `[b, s, h]` out.
/// The two products of activations (q·kᵀ, probabilities·v) stay in float (fp16 for `--fp16`):
/// quantising both sides at run time would cost more than it saves at these sizes. For fp16 the
/// scores are cast to float32 for the scale, the mask and the softmax.
fn attention_plain(
    g: &mut Graph,
    pre: &str,
    layer: &BertLayer,
    x: &str,
    mask_bias: &str,
    heads: usize,
    p: Precision,
) -> Result<String> {
    let hidden = layer.attention.self_attention.query.weight.dim(0)?;
    let head_dim = hidden / heads;
    // Self-attention: project, split heads `[b, s, h] → [b, heads, s, d]`.
    let split = g.i64_init(&format!("/{pre}/attention/heads_shape"), &[4], &[0, 0, heads as i64, head_dim as i64]);
    let project = |g: &mut Graph, which: &str, l: &Linear, perm: [i64; 4]| -> Result<String> {
        let y = dense(g, &format!("{pre}.attention.self.{which}"), l, x, p)?;
        let y = g.op("Reshape", &format!("/{pre}/attention/{which}/Reshape"), &[&y, &split], vec![]);
        Ok(g.op(
            "Transpose",
            &format!("/{pre}/attention/{which}/Transpose"),
            &[&y],
            vec![("perm", Attr::Ints(perm.to_vec()))],
        ))
    };
    let q = project(g, "query", &layer.attention.self_attention.query, [0, 2, 1, 3])?;
    // Keys come transposed, `[b, heads, d, s]`, ready for the product.
    let k = project(g, "key", &layer.attention.self_attention.key, [0, 2, 3, 1])?;
    let v = project(g, "value", &layer.attention.self_attention.value, [0, 2, 1, 3])?;
    Ok(attention_core(g, &format!("{pre}/attention"), &q, &k, &v, mask_bias, hidden, heads, p))
}

/// Scaled dot-product attention in plain ops, shared by every family's plain graph: `q`
/// `[b, heads, s, d]`, keys transposed `[b, heads, d, s]`, `v` `[b, heads, s, d]`;
/// `softmax(q·kᵀ/√d + mask_bias)·v` with the heads merged back to `[b, s, hidden]`. The two
/// products of activations stay in float (fp16 for `--fp16`, whose scores are cast to float32
/// for the scale, the mask and the softmax). Nodes are named under `/{scope}/`.
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_core(
    g: &mut Graph,
    scope: &str,
    q: &str,
    k_t: &str,
    v: &str,
    mask_bias: &str,
    hidden: usize,
    heads: usize,
    p: Precision,
) -> String {
    let head_dim = hidden / heads;
    let mut scores = g.op("MatMul", &format!("/{scope}/scores"), &[q, k_t], vec![]);
    if p == Precision::Fp16 {
        scores = cast(g, &format!("/{scope}/scores_to_float32"), &scores, data_type::FLOAT);
    }
    let sqrt_d = g.scalar(&format!("/{scope}/sqrt_head_dim"), (head_dim as f32).sqrt());
    let scores = g.op("Div", &format!("/{scope}/scale"), &[&scores, &sqrt_d], vec![]);
    let scores = g.op("Add", &format!("/{scope}/mask"), &[&scores, mask_bias], vec![]);
    let mut probs = g.op("Softmax", &format!("/{scope}/Softmax"), &[&scores], vec![("axis", Attr::Int(-1))]);
    if p == Precision::Fp16 {
        probs = cast(g, &format!("/{scope}/probs_to_float16"), &probs, data_type::FLOAT16);
    }
    let ctx = g.op("MatMul", &format!("/{scope}/context"), &[&probs, v], vec![]);
    // Merge heads `[b, heads, s, d] → [b, s, h]`.
    let ctx =
        g.op("Transpose", &format!("/{scope}/merge_heads"), &[&ctx], vec![("perm", Attr::Ints(vec![0, 2, 1, 3]))]);
    let merge = g.i64_init(&format!("/{scope}/merged_shape"), &[3], &[0, 0, hidden as i64]);
    g.op("Reshape", &format!("/{scope}/merge_heads_reshape"), &[&ctx, &merge], vec![])
}

/// One encoder layer in ONNX Runtime's fused ops: `Attention` (packed QKV weights, raw
/// int32 mask), `SkipLayerNormalization` (bias + residual + LayerNorm), `BiasGelu`. For int8
/// the attention is `QAttention` behind a `DynamicQuantizeLinear` of its input, and the rest
/// of the layer is [`int8_layer_tail`].
fn layer_fused(g: &mut Graph, i: usize, layer: &BertLayer, x: &str, mask_i32: &str, s: &LayerShape) -> Result<String> {
    let (p, eps) = (s.p, s.eps);
    let pre = format!("{}.encoder.layer.{i}", s.prefix);
    let att = &layer.attention.self_attention;
    // Packed `[3·hidden, hidden]` (HF layout): rows are Wq, then Wk, then Wv; transposed, row r
    // of the initializer is (Wqᵀ[r], Wkᵀ[r], Wvᵀ[r]).
    let qkv = Tensor::cat(&[&att.query.weight, &att.key.weight, &att.value.weight], 0)?;
    let qkv_b = Tensor::cat(&[&att.query.bias, &att.key.bias, &att.value.bias], 0)?;
    let attrs = || {
        vec![("num_heads", Attr::Int(s.heads as i64)), ("mask_filter_value", Attr::Float(crate::model::bert::MASKED))]
    };
    let ctx = if p == Precision::Int8 {
        let (q, scale, zero) = quantized(g, &format!("{pre}.attention.self.qkv"), &qkv)?;
        let b = weight(g, &format!("{pre}.attention.self.qkv.bias"), &qkv_b)?;
        let xq =
            g.op_in("", "DynamicQuantizeLinear", &format!("/{pre}/attention/DynamicQuantizeLinear"), &[x], vec![], 3);
        g.ms_op(
            "QAttention",
            &format!("/{pre}/attention/QAttention"),
            &[&xq[0], &q, &b, &xq[1], &scale, mask_i32, &xq[2], &zero],
            vec![("num_heads", Attr::Int(s.heads as i64))],
            1,
        )[0]
        .clone()
    } else {
        let qkv_t = qkv.t()?.contiguous()?;
        let w = param(g, &format!("{pre}.attention.self.qkv.weight"), &qkv_t, p)?;
        let b = param(g, &format!("{pre}.attention.self.qkv.bias"), &qkv_b, p)?;
        g.ms_op("Attention", &format!("/{pre}/attention/Attention"), &[x, &w, &b, mask_i32], attrs(), 1)[0].clone()
    };
    if p == Precision::Int8 {
        return int8_layer_tail(g, &pre, layer, &ctx, x, s);
    }
    let a = skip_layer_norm(
        g,
        &format!("{pre}.attention.output"),
        &layer.attention.output.dense,
        &layer.attention.output.layer_norm,
        &ctx,
        x,
        eps,
        p,
    )?;
    let inter = product(g, &format!("{pre}.intermediate.dense"), &layer.intermediate.dense.weight, None, &a, p)?;
    let bi = param(g, &format!("{pre}.intermediate.dense.bias"), &layer.intermediate.dense.bias, p)?;
    let inter = match s.act {
        Activation::Gelu => {
            g.ms_op("BiasGelu", &format!("/{pre}/intermediate/BiasGelu"), &[&inter, &bi], vec![], 1)[0].clone()
        }
        Activation::GeluNew => {
            g.ms_op("FastGelu", &format!("/{pre}/intermediate/FastGelu"), &[&inter, &bi], vec![], 1)[0].clone()
        }
        Activation::Relu => {
            let y = g.op("Add", &format!("/{pre}/intermediate/Add"), &[&inter, &bi], vec![]);
            g.op("Relu", &format!("/{pre}/intermediate/Relu"), &[&y], vec![])
        }
    };
    skip_layer_norm(g, &format!("{pre}.output"), &layer.output.dense, &layer.output.layer_norm, &inter, &a, eps, p)
}

/// The int8 fused layer after `QAttention`: the plain [`layer_tail`] (each product a
/// `DynamicQuantizeMatMul` that adds its own bias), with the residual a `Sum` and the
/// activation ONNX Runtime's bias-free `Gelu` / `FastGelu` (or `Relu`).
/// Not `SkipLayerNormalization` / `BiasGelu` as for fp32: once the products are int8, those
/// two CPU kernels (a scalar loop per row: sequential sums, a division per element) are a large
/// share of what is left. ONNX Runtime's profile of BERT-mini on 128 IMDb-shaped documents:
/// `SkipLayerNormalization` 0.25 s against 0.08 s for `Sum` + `LayerNormalization`, `BiasGelu`
/// 0.18 s against 0.10 s for `Gelu` (its bias is added by the product); the model 1.9× fp32's
/// throughput before, 2.1–2.2× after. `Sum`, not `Add`: ONNX Runtime's own optimiser fuses
/// `Add` + `LayerNormalization` back into `SkipLayerNormalization`.
fn int8_layer_tail(g: &mut Graph, pre: &str, layer: &BertLayer, ctx: &str, x: &str, s: &LayerShape) -> Result<String> {
    let act = |g: &mut Graph, x: &str| match s.act {
        Activation::Gelu => g.ms_op("Gelu", &format!("/{pre}/intermediate/Gelu"), &[x], vec![], 1)[0].clone(),
        Activation::GeluNew => {
            g.ms_op("FastGelu", &format!("/{pre}/intermediate/FastGelu"), &[x], vec![], 1)[0].clone()
        }
        Activation::Relu => g.op("Relu", &format!("/{pre}/intermediate/Relu"), &[x], vec![]),
    };
    layer_tail(g, pre, layer, ctx, x, s, "Sum", act)
}

/// `LayerNorm(x @ Wᵀ + b + residual)` as a product + `SkipLayerNormalization` (which adds the
/// bias).
#[allow(clippy::too_many_arguments)]
fn skip_layer_norm(
    g: &mut Graph,
    name: &str,
    dense: &Linear,
    ln: &LayerNorm,
    x: &str,
    residual: &str,
    eps: f64,
    p: Precision,
) -> Result<String> {
    let y = product(g, &format!("{name}.dense"), &dense.weight, None, x, p)?;
    let b = param(g, &format!("{name}.dense.bias"), &dense.bias, p)?;
    let gamma = param(g, &format!("{name}.LayerNorm.weight"), &ln.weight, p)?;
    let beta = param(g, &format!("{name}.LayerNorm.bias"), &ln.bias, p)?;
    Ok(g.ms_op(
        "SkipLayerNormalization",
        &format!("/{name}/SkipLayerNormalization"),
        &[&y, residual, &gamma, &beta, &b],
        vec![("epsilon", Attr::Float(eps as f32))],
        1,
    )[0]
    .clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_channel_quantisation_is_symmetric_transposed_and_within_half_a_step() {
        // W is [out=3, in=4]: one channel of zeros, one with a single large weight.
        let w = [0.5, -1.0, 0.25, 0.0, /* */ 0.0, 0.0, 0.0, 0.0, /* */ 1e-3, -2e-3, 4.0, 3.0];
        let (q, s) = quantize_per_channel(&w, 3, 4);
        assert_eq!(s[1], 1.0, "a zero channel gets scale 1");
        assert!((s[0] - 1.0 / 63.0).abs() < 1e-9 && (s[2] - 4.0 / 63.0).abs() < 1e-9);
        for j in 0..3 {
            for i in 0..4 {
                let (wv, qv) = (w[j * 4 + i], q[i * 3 + j]);
                assert!(qv.unsigned_abs() as f32 <= INT8_WEIGHT_MAX);
                assert!((qv as f32 * s[j] - wv).abs() <= s[j] / 2.0 + 1e-7, "w[{j},{i}] = {wv}, q {qv}");
            }
        }
        // The largest weight of each channel maps to ±63 exactly.
        assert_eq!((q[3], q[2 * 3 + 2]), (-63, 63));
    }
}
