//! ModernBERT in candle, one struct per module of HF's `modeling_modernbert.py`, named like its
//! tensors: `model.embeddings.{tok_embeddings, norm}`, `model.layers.N.{attn_norm, attn.Wqkv,
//! attn.Wo, mlp_norm, mlp.Wi, mlp.Wo}`, `model.final_norm`, and the heads' `head.{dense, norm}`,
//! `decoder.bias`, `classifier`.
//!
//! What it shares with BERT ([`super::bert`]): the attention core (the fused scaled, masked
//! softmax with dropout, the head merge), LayerNorm and the linear layers' products. What is
//! its own: rotary position embeddings on the queries and keys (no position table), a packed
//! `Wqkv`, pre-norm residual blocks (layer 0 has no `attn_norm`: the embeddings' norm is
//! it), a gated MLP (`act(Wi·x)[:I] · (Wi·x)[I:]`), layers that alternate global attention
//! with a local window (every `global_attn_every_n_layers`-th layer is global), and a final
//! norm. Linear layers and norms have no biases unless the config asks for them.
//!
//! HF's unpadded flash-attention path computes the same numbers as its padded SDPA/eager path.
//! Here a batch is padded (every row computed to the batch's longest), or padding-free
//! ([`Packed`]: everything but the attention core on real tokens only; rotary positions and
//! the local window are those of each row, as the core runs in the padded layout).

use candle_core::{DType, Device, Module, Result, Tensor, D};

use super::bert::{project, ForwardPass, Inputs, LayerNorm, Name, Packed, MASKED};
use super::config::{Activation, BertConfig, ModernBertSettings};
use super::ops;
use super::params::{Init, ParamLoader};

/// `nn.Linear` as ModernBERT configures it: `x Wᵀ`, plus `b` when the config has biases.
pub struct Dense {
    pub weight: Tensor,
    pub bias: Option<Tensor>,
}

impl Dense {
    fn load(
        p: &mut ParamLoader,
        name: &Name,
        inp: usize,
        out: usize,
        std: f64,
        bias: bool,
        cutoff: f64,
    ) -> anyhow::Result<Dense> {
        Ok(Dense {
            weight: p.get(&name.join("weight"), &[out, inp], Init::TruncatedNormal { std, cutoff })?,
            bias: if bias { Some(p.get(&name.join("bias"), &[out], Init::Zeros)?) } else { None },
        })
    }

    pub fn forward(&self, x: &Tensor, mode: &ForwardPass) -> Result<Tensor> {
        let y = project(&self.weight, x, mode)?;
        match &self.bias {
            Some(b) => ops::bias_add(&y, b),
            None => Ok(y),
        }
    }
}

/// HF's init of the layers that write into the residual stream (`Wo`s, the head's dense):
/// `initializer_range / √(2 · layers)`.
fn out_std(c: &BertConfig) -> f64 {
    c.initializer_range / (2.0 * c.num_hidden_layers as f64).sqrt()
}

/// `nn.LayerNorm(bias=norm_bias)`: without a bias, BERT's LayerNorm with a constant zero bias
/// (not a parameter, so not saved nor trained).
fn norm(p: &mut ParamLoader, name: &Name, c: &BertConfig, m: &ModernBertSettings) -> anyhow::Result<LayerNorm> {
    if m.norm_bias {
        return LayerNorm::load(p, name, c.hidden_size, m.norm_eps);
    }
    let weight = p.get(&name.join("weight"), &[c.hidden_size], Init::Ones)?;
    let bias = Tensor::zeros(c.hidden_size, DType::F32, p.device())?;
    Ok(LayerNorm::new(weight, bias, m.norm_eps))
}

fn activate(act: Activation, x: &Tensor) -> Result<Tensor> {
    match act {
        Activation::Gelu => x.gelu_erf(),
        Activation::GeluNew => x.gelu(),
        Activation::Relu => x.relu(),
    }
}

/// HF's `ModernBertEmbeddings` (`model.embeddings`): `norm(tok_embeddings[ids])`, dropout.
pub struct ModernBertEmbeddings {
    pub tok_embeddings: Tensor,
    pub norm: LayerNorm,
    dropout: f64,
}

