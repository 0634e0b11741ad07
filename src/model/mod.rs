//! BERT for training and inference: [`bert`] mirrors HF's module tree, [`config`] reads and
//! writes `config.json`, [`params`] maps checkpoint tensors to parameters. This file holds the
//! task heads and the checkpoint directory (HF layout) in and out.

pub mod bert;
pub mod config;
pub mod modernbert;
pub mod ops;
pub mod params;

use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::backprop::GradStore;
use candle_core::{Device, Module, Tensor, Var};

use bert::{linear_activation, Attention, BertModel, ForwardPass, Inputs, LayerNorm, Linear};
use config::{BertConfig, Family, Pooling};
use modernbert::{LayerInputs, ModernBertModel, ModernBertPredictionHead};
use params::{Init, ParamLoader, Params};

/// Which HF class the model is; with the family, decides the heads and `architectures` in
/// config.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// `BertForSequenceClassification`: pooler → dropout → `classifier`;
    /// `RobertaForSequenceClassification`: `<s>` → `classifier.dense` → tanh → `classifier.out_proj`.
    SequenceClassification,
    /// `BertForPreTraining`: MLM head (`cls.predictions`) + NSP (`cls.seq_relationship`).
    PreTraining,
    /// `BertForMaskedLM` / `RobertaForMaskedLM`: MLM head only (`cls.predictions` /
    /// `lm_head`), no pooler.
    MaskedLm,
}

impl ModelKind {
    /// HF's class name, for a `model_type`'s class prefix ([`BertConfig::class_prefix`]).
    pub fn architecture(self, class_prefix: &str) -> String {
        let class = match self {
            ModelKind::SequenceClassification => "ForSequenceClassification",
            ModelKind::PreTraining => "ForPreTraining",
            ModelKind::MaskedLm => "ForMaskedLM",
        };
        format!("{class_prefix}{class}")
    }
}

/// The MLM head: a transform of the hidden states, then the decoder tied to the word
/// embeddings plus its own bias.
pub struct MlmHead {
    pub transform: MlmTransform,
    /// `cls.predictions.bias`, `lm_head.bias`, `decoder.bias` (ModernBERT's `decoder_bias`).
    pub bias: Option<Tensor>,
}

/// `cls.predictions.transform` (BERT) or `lm_head` (RoBERTa, GELU always): dense, activation,
/// LayerNorm; ModernBERT's `head` ([`ModernBertPredictionHead`]).
pub enum MlmTransform {
    Bert { dense: Linear, layer_norm: LayerNorm, act: config::Activation },
    ModernBert(ModernBertPredictionHead),
}

impl MlmHead {
    fn load(p: &mut ParamLoader, c: &BertConfig) -> Result<MlmHead> {
        let (dense, norm, bias, act) = match c.family() {
            Family::Bert => (
                "cls.predictions.transform.dense",
                "cls.predictions.transform.LayerNorm",
                "cls.predictions.bias",
                c.hidden_act,
            ),
            Family::Roberta => ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias", config::Activation::Gelu),
            Family::ModernBert => {
                let transform = MlmTransform::ModernBert(ModernBertPredictionHead::load(p, c)?);
                let bias = if c.modern()?.decoder_bias {
                    Some(p.get("decoder.bias", &[c.vocab_size], Init::Zeros)?)
                } else {
                    None
                };
                return Ok(MlmHead { transform, bias });
            }
        };
        Ok(MlmHead {
            transform: MlmTransform::Bert {
                dense: Linear::load(p, dense, c.hidden_size, c.hidden_size, c.initializer_range)?,
                layer_norm: LayerNorm::load(p, norm, c.hidden_size, c.layer_norm_eps)?,
                act,
            },
            bias: Some(p.get(bias, &[c.vocab_size], Init::Zeros)?),
        })
    }

    /// Vocabulary logits for hidden states `[n, hidden]`.
    pub fn forward(
        &self,
        hidden: &Tensor,
        word_embeddings: &Tensor,
        mode: &ForwardPass,
    ) -> candle_core::Result<Tensor> {
        let t = match &self.transform {
            MlmTransform::Bert { dense, layer_norm, act } => {
                layer_norm.forward(&linear_activation(dense, *act, hidden, mode)?)?
            }
            MlmTransform::ModernBert(head) => head.forward(hidden, mode)?,
        };
        let logits = mode.mm(&t, &word_embeddings.t()?)?;
        match &self.bias {
            Some(b) => logits.broadcast_add(b),
            None => Ok(logits),
        }
    }
}

/// A family's encoder: BERT's module tree (BERT, RoBERTa) or ModernBERT's.
pub enum Encoder {
    Bert(BertModel),
    ModernBert(ModernBertModel),
}

/// What every layer of a batch shares: BERT's mask; ModernBERT's masks and rotary tables.
enum LayerContext {
    Bert(Attention),
    ModernBert(LayerInputs),
}

impl Encoder {
    /// The word embedding table (the MLM decoder's tied weight).
    pub fn word_embeddings(&self) -> &Tensor {
        match self {
            Encoder::Bert(b) => &b.embeddings.word_embeddings,
            Encoder::ModernBert(m) => &m.embeddings.tok_embeddings,
        }
    }

    /// Last hidden states `[batch, seq, hidden]`.
    pub fn forward(&self, inputs: &Inputs, mode: &mut ForwardPass) -> Result<Tensor> {
        Ok(match self {
            Encoder::Bert(b) => b.forward(inputs, mode)?,
            Encoder::ModernBert(m) => m.forward(inputs, mode)?,
        })
    }

    fn layer_count(&self) -> usize {
        match self {
            Encoder::Bert(b) => b.layers.len(),
            Encoder::ModernBert(m) => m.layers.len(),
        }
    }

    fn context(&self, inputs: &Inputs) -> Result<LayerContext> {
        Ok(match self {
            Encoder::Bert(_) => LayerContext::Bert(Attention::of(inputs)),
            Encoder::ModernBert(m) => LayerContext::ModernBert(m.layer_inputs(inputs)?),
        })
    }

    fn embed(&self, inputs: &Inputs, mode: &mut ForwardPass) -> Result<Tensor> {
        Ok(match self {
            Encoder::Bert(b) => b.embeddings.forward(inputs, mode)?,
            Encoder::ModernBert(m) => m.embeddings.forward(&inputs.input_ids, mode)?,
        })
    }

    fn layer(&self, i: usize, x: &Tensor, context: &LayerContext, mode: &mut ForwardPass) -> Result<Tensor> {
        Ok(match (self, context) {
            (Encoder::Bert(b), LayerContext::Bert(at)) => b.layers[i].forward(x, at, mode)?,
            (Encoder::ModernBert(m), LayerContext::ModernBert(at)) => m.layers[i].forward(x, at, mode)?,
            _ => unreachable!("a context is made by its own encoder"),
        })
    }

    /// What follows the last layer: ModernBERT's `final_norm`; nothing for BERT.
    fn finish(&self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Encoder::Bert(_) => x.clone(),
            Encoder::ModernBert(m) => m.final_norm.forward(x)?,
        })
    }

    /// The embedding tables whose padding row gets no gradient, as with HF's
    /// `nn.Embedding(padding_idx=…)`: the word table, and RoBERTa's position table.
    fn padded_tables(&self, prefix: &str) -> Vec<String> {
        match self {
            Encoder::Bert(b) => {
                let mut names = vec![format!("{prefix}.embeddings.word_embeddings.weight")];
                if b.embeddings.padding_idx.is_some() {
                    names.push(format!("{prefix}.embeddings.position_embeddings.weight"));
                }
                names
            }
            Encoder::ModernBert(_) => vec![format!("{prefix}.embeddings.tok_embeddings.weight")],
        }
    }

    /// `tanh(pooler(hidden[:, 0]))` where there is a pooler, else `hidden[:, 0]`.
    fn pool(&self, hidden: &Tensor, inputs: &Inputs, mode: &ForwardPass) -> Result<Tensor> {
        Ok(match self {
            Encoder::Bert(b) => b.pool(hidden, inputs, mode)?,
            Encoder::ModernBert(_) => bert::first_token(hidden, inputs)?,
        })
    }
}

pub enum Head {
    Classifier {
        classifier: Linear,
        dropout: f64,
    },
    /// HF's `RobertaClassificationHead`: dropout → `dense` → tanh → dropout → `out_proj` on the
    /// first token's hidden state (RoBERTa has no pooler).
    RobertaClassifier {
        dense: Linear,
        out_proj: Linear,
        dropout: f64,
    },
    /// HF's `ModernBertForSequenceClassification`: pool (`cls` or masked `mean`) → `head`
    /// (dense, activation, norm) → dropout → `classifier`.
    ModernBertClassifier {
        head: ModernBertPredictionHead,
        classifier: Linear,
        dropout: f64,
        pooling: Pooling,
    },
    Pretraining {
        mlm: MlmHead,
        nsp: Option<Linear>,
    },
}

impl Head {
    /// Whether this is a sequence classifier's head (what `export` and `eval` take).
    pub fn is_classifier(&self) -> bool {
        !matches!(self, Head::Pretraining { .. })
    }
}

/// A BERT with its head (classifier, MLM, MLM + NSP) and the parameters behind both.
pub struct BertWithHead {
    pub kind: ModelKind,
    pub config: BertConfig,
    pub encoder: Encoder,
    pub head: Head,
    pub params: Params,
    /// Parameters that were not in the checkpoint (initialised), and checkpoint tensors the
    /// model did not use: both are shown to the user.
    pub initialised: Vec<String>,
    pub unexpected: Vec<String>,
}