impl ModernBertEmbeddings {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig, m: &ModernBertSettings) -> anyhow::Result<Self> {
        let table = name.join("tok_embeddings").join("weight");
        let init = Init::TruncatedNormal { std: c.initializer_range, cutoff: m.initializer_cutoff_factor };
        let tok_embeddings = p.get(&table, &[c.vocab_size, c.hidden_size], init)?;
        p.zero_row_if_initialised(&table, c.pad_token_id.unwrap_or(0))?;
        Ok(ModernBertEmbeddings {
            tok_embeddings,
            norm: norm(p, &name.join("norm"), c, m)?,
            dropout: m.embedding_dropout,
        })
    }

    pub fn forward(&self, input_ids: &Tensor, mode: &mut ForwardPass) -> Result<Tensor> {
        let (b, s) = input_ids.dims2()?;
        let hidden = self.tok_embeddings.dim(1)?;
        let x = self.tok_embeddings.embedding(&input_ids.flatten_all()?)?.reshape((b, s, hidden))?;
        mode.dropout(&self.norm.forward(&x)?, self.dropout)
    }
}

/// What a layer needs of its batch besides the hidden states: its additive attention mask and
/// its rotary `cos`/`sin` (`[seq, head_dim]`), which differ between global and local layers;
/// and a padding-free batch's layout.
pub struct Attend {
    pub mask_bias: Tensor,
    pub cos: Tensor,
    pub sin: Tensor,
    pub packed: Option<Packed>,
}

/// The batch's [`Attend`] for global and for local layers.
pub struct LayerInputs {
    pub global: Attend,
    pub local: Attend,
}

/// HF's `ModernBertAttention` (`attn`): packed `Wqkv`, rotary positions on q and k, the scaled
/// masked softmax, `Wo`, dropout. Fields are named as the tensors (`Wqkv`, `Wo`).
#[allow(non_snake_case)]
pub struct ModernBertAttention {
    pub Wqkv: Dense,
    pub Wo: Dense,
    heads: usize,
    dropout: f64,
}

impl ModernBertAttention {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig, m: &ModernBertSettings) -> anyhow::Result<Self> {
        let (h, r, cut) = (c.hidden_size, c.initializer_range, m.initializer_cutoff_factor);
        Ok(ModernBertAttention {
            Wqkv: Dense::load(p, &name.join("Wqkv"), h, 3 * h, r, m.attention_bias, cut)?,
            Wo: Dense::load(p, &name.join("Wo"), h, h, out_std(c), m.attention_bias, cut)?,
            heads: c.num_attention_heads,
            dropout: m.attention_dropout,
        })
    }

    pub fn forward(&self, x: &Tensor, at: &Attend, mode: &mut ForwardPass) -> Result<Tensor> {
        let qkv = self.Wqkv.forward(x, mode)?;
        // A padding-free stream's projections as the attention core's padded rows.
        let qkv = match &at.packed {
            Some(p) => p.to_rows(&qkv)?,
            None => qkv,
        };
        let (b, s, h3) = qkv.dims3()?;
        let d = h3 / 3 / self.heads;
        // `[b, s, 3·h]` viewed as `(3, heads, d)` per token: q, k, v as `[b, heads, s, d]`.
        let qkv = qkv.reshape((b, s, 3, self.heads, d))?.permute((2, 0, 3, 1, 4))?;
        let q = rotate(&qkv.get(0)?.contiguous()?, &at.cos, &at.sin)?;
        let k = rotate(&qkv.get(1)?.contiguous()?, &at.cos, &at.sin)?;
        let v = qkv.get(2)?.contiguous()?;
        let drop = mode.row_site(self.dropout);
        let probs = ops::attention_softmax(&mode.mm(&q, &k.t()?)?, &at.mask_bias, 1.0 / (d as f64).sqrt(), drop)?;
        let context = ops::merge_heads(&mode.mm(&probs, &v)?)?;
        let context = match &at.packed {
            Some(p) => p.to_stream(&context)?,
            None => context,
        };
        let y = self.Wo.forward(&context, mode)?;
        mode.dropout(&y, self.dropout)
    }
}