/// What a forward pass produced.
pub struct Outputs {
    /// Classification logits `[batch, num_labels]`, or NSP logits `[batch, 2]`.
    pub logits: Option<Tensor>,
    /// MLM logits `[n, vocab]` for the gathered positions.
    pub mlm_logits: Option<Tensor>,
}

impl BertWithHead {
    /// Builds the model from `config`, taking tensors from `loader` where it has them.
    pub fn build(kind: ModelKind, config: &BertConfig, mut loader: ParamLoader) -> Result<BertWithHead> {
        config.check()?;
        let family = config.family();
        if family != Family::Bert && kind == ModelKind::PreTraining {
            bail!(
                "{} has no next-sentence head: pretrain it on MLM-only rows (`pretrain_sequences` with `nsp: false`)",
                family.name()
            );
        }
        let encoder = match family {
            Family::ModernBert => Encoder::ModernBert(ModernBertModel::load(&mut loader, config)?),
            _ => {
                let with_pooler = kind != ModelKind::MaskedLm && family == Family::Bert;
                Encoder::Bert(BertModel::load(&mut loader, config, with_pooler)?)
            }
        };
        let (h, r) = (config.hidden_size, config.initializer_range);
        let head = match kind {
            ModelKind::SequenceClassification if family == Family::ModernBert => {
                let m = config.modern()?;
                let head = ModernBertPredictionHead::load(&mut loader, config)?;
                // HF draws it from a normal of std hidden^-½ cut at ±2 std; the bias is zero.
                let init = Init::TruncatedNormal { std: (h as f64).powf(-0.5), cutoff: m.initializer_cutoff_factor };
                let classifier = Linear {
                    weight: loader.get("classifier.weight", &[config.num_labels(), h], init)?,
                    bias: loader.get("classifier.bias", &[config.num_labels()], Init::Zeros)?,
                };
                Head::ModernBertClassifier {
                    head,
                    classifier,
                    dropout: config.classifier_dropout.unwrap_or(0.0),
                    pooling: m.pooling(),
                }
            }
            ModelKind::SequenceClassification if family == Family::Roberta => Head::RobertaClassifier {
                dense: Linear::load(&mut loader, "classifier.dense", h, h, r)?,
                out_proj: Linear::load(&mut loader, "classifier.out_proj", h, config.num_labels(), r)?,
                dropout: config.classifier_dropout.unwrap_or(config.hidden_dropout_prob),
            },
            ModelKind::SequenceClassification => Head::Classifier {
                classifier: Linear::load(
                    &mut loader,
                    "classifier",
                    config.hidden_size,
                    config.num_labels(),
                    config.initializer_range,
                )?,
                dropout: config.classifier_dropout.unwrap_or(config.hidden_dropout_prob),
            },
            ModelKind::PreTraining | ModelKind::MaskedLm => Head::Pretraining {
                mlm: MlmHead::load(&mut loader, config)?,
                nsp: if kind == ModelKind::PreTraining {
                    Some(Linear::load(
                        &mut loader,
                        "cls.seq_relationship",
                        config.hidden_size,
                        2,
                        config.initializer_range,
                    )?)
                } else {
                    None
                },
            },
        };
        let unexpected = loader.unexpected();
        let mut config = config.clone();
        config.architectures = Some(vec![kind.architecture(config.class_prefix())]);
        Ok(BertWithHead {
            kind,
            config,
            encoder,
            head,
            initialised: loader.initialised.clone(),
            unexpected,
            params: loader.params,
        })
    }

    /// The same model for inference only: its weights as they are now, detached from the
    /// autograd graph without a copy ([`ParamLoader::frozen`]). A forward pass through it keeps
    /// no activation beyond its use, so an evaluation inside training costs what inference
    /// costs; the optimiser's later updates are not seen by it (make another).
    pub fn frozen(&self) -> Result<BertWithHead> {
        let device = match self.params.vars.first() {
            Some((_, v)) => v.as_tensor().device().clone(),
            None => Device::Cpu,
        };
        let mut frozen = BertWithHead::build(self.kind, &self.config, ParamLoader::frozen(&self.params, &device))?;
        frozen.initialised = self.initialised.clone();
        frozen.unexpected = self.unexpected.clone();
        Ok(frozen)
    }

    /// A fresh model, seeded.
    pub fn fresh(kind: ModelKind, config: &BertConfig, device: &Device, seed: u64) -> Result<BertWithHead> {
        BertWithHead::build(kind, config, ParamLoader::fresh(device, seed))
    }