/// `x·cos + rotate_half(x)·sin` (HF's `apply_rotary_pos_emb`), `x` `[b, heads, s, d]`,
/// `cos`/`sin` `[s, d]`; `rotate_half` is `(−x[d/2:], x[:d/2])`. Built from candle ops that
/// have a backward pass (candle-nn's fused `rope` has none).
pub fn rotate(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Result<Tensor> {
    let half = x.dim(D::Minus1)? / 2;
    let rotated = Tensor::cat(&[&x.narrow(D::Minus1, half, half)?.neg()?, &x.narrow(D::Minus1, 0, half)?], D::Minus1)?;
    x.broadcast_mul(cos)? + rotated.broadcast_mul(sin)?
}

/// HF's `ModernBertMLP` (`mlp`): `Wo(dropout(act(input) · gate))` with `input, gate =
/// Wi(x).chunk(2)`.
#[allow(non_snake_case)]
pub struct ModernBertMlp {
    pub Wi: Dense,
    pub Wo: Dense,
    act: Activation,
    dropout: f64,
}

impl ModernBertMlp {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig, m: &ModernBertSettings) -> anyhow::Result<Self> {
        let (h, i, r, cut) = (c.hidden_size, c.intermediate_size, c.initializer_range, m.initializer_cutoff_factor);
        Ok(ModernBertMlp {
            Wi: Dense::load(p, &name.join("Wi"), h, 2 * i, r, m.mlp_bias, cut)?,
            Wo: Dense::load(p, &name.join("Wo"), i, h, out_std(c), m.mlp_bias, cut)?,
            act: m.hidden_activation,
            dropout: m.mlp_dropout,
        })
    }

    pub fn forward(&self, x: &Tensor, mode: &mut ForwardPass) -> Result<Tensor> {
        let wide = self.Wi.forward(x, mode)?;
        let i = wide.dim(D::Minus1)? / 2;
        let gated = (activate(self.act, &wide.narrow(D::Minus1, 0, i)?)? * wide.narrow(D::Minus1, i, i)?)?;
        let gated = mode.dropout(&gated, self.dropout)?;
        self.Wo.forward(&gated, mode)
    }
}

/// HF's `ModernBertEncoderLayer` (`model.layers.N`): `x + attn(attn_norm(x))`, then
/// `x + mlp(mlp_norm(x))`. Layer 0's `attn_norm` is the identity.
pub struct ModernBertEncoderLayer {
    pub attn_norm: Option<LayerNorm>,
    pub attn: ModernBertAttention,
    pub mlp_norm: LayerNorm,
    pub mlp: ModernBertMlp,
    /// Global attention, or the local window.
    pub global: bool,
}

impl ModernBertEncoderLayer {
    fn load(
        p: &mut ParamLoader,
        name: &Name,
        i: usize,
        c: &BertConfig,
        m: &ModernBertSettings,
    ) -> anyhow::Result<Self> {
        Ok(ModernBertEncoderLayer {
            attn_norm: if i == 0 { None } else { Some(norm(p, &name.join("attn_norm"), c, m)?) },
            attn: ModernBertAttention::load(p, &name.join("attn"), c, m)?,
            mlp_norm: norm(p, &name.join("mlp_norm"), c, m)?,
            mlp: ModernBertMlp::load(p, &name.join("mlp"), c, m)?,
            global: m.is_global(i),
        })
    }

    pub fn forward(&self, x: &Tensor, inputs: &LayerInputs, mode: &mut ForwardPass) -> Result<Tensor> {
        let at = if self.global { &inputs.global } else { &inputs.local };
        let normed = match &self.attn_norm {
            Some(n) => n.forward(x)?,
            None => x.clone(),
        };
        let x = (x + self.attn.forward(&normed, at, mode)?)?;
        let m = self.mlp.forward(&self.mlp_norm.forward(&x)?, mode)?;
        x + m
    }
}

/// HF's `ModernBertModel` (`model`): embeddings, layers, `final_norm`; and the rotary
/// frequencies of global and local layers (buffers, not parameters).
pub struct ModernBertModel {
    pub embeddings: ModernBertEmbeddings,
    pub layers: Vec<ModernBertEncoderLayer>,
    pub final_norm: LayerNorm,
    pub settings: ModernBertSettings,
    inv_freq_global: Vec<f32>,
    inv_freq_local: Vec<f32>,
}

impl ModernBertModel {
    pub fn load(p: &mut ParamLoader, c: &BertConfig) -> anyhow::Result<ModernBertModel> {
        let m = c.modern()?;
        let name = Name::new(c.family().prefix());
        let embeddings = ModernBertEmbeddings::load(p, &name.join("embeddings"), c, &m)?;
        let layer = name.join("layers");
        let layers = (0..c.num_hidden_layers)
            .map(|i| ModernBertEncoderLayer::load(p, &layer.join(i), i, c, &m))
            .collect::<anyhow::Result<_>>()?;
        let final_norm = norm(p, &name.join("final_norm"), c, &m)?;
        let d = c.head_dim();
        Ok(ModernBertModel {
            embeddings,
            layers,
            final_norm,
            inv_freq_global: inverse_frequencies(m.rope_theta(true), d),
            inv_freq_local: inverse_frequencies(m.rope_theta(false), d),
            settings: m,
        })
    }

    /// The masks and rotary tables of a batch: global layers mask padding (or, for packed
    /// rows, other documents) only; local layers also every key more than half the window
    /// away (`|q − k| > local_attention / 2`).
    pub fn layer_inputs(&self, inputs: &Inputs) -> Result<LayerInputs> {
        let device = inputs.input_ids.device();
        // The attention core's length: the padded rows' (a padding-free batch's longest row).
        let s = inputs.attention_mask.dim(1)?;
        // `[1, 1, s, s]`: 0 within the window, −1e9 beyond it, made on the device.
        let position = Tensor::arange(0u32, s as u32, device)?.to_dtype(DType::F32)?;
        let distance = position.unsqueeze(1)?.broadcast_sub(&position.unsqueeze(0)?)?.abs()?;
        let far = distance.gt(self.settings.half_window() as f64)?.to_dtype(DType::F32)?;
        let window = (far * MASKED as f64)?.reshape((1, 1, s, s))?;
        // The smaller of the two: a key masked by both is masked once (−1e9), as HF's boolean
        // `and` of the two masks, so a padding row with no key left is uniform as in HF.
        let local_mask = inputs.mask_bias.broadcast_minimum(&window)?;
        let (cos_g, sin_g) = rotary_tables(&self.inv_freq_global, s, device)?;
        let (cos_l, sin_l) = rotary_tables(&self.inv_freq_local, s, device)?;
        Ok(LayerInputs {
            global: Attend {
                mask_bias: inputs.mask_bias.clone(),
                cos: cos_g,
                sin: sin_g,
                packed: inputs.packed.clone(),
            },
            local: Attend { mask_bias: local_mask, cos: cos_l, sin: sin_l, packed: inputs.packed.clone() },
        })
    }

    /// Last hidden states `[batch, seq, hidden]` (padding-free: `[1, tokens, hidden]`), after
    /// `final_norm`.
    pub fn forward(&self, inputs: &Inputs, mode: &mut ForwardPass) -> Result<Tensor> {
        mode.for_inputs(inputs);
        let at = self.layer_inputs(inputs)?;
        let mut x = self.embeddings.forward(&inputs.input_ids, mode)?;
        for layer in &self.layers {
            x = layer.forward(&x, &at, mode)?;
        }
        self.final_norm.forward(&x)
    }
}

/// `1 / θ^(2i/d)` for `i < d/2`, in f32 as PyTorch computes it (HF's
/// `compute_default_rope_parameters`).
pub fn inverse_frequencies(theta: f64, head_dim: usize) -> Vec<f32> {
    (0..head_dim).step_by(2).map(|i| 1.0f32 / (theta as f32).powf(i as f32 / head_dim as f32)).collect()
}

/// `cos` and `sin` of `position · inv_freq`, each `[seq, d]` with the `d/2` angles twice (HF's
/// `cat((freqs, freqs))`), positions `0..seq`. Rotary scores depend only on `q − k`, so packed
/// rows need no per-document restart.
pub fn rotary_tables(inv_freq: &[f32], seq: usize, device: &Device) -> Result<(Tensor, Tensor)> {
    let d = inv_freq.len() * 2;
    let mut cos = Vec::with_capacity(seq * d);
    let mut sin = Vec::with_capacity(seq * d);
    for pos in 0..seq {
        for _ in 0..2 {
            for f in inv_freq {
                let angle = pos as f32 * f;
                cos.push(angle.cos());
                sin.push(angle.sin());
            }
        }
    }
    Ok((Tensor::from_vec(cos, (seq, d), device)?, Tensor::from_vec(sin, (seq, d), device)?))
}

/// HF's `ModernBertPredictionHead` (`head`): `norm(act(dense(x)))`, before the classifier and
/// before the MLM decoder.
pub struct ModernBertPredictionHead {
    pub dense: Dense,
    pub norm: LayerNorm,
    act: Activation,
}

impl ModernBertPredictionHead {
    pub fn load(p: &mut ParamLoader, c: &BertConfig) -> anyhow::Result<Self> {
        let m = c.modern()?;
        let name = Name::new("head");
        Ok(ModernBertPredictionHead {
            dense: Dense::load(
                p,
                &name.join("dense"),
                c.hidden_size,
                c.hidden_size,
                out_std(c),
                m.classifier_bias,
                m.initializer_cutoff_factor,
            )?,
            norm: norm(p, &name.join("norm"), c, &m)?,
            act: m.classifier_activation,
        })
    }

    pub fn forward(&self, x: &Tensor, mode: &ForwardPass) -> Result<Tensor> {
        self.norm.forward(&activate(self.act, &self.dense.forward(x, mode)?)?)
    }
}