    /// Loads an HF checkpoint folder (`config.json` + `model.safetensors`), ours or theirs.
    /// `config` replaces the folder's config (e.g. to set labels); heads the checkpoint lacks
    /// are initialised from `seed`.
    pub fn from_checkpoint(
        kind: ModelKind,
        dir: &Path,
        config: Option<&BertConfig>,
        device: &Device,
        seed: u64,
    ) -> Result<BertWithHead> {
        let weights = dir.join("model.safetensors");
        if !weights.exists() {
            if dir.join("pytorch_model.bin").exists() {
                bail!(
                    "'{}' has only pytorch_model.bin (pickle); bertpipe loads safetensors only: save it with `save_pretrained(..., safe_serialization=True)`",
                    dir.display()
                );
            }
            bail!("'{}' has no model.safetensors", weights.parent().unwrap_or(dir).display());
        }
        let config = match config {
            Some(c) => c.clone(),
            None => BertConfig::read(&dir.join("config.json"))?,
        };
        let loader = ParamLoader::from_safetensors(&weights, device, seed, config.family().prefix())?;
        BertWithHead::build(kind, &config, loader).with_context(|| format!("loading '{}'", dir.display()))
    }

    /// Forward pass. `mlm_positions`: flat indices into `batch × seq` whose MLM logits are
    /// wanted (pretraining heads only).
    pub fn forward(&self, inputs: &Inputs, mlm_positions: Option<&Tensor>, mode: &mut ForwardPass) -> Result<Outputs> {
        let hidden = self.encoder.forward(inputs, mode)?;
        self.head_forward(&hidden, inputs, mlm_positions, mode)
    }

    /// The head on the encoder's last hidden states `[batch, seq, hidden]`.
    fn head_forward(
        &self,
        hidden: &Tensor,
        inputs: &Inputs,
        mlm_positions: Option<&Tensor>,
        mode: &mut ForwardPass,
    ) -> Result<Outputs> {
        Ok(match &self.head {
            Head::Classifier { classifier, dropout } => {
                let pooled = self.encoder.pool(hidden, inputs, mode)?;
                let pooled = mode.row_dropout(&pooled, *dropout)?;
                Outputs { logits: Some(classifier.forward(&pooled, mode)?), mlm_logits: None }
            }
            Head::RobertaClassifier { dense, out_proj, dropout } => {
                // Without a pooler, `pool` is the first token's hidden state.
                let x = mode.row_dropout(&self.encoder.pool(hidden, inputs, mode)?, *dropout)?;
                let x = dense.forward(&x, mode)?.tanh()?;
                let x = mode.row_dropout(&x, *dropout)?;
                Outputs { logits: Some(out_proj.forward(&x, mode)?), mlm_logits: None }
            }
            Head::ModernBertClassifier { head, classifier, dropout, pooling } => {
                let pooled = match pooling {
                    Pooling::Cls => bert::first_token(hidden, inputs)?,
                    Pooling::Mean => {
                        let rows = match &inputs.packed {
                            Some(p) => p.to_rows(hidden)?,
                            None => hidden.clone(),
                        };
                        let keep = inputs.attention_mask.unsqueeze(2)?;
                        let sum = rows.broadcast_mul(&keep)?.sum(1)?;
                        sum.broadcast_div(&keep.sum(1)?)?
                    }
                };
                let x = mode.row_dropout(&head.forward(&pooled, mode)?, *dropout)?;
                Outputs { logits: Some(classifier.forward(&x, mode)?), mlm_logits: None }
            }
            Head::Pretraining { mlm, nsp } => {
                let mlm_logits = match mlm_positions {
                    Some(pos) => {
                        let (b, s, h) = hidden.dims3()?;
                        let picked = hidden.reshape((b * s, h))?.index_select(pos, 0)?;
                        Some(mlm.forward(&picked, self.encoder.word_embeddings(), mode)?)
                    }
                    None => None,
                };
                let logits = match nsp {
                    Some(nsp) => Some(nsp.forward(&self.encoder.pool(hidden, inputs, mode)?, mode)?),
                    None => None,
                };
                Outputs { logits, mlm_logits }
            }
        })
    }

    /// Forward and backward with gradient checkpointing (HF's `gradient_checkpointing`): the
    /// forward pass runs without a graph ([`BertWithHead::frozen`]) and keeps only each
    /// layer's input (`batch × seq × hidden`) and the dropout stream where the layer starts;
    /// the backward pass then goes one segment at a time, last first — the head and `loss_of`
    /// on the last hidden states, each layer recomputed from its saved input with the same
    /// dropout masks, the embeddings — handing the gradient of each segment's input down to
    /// the one below (`Σ y·∂L/∂y` differentiated gives exactly `∂L/∂y` upstream). Peak
    /// activation memory is one layer's instead of all of them, for about one more forward
    /// pass of compute. The gradients are those of a plain backward (up to summation order;
    /// the tied MLM decoder gets its two parts summed).
    pub fn backward_checkpointed(
        &self,
        inputs: &Inputs,
        mlm_positions: Option<&Tensor>,
        mode: &mut ForwardPass,
        loss_of: impl FnOnce(&Outputs) -> Result<Tensor>,
    ) -> Result<GradStore> {
        let frozen = self.frozen()?;
        mode.for_inputs(inputs);
        // Masks and rotary tables are constants of the batch: made once, used by both passes.
        let context = self.encoder.context(inputs)?;
        let embeddings_mode = mode.clone();
        let mut x = frozen.encoder.embed(inputs, mode)?;
        let layers = frozen.encoder.layer_count();
        let mut saved = Vec::with_capacity(layers);
        for i in 0..layers {
            saved.push((x.clone(), mode.clone()));
            x = frozen.encoder.layer(i, &x, &context, mode)?;
        }
        drop(frozen);
        let top = Var::from_tensor(&x)?;
        drop(x);
        let hidden = self.encoder.finish(top.as_tensor())?;
        let loss = loss_of(&self.head_forward(&hidden, inputs, mlm_positions, mode)?)?;
        drop(hidden);
        let mut grads = backward(&loss)?;
        drop(loss);
        let mut upstream = grads.remove(top.as_tensor()).context("no gradient reached the encoder's output")?;
        for (i, (input, mut layer_mode)) in saved.into_iter().enumerate().rev() {
            let input = Var::from_tensor(&input)?;
            let y = self.encoder.layer(i, input.as_tensor(), &context, &mut layer_mode)?;
            let mut g = backward(&(y * &upstream)?.sum_all()?)?;
            upstream = g.remove(input.as_tensor()).context("no gradient reached a layer's input")?;
            grads.extend(g)?;
        }
        let x0 = self.encoder.embed(inputs, &mut embeddings_mode.clone())?;
        grads.extend(backward(&(x0 * upstream)?.sum_all()?)?)?;
        Ok(grads)
    }

    /// Gradients in parameter order (zeros where a parameter got none). The padding token's
    /// row of the word embeddings gets none, as with HF's `nn.Embedding(padding_idx=…)`.
    pub fn gradients(&self, grads: &GradStore) -> Result<Vec<Tensor>> {
        let mut out = Vec::with_capacity(self.params.vars.len());
        let padded_tables = self.encoder.padded_tables(self.config.family().prefix());
        for (name, var) in &self.params.vars {
            let mut g = match grads.get(var.as_tensor()) {
                Some(g) => g.to_dtype(candle_core::DType::F32)?,
                None => var.as_tensor().zeros_like()?,
            };
            let padded = padded_tables.contains(name);
            if padded {
                let pad = self.config.pad_token_id.unwrap_or(0);
                let (v, h) = g.dims2()?;
                if pad < v {
                    if g.device().is_cpu() && g.dtype() == candle_core::DType::F32 && g.is_contiguous() {
                        // In place: no copy of the whole vocabulary's gradient.
                        g.inplace_op1(&ops::ZeroRow { row: pad, width: h })?;
                    } else {
                        let zero = Tensor::zeros((1, h), g.dtype(), g.device())?;
                        g = g.slice_assign(&[pad..pad + 1, 0..h], &zero)?;
                    }
                }
            }
            out.push(g);
        }
        Ok(out)
    }

    /// Writes `config.json` and `model.safetensors` (HF names; the tied decoder weight is not
    /// stored, as `save_pretrained` does) into `dir`.
    pub fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("could not create '{}'", dir.display()))?;
        std::fs::write(dir.join("config.json"), self.config.to_json())?;
        let tensors = self.params.tensors();
        let mut meta = std::collections::HashMap::new();
        meta.insert("format".to_string(), "pt".to_string());
        let views: Vec<(String, Tensor)> = tensors.into_iter().collect();
        save_safetensors(&views, Some(meta), &dir.join("model.safetensors"))
    }
}

/// `loss.backward()`, its gradients cut from the graph that made them — every backward pass of
/// training goes through here. A gradient computed as `grad · xᵀ` records that product's
/// inputs for a second-order pass candle never takes, so a stored gradient would keep the
/// forward pass's activations (and their whole graph) alive for as long as it lives: through
/// the optimiser step, or — with checkpointing — through every later segment, which would keep
/// all the recomputed layers.
pub fn backward(loss: &Tensor) -> Result<GradStore> {
    let mut grads = loss.backward()?;
    let ids: Vec<_> = grads.get_ids().copied().collect();
    for id in ids {
        if let Some(g) = grads.get_id(id) {
            let g = g.detach();
            grads.insert_id(id, g);
        }
    }
    Ok(grads)
}

/// Writes tensors as safetensors with optional metadata (HF wants `format: pt`).
pub fn save_safetensors(
    tensors: &[(String, Tensor)],
    metadata: Option<std::collections::HashMap<String, String>>,
    path: &Path,
) -> Result<()> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, t)| {
            let values = t.to_dtype(candle_core::DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            Ok(values.iter().flat_map(|x| x.to_le_bytes()).collect())
        })
        .collect::<Result<_>>()?;
    let views: Vec<(&str, safetensors::tensor::TensorView)> = tensors
        .iter()
        .zip(&bytes)
        .map(|((n, t), b)| {
            Ok((n.as_str(), safetensors::tensor::TensorView::new(safetensors::Dtype::F32, t.dims().to_vec(), b)?))
        })
        .collect::<Result<_>>()?;
    safetensors::tensor::serialize_to_file(views, metadata, path)
        .with_context(|| format!("could not write '{}'", path.display()))?;
    // safetensors writes through a temporary file, made 0600; the weights are as readable as
    // every other file of the checkpoint (0666 less the umask).
    crate::contract::set_default_mode(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checkpoint weights are as readable as the rest of the checkpoint: safetensors wrote them
    /// through a 0600 temporary, so under umask 022 they were 0600 beside 0644 files.
    #[test]
    fn saved_weights_have_the_mode_of_any_file_written() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let t = Tensor::zeros((2, 3), candle_core::DType::F32, &Device::Cpu).unwrap();
        let weights = dir.path().join("model.safetensors");
        save_safetensors(&[("w".to_string(), t)], None, &weights).unwrap();
        let plain = dir.path().join("config.json");
        std::fs::write(&plain, "{}").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&weights), mode(&plain));
    }
    use candle_core::DType;

    /// Gradients and loss of one training step, plain or checkpointed, on a fixed batch with
    /// padding and dropout on (so the recomputed layers must replay the same masks).
    fn step(model: &BertWithHead, checkpointed: bool) -> (f32, Vec<Tensor>) {
        let d = Device::Cpu;
        let (b, s) = (3, 9);
        let ids: Vec<u32> = (0..b * s).map(|i| (i * 7 % 40 + 1) as u32).collect();
        let mut mask = vec![1u32; b * s];
        mask[s - 3..s].fill(0); // row 0 padded
        let inputs = Inputs::new(&ids, &vec![0; b * s], &mask, b, s, &d).unwrap();
        let positions = (model.kind != ModelKind::SequenceClassification)
            .then(|| Tensor::from_slice(&[1u32, 4, 10, 20, 25], 5, &d).unwrap());
        let loss_of = |out: &Outputs| -> Result<Tensor> {
            let (logits, labels) = match (&out.logits, &out.mlm_logits) {
                (Some(l), None) => (l.clone(), vec![1u32, 0, 1]),
                (_, Some(m)) => (m.clone(), vec![3u32, 9, 17, 2, 30]),
                _ => unreachable!(),
            };
            let target = Tensor::from_slice(&labels, labels.len(), &d)?;
            Ok(candle_nn::loss::cross_entropy(&logits, &target)?)
        };
        let mut mode = ForwardPass::train(5, 3, (0..b as u64).collect::<Vec<_>>());
        let mut loss = 0.0;
        let grads = if checkpointed {
            model
                .backward_checkpointed(&inputs, positions.as_ref(), &mut mode, |out| {
                    let l = loss_of(out)?;
                    loss = l.to_scalar::<f32>()?;
                    Ok(l)
                })
                .unwrap()
        } else {
            let l = loss_of(&model.forward(&inputs, positions.as_ref(), &mut mode).unwrap()).unwrap();
            loss = l.to_scalar::<f32>().unwrap();
            backward(&l).unwrap()
        };
        (loss, model.gradients(&grads).unwrap())
    }

    /// A padded batch of rows of lengths 9, 4 and 7 and the same batch padding-free, for a
    /// model of config `c`; the MLM positions (flat, padded) and the targets of the head. Row 0
    /// holds the padding id as a token (a literal `<pad>` in a text: RoBERTa's positions skip it).
    fn padded_and_padding_free(c: &BertConfig, blocks: bool) -> (Inputs, Inputs, Vec<u32>) {
        let d = Device::Cpu;
        let (lens, s) = ([9usize, 4, 7], 9);
        let pad = c.pad_token_id.unwrap_or(0) as u32;
        let (mut ids, mut types, mut mask) = (vec![pad; 3 * s], vec![0u32; 3 * s], vec![0u32; 3 * s]);
        for (r, &len) in lens.iter().enumerate() {
            for i in 0..len {
                // Ids past the special ones, never the padding id.
                ids[r * s + i] = 2 + ((r * 13 + i * 7) % (c.vocab_size - 3)) as u32;
                mask[r * s + i] = 1;
                if c.type_vocab_size > 1 && i >= len / 2 {
                    types[r * s + i] = 1;
                }
            }
        }
        ids[2] = pad;
        let mut padded = Inputs::new(&ids, &types, &mask, 3, s, &d).unwrap();
        if blocks {
            // Packed MLM rows: two documents in rows 0 and 2, attention kept in each.
            let segments = vec![vec![0, 5], vec![0], vec![0, 3]];
            padded = padded.with_block_diagonal(&segments, &mask, 3, s).unwrap();
        }
        let mut free = Inputs::new(&ids, &types, &mask, 3, s, &d).unwrap();
        if blocks {
            free = free.with_block_diagonal(&[vec![0, 5], vec![0], vec![0, 3]], &mask, 3, s).unwrap();
        }
        let free = free.into_packed(&ids, &types, &mask).unwrap();
        (padded, free, vec![1, 4, 10, 12, 20, 24])
    }

    /// Loss and gradients of one step on `inputs` (MLM positions in the padded layout are
    /// mapped to the batch's own, as the trainer's runner does).
    fn loss_and_gradients(
        model: &BertWithHead,
        inputs: &Inputs,
        padded_positions: &[u32],
        checkpointed: bool,
        compute: DType,
    ) -> (f32, Vec<Tensor>) {
        let d = Device::Cpu;
        let positions = (model.kind != ModelKind::SequenceClassification).then(|| {
            let at: Vec<u32> = padded_positions.iter().map(|&p| inputs.token_index(p)).collect();
            Tensor::from_vec(at, padded_positions.len(), &d).unwrap()
        });
        let loss_of = |out: &Outputs| -> Result<Tensor> {
            let mut loss = Tensor::zeros((), DType::F32, &d)?;
            if let Some(l) = &out.logits {
                let t = Tensor::from_slice(&[1u32, 0, 1], 3, &d)?;
                loss = (loss + candle_nn::loss::cross_entropy(l, &t)?)?;
            }
            if let Some(m) = &out.mlm_logits {
                let t = Tensor::from_slice(&[3u32, 9, 17, 2, 30, 11], 6, &d)?;
                loss = (loss + candle_nn::loss::cross_entropy(m, &t)?)?;
            }
            Ok(loss)
        };
        let mut mode = ForwardPass::train(5, 3, vec![40u64, 7, 19]).with_compute(compute);
        let mut loss = 0.0;
        let grads = if checkpointed {
            model
                .backward_checkpointed(inputs, positions.as_ref(), &mut mode, |out| {
                    let l = loss_of(out)?;
                    loss = l.to_scalar::<f32>()?;
                    Ok(l)
                })
                .unwrap()
        } else {
            let l = loss_of(&model.forward(inputs, positions.as_ref(), &mut mode).unwrap()).unwrap();
            loss = l.to_scalar::<f32>().unwrap();
            backward(&l).unwrap()
        };
        (loss, model.gradients(&grads).unwrap())
    }

    /// Every family and task, dropout off and on, plain and checkpointed, f32 and bf16: a
    /// padding-free batch gives the padded batch's loss and gradients (to 1e-4 of the largest
    /// gradient of each tensor; bf16 products to 1e-2), the dropout masks included — they are
    /// keyed by a token's position in its row, not in the stream.
    #[test]
    fn padding_free_batches_give_the_padded_loss_and_gradients() {
        let bert = |dropout: f64| {
            let mut c = BertConfig::new(48, 2, 32, 4, 64);
            c.set_hidden_dropout(dropout);
            c.set_attention_dropout(dropout);
            c
        };
        let roberta = |dropout: f64| {
            let mut c = bert(dropout);
            c.model_type = "roberta".into();
            c.pad_token_id = Some(1);
            c.type_vocab_size = 1;
            c
        };
        let modern = |dropout: f64, pooling: &str| {
            let mut c = bert(dropout);
            c.model_type = "modernbert".into();
            c.num_hidden_layers = 3;
            c.set_extra("local_attention", 4.into());
            c.set_extra("global_attn_every_n_layers", 2.into());
            c.set_extra("classifier_pooling", pooling.into());
            c.set_extra("embedding_dropout", dropout.into());
            c.set_extra("mlp_dropout", dropout.into());
            c.set_extra("classifier_dropout", dropout.into());
            c
        };
        for dropout in [0.0, 0.2] {
            let cases = [
                (ModelKind::SequenceClassification, bert(dropout), false),
                (ModelKind::PreTraining, bert(dropout), false),
                (ModelKind::PreTraining, bert(dropout), true),
                (ModelKind::SequenceClassification, roberta(dropout), false),
                (ModelKind::MaskedLm, roberta(dropout), false),
                (ModelKind::SequenceClassification, modern(dropout, "mean"), false),
                (ModelKind::SequenceClassification, modern(dropout, "cls"), false),
                (ModelKind::MaskedLm, modern(dropout, "cls"), true),
            ];
            for (kind, c, blocks) in cases {
                let model = BertWithHead::fresh(kind, &c, &Device::Cpu, 11).unwrap();
                let (padded, free, positions) = padded_and_padding_free(&c, blocks);
                for (checkpointed, compute, tol) in
                    [(false, DType::F32, 1e-4), (true, DType::F32, 1e-4), (false, DType::BF16, 1e-2)]
                {
                    let what = format!(
                        "{kind:?} {} dropout {dropout} blocks {blocks} checkpointed {checkpointed} {compute:?}",
                        c.model_type
                    );
                    let (want_loss, want) = loss_and_gradients(&model, &padded, &positions, false, compute);
                    let (loss, got) = loss_and_gradients(&model, &free, &positions, checkpointed, compute);
                    assert!(
                        (loss - want_loss).abs() <= tol as f32 * want_loss.abs().max(1.0),
                        "{what}: loss {loss} against the padded {want_loss}"
                    );
                    for ((name, _), (a, b)) in model.params.vars.iter().zip(want.iter().zip(&got)) {
                        let scale = a.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap().max(1e-6);
                        let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                        assert!(
                            diff <= tol as f32 * scale,
                            "{what} {name}: gradients differ by {diff} (scale {scale})"
                        );
                    }
                    // Not vacuous: gradients reach the parameters.
                    assert!(want.iter().any(|g| g.abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0));
                }
            }
        }
    }

    /// The stream's dropout keys each token by its row and its position in the row: the
    /// factors of a `[1, tokens, w]` stream are the padded `[rows, seq, w]` factors of the
    /// real tokens, whatever chunk a thread starts at.
    #[test]
    fn stream_dropout_drops_what_the_padded_batch_drops() {
        use super::ops::Dropout;
        let rows: std::sync::Arc<[u64]> = vec![3u64, 99, 5, 1000].into();
        let (lens, seq, w) = ([700usize, 1, 0, 333], 700, 48);
        let starts: Vec<u32> = std::iter::once(0)
            .chain(lens.iter().scan(0u32, |t, &l| {
                *t += l as u32;
                Some(*t)
            }))
            .collect();
        let tokens = *starts.last().unwrap() as usize;
        let padded = Dropout::new(77, 0.3, rows.clone()).factors(lens.len() * seq * w).unwrap();
        let stream = Dropout::new(77, 0.3, rows).in_stream(Some(starts.into())).factors(tokens * w).unwrap();
        let mut want = Vec::new();
        for (r, &len) in lens.iter().enumerate() {
            want.extend_from_slice(&padded[r * seq * w..(r * seq + len) * w]);
        }
        assert_eq!(stream, want);
        assert!(stream.contains(&0.0) && stream.iter().any(|&f| f > 1.0));
    }

    #[test]
    fn checkpointed_gradients_are_a_plain_backwards() {
        let mut modern = BertConfig::new(48, 3, 32, 4, 64);
        modern.model_type = "modernbert".into();
        modern.set_hidden_dropout(0.2);
        modern.set_attention_dropout(0.2);
        modern.set_extra("local_attention", 4.into());
        modern.set_extra("classifier_pooling", "mean".into());
        let cases = [
            (ModelKind::SequenceClassification, None),
            (ModelKind::PreTraining, None),
            (ModelKind::SequenceClassification, Some(modern.clone())),
            (ModelKind::MaskedLm, Some(modern)),
        ];
        for (kind, config) in cases {
            let c = config.unwrap_or_else(|| {
                let mut c = BertConfig::new(48, 3, 32, 4, 64);
                c.set_hidden_dropout(0.2);
                c.set_attention_dropout(0.2);
                c
            });
            let kind_name = format!("{kind:?} {}", c.model_type);
            let kind_name = kind_name.as_str();
            let model = BertWithHead::fresh(kind, &c, &Device::Cpu, 11).unwrap();
            let (plain_loss, plain) = step(&model, false);
            let (loss, grads) = step(&model, true);
            assert_eq!(loss, plain_loss, "{kind_name}: the same forward pass, the same dropout");
            for ((name, _), (a, b)) in model.params.vars.iter().zip(plain.iter().zip(&grads)) {
                let scale = a.abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap().max(1e-6);
                let diff = (a - b).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
                assert!(diff <= 1e-5 * scale, "{kind_name} {name}: gradients differ by {diff} (scale {scale})");
                assert_eq!(a.dtype(), DType::F32);
            }
            // Not vacuous: the step reaches every layer and, for pretraining, the tied decoder.
            let word = model.params.vars.iter().position(|(n, _)| n.ends_with("embeddings.weight")).unwrap();
            assert!(grads[word].abs().unwrap().sum_all().unwrap().to_scalar::<f32>().unwrap() > 0.0);
        }
    }
}
