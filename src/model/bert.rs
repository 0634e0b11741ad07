//! BERT in candle, one struct per module of HF's `modeling_bert.py`, so the tensor names of a
//! checkpoint read like this file: `bert.embeddings.*`, `bert.encoder.layer.N.attention.self.*`,
//! `…attention.output.*`, `…intermediate.dense`, `…output.*`, `bert.pooler.dense`.
//!
//! Every op here has a backward pass: the fused CPU kernels of [`super::ops`] bring their
//! own, and elsewhere LayerNorm and softmax are built from candle's elementwise ops and
//! reductions (candle-nn's fused `layer_norm` and `softmax_last_dim` have no backward, so
//! gradients would silently stop below them).

use candle_core::{DType, Device, Module, Result, Tensor};

use super::config::{Activation, BertConfig, Family};
use super::ops::{self, Dropout};
use super::params::{Init, ParamLoader};
use crate::rng::Rng;

/// The settings of one forward pass: training or inference, the dropout randomness and the
/// precision of the matrix products.
///
/// Dropout masks come from our own generator keyed by `(seed, step, site)` and, within a
/// site, by each batch row's key and the position in the row (see [`Dropout`]): the trainer
/// keys a row by its place in the split, so a row is dropped the same way whatever batch,
/// micro-batch or rank it lands in, and a run (and a resumed run) is repeatable on any device
/// and any number of ranks. A clone replays the same masks from where it was taken (gradient
/// checkpointing recomputes a layer with the masks it had).
#[derive(Clone)]
pub struct ForwardPass {
    pub train: bool,
    rng: Rng,
    /// The key of each batch row.
    rows: std::sync::Arc<[u64]>,
    /// The dtype the matrix products run in (see [`ForwardPass::mm`]); f32 unless set.
    pub compute: DType,
    /// A padding-free batch's row starts in its token stream (see [`Packed`]): the token
    /// dropout sites key each token by its position in its row, as in a padded batch.
    stream: Option<std::sync::Arc<[u32]>>,
}

impl ForwardPass {
    pub fn eval() -> ForwardPass {
        ForwardPass {
            train: false,
            rng: Rng(0),
            rows: std::sync::Arc::from(Vec::new()),
            compute: DType::F32,
            stream: None,
        }
    }

    /// Training at optimiser step `step` on a batch whose rows have these keys (the trainer's:
    /// each row's place in its split, unique within a step).
    pub fn train(seed: u64, step: u64, rows: impl Into<std::sync::Arc<[u64]>>) -> ForwardPass {
        ForwardPass {
            train: true,
            rng: Rng::for_key(seed, &[0x4452_4f50, step]),
            rows: rows.into(),
            compute: DType::F32,
            stream: None,
        }
    }

    /// Dropout sites for the layout of `inputs`: a padding-free batch's token stream, or
    /// padded rows. [`crate::model::BertWithHead`] sets it from the batch it runs.
    pub fn for_inputs(&mut self, inputs: &Inputs) {
        self.stream = inputs.packed.as_ref().map(|p| p.starts.clone());
    }

    /// Matrix products in `dtype` (bf16 on CUDA's tensor cores), everything else in f32.
    pub fn with_compute(mut self, dtype: DType) -> ForwardPass {
        self.compute = dtype;
        self
    }

    /// `a · b` in the compute dtype, as PyTorch's autocast runs `matmul`: the operands are
    /// rounded to it (the f32 master weights stay as they are), the product accumulates in
    /// f32 on the device, and the result comes back as f32, so LayerNorm, softmax, GELU,
    /// the residual stream and the loss stay in f32. Gradients flow back through the casts
    /// to the f32 parameters. In f32 this is a plain `matmul`.
    pub fn mm(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        if self.compute == DType::F32 {
            return a.matmul(b);
        }
        a.to_dtype(self.compute)?.matmul(&b.to_dtype(self.compute)?)?.to_dtype(DType::F32)
    }

    /// The dropout of the next site in forward order, or `None` when not training or `p`
    /// is 0. Each site gets its own key from the step's stream; which elements it drops is
    /// a hash of that key and the element's index (see [`Dropout`]).
    pub fn site(&mut self, p: f64) -> Option<Dropout> {
        self.row_site(p).map(|d| d.in_stream(self.stream.clone()))
    }

    /// A site whose tensors have the batch's rows as their leading axis (`[rows, …]`: the
    /// heads' pooled states, attention probabilities), in either layout.
    pub fn row_site(&mut self, p: f64) -> Option<Dropout> {
        (self.train && p > 0.0).then(|| Dropout::new(self.rng.next_u64(), p, self.rows.clone()))
    }

    /// Inverted dropout on token states (`[rows, seq, …]`, or a padding-free `[1, tokens, …]`):
    /// zero with probability `p`, scale the rest by 1/(1−p).
    pub fn dropout(&mut self, x: &Tensor, p: f64) -> Result<Tensor> {
        match self.site(p) {
            Some(d) => d.apply(x),
            None => Ok(x.clone()),
        }
    }

    /// Inverted dropout on one state per batch row (`[rows, hidden]`: the heads' input).
    pub fn row_dropout(&mut self, x: &Tensor, p: f64) -> Result<Tensor> {
        match self.row_site(p) {
            Some(d) => d.apply(x),
            None => Ok(x.clone()),
        }
    }
}

/// A tensor's dotted name, built the way HF's modules nest (`bert` → `encoder` → `layer` → `0`
/// → `attention` → `self` → `query` → `weight`): each module is handed its own name and names
/// its children from it, so the code's nesting is the checkpoint's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Name(String);

impl Name {
    pub fn new(name: &str) -> Name {
        Name(name.to_string())
    }

    /// `self.part`.
    pub fn join(&self, part: impl std::fmt::Display) -> Name {
        Name(format!("{}.{part}", self.0))
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `y = x Wᵀ + b`, with HF's `[out, in]` weight layout.
pub struct Linear {
    pub weight: Tensor,
    pub bias: Tensor,
}

impl Linear {
    pub fn load(p: &mut ParamLoader, name: &str, inp: usize, out: usize, std: f64) -> anyhow::Result<Linear> {
        let name = Name::new(name);
        Ok(Linear {
            weight: p.get(&name.join("weight"), &[out, inp], Init::Normal(std))?,
            bias: p.get(&name.join("bias"), &[out], Init::Zeros)?,
        })
    }
}

impl Linear {
    /// `x Wᵀ` without the bias, in `x`'s shape with the last axis `out`: the bias goes into
    /// a fused epilogue ([`ops::bias_gelu`], [`ops::bias_dropout_residual`]).
    pub fn matmul(&self, x: &Tensor, mode: &ForwardPass) -> Result<Tensor> {
        project(&self.weight, x, mode)
    }

    /// `x Wᵀ + b`.
    pub fn forward(&self, x: &Tensor, mode: &ForwardPass) -> Result<Tensor> {
        ops::bias_add(&self.matmul(x, mode)?, &self.bias)
    }
}

/// `x Wᵀ` for a weight `W` in HF's `[out, in]` layout, in `x`'s shape with the last axis `out`.
pub fn project(weight: &Tensor, x: &Tensor, mode: &ForwardPass) -> Result<Tensor> {
    let dims = x.dims();
    let inp = dims[dims.len() - 1];
    let rows = x.elem_count() / inp;
    let y = mode.mm(&x.reshape((rows, inp))?, &weight.t()?)?;
    let mut out = dims.to_vec();
    *out.last_mut().unwrap() = weight.dim(0)?;
    y.reshape(out)
}

pub struct LayerNorm {
    pub weight: Tensor,
    pub bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    pub fn new(weight: Tensor, bias: Tensor, eps: f64) -> LayerNorm {
        LayerNorm { weight, bias, eps }
    }

    pub fn load(p: &mut ParamLoader, name: &str, size: usize, eps: f64) -> anyhow::Result<LayerNorm> {
        let name = Name::new(name);
        Ok(LayerNorm {
            weight: p.get(&name.join("weight"), &[size], Init::Ones)?,
            bias: p.get(&name.join("bias"), &[size], Init::Zeros)?,
            eps,
        })
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let dtype = x.dtype();
        if dtype == DType::F32 {
            return ops::layer_norm(x, &self.weight, &self.bias, self.eps);
        }
        // Lower precisions: the statistics and the affine in f32, the result cast back.
        let f32 = |t: &Tensor| t.to_dtype(DType::F32);
        ops::layer_norm(&f32(x)?, &f32(&self.weight)?, &f32(&self.bias)?, self.eps)?.to_dtype(dtype)
    }
}

/// `act(x Wᵀ + b)`; exact GELU takes the bias in the same fused pass.
pub fn linear_activation(linear: &Linear, act: Activation, x: &Tensor, mode: &ForwardPass) -> Result<Tensor> {
    match act {
        Activation::Gelu => ops::bias_gelu(&linear.matmul(x, mode)?, &linear.bias),
        Activation::GeluNew => linear.forward(x, mode)?.gelu(),
        Activation::Relu => linear.forward(x, mode)?.relu(),
    }
}

pub struct BertEmbeddings {
    pub word_embeddings: Tensor,
    pub position_embeddings: Tensor,
    pub token_type_embeddings: Tensor,
    pub layer_norm: LayerNorm,
    /// RoBERTa: position ids count the non-padding tokens from `padding_idx + 1`, and padding
    /// gets `padding_idx` (HF's `create_position_ids_from_input_ids`); BERT: `0..seq`.
    pub padding_idx: Option<u32>,
    dropout: f64,
}

impl BertEmbeddings {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig) -> anyhow::Result<Self> {
        let std = Init::Normal(c.initializer_range);
        let pad = c.pad_token_id.unwrap_or(0);
        let word = name.join("word_embeddings").join("weight");
        let word_embeddings = p.get(&word, &[c.vocab_size, c.hidden_size], std)?;
        p.zero_row_if_initialised(&word, pad)?;
        let position = name.join("position_embeddings").join("weight");
        let position_embeddings = p.get(&position, &[c.max_position_embeddings, c.hidden_size], std)?;
        let padding_idx = (c.family() == Family::Roberta).then_some(pad as u32);
        if padding_idx.is_some() {
            // `nn.Embedding(padding_idx=…)`: HF zeroes that row of RoBERTa's positions too.
            p.zero_row_if_initialised(&position, pad)?;
        }
        Ok(BertEmbeddings {
            word_embeddings,
            position_embeddings,
            token_type_embeddings: p.get(
                &name.join("token_type_embeddings").join("weight"),
                &[c.type_vocab_size, c.hidden_size],
                std,
            )?,
            layer_norm: LayerNorm::load(p, &name.join("LayerNorm"), c.hidden_size, c.layer_norm_eps)?,
            padding_idx,
            dropout: c.hidden_dropout_prob,
        })
    }

    /// The batch's `input_ids` and `token_type_ids` (u32 `[batch, seq]`, or a padding-free
    /// `[1, tokens]` whose positions restart at each row).
    pub fn forward(&self, inputs: &Inputs, mode: &mut ForwardPass) -> Result<Tensor> {
        let (input_ids, token_type_ids) = (&inputs.input_ids, &inputs.token_type_ids);
        let (b, s) = input_ids.dims2()?;
        let hidden = self.word_embeddings.dim(1)?;
        let words = self.word_embeddings.embedding(&input_ids.flatten_all()?)?.reshape((b, s, hidden))?;
        let types = self.token_type_embeddings.embedding(&token_type_ids.flatten_all()?)?.reshape((b, s, hidden))?;
        let x = match (&inputs.packed, self.padding_idx) {
            (Some(packed), pad) => {
                // Each row's positions from 0 (BERT) or as RoBERTa's padded path numbers them.
                let ids = match pad {
                    None => packed.positions.clone(),
                    Some(pad) => packed.roberta_positions(pad),
                };
                let ids = Tensor::from_vec(ids, b * s, input_ids.device())?;
                let positions = self.position_embeddings.embedding(&ids)?.reshape((b, s, hidden))?;
                ((words + types)? + positions)?
            }
            (None, None) => (words + types)?.broadcast_add(&self.position_embeddings.narrow(0, 0, s)?)?,
            (None, Some(pad)) => {
                let ids = roberta_position_ids(input_ids, pad)?.flatten_all()?;
                let positions = self.position_embeddings.embedding(&ids)?.reshape((b, s, hidden))?;
                ((words + types)? + positions)?
            }
        };
        let x = self.layer_norm.forward(&x)?;
        mode.dropout(&x, self.dropout)
    }
}

/// RoBERTa's position ids `[batch, seq]` (u32) on the ids' own device, with no trip to the
/// host: `padding_idx + 1, + 2, …` over the tokens that are not padding, `padding_idx` on
/// padding — `cumsum(id ≠ pad) · (id ≠ pad) + pad`, HF's `create_position_ids_from_input_ids`.
/// (The cumulative sum runs in f32, exact for any row shorter than 2^24 tokens.)
pub fn roberta_position_ids(input_ids: &Tensor, pad: u32) -> Result<Tensor> {
    let real = input_ids.ne(pad)?.to_dtype(DType::F32)?;
    let count = (real.cumsum(1)? * &real)?;
    (count + pad as f64)?.to_dtype(DType::U32)
}

/// HF's `BertSelfAttention` (`attention.self`): the query, key and value projections and the
/// scaled dot-product attention over them.
pub struct BertSelfAttention {
    pub query: Linear,
    pub key: Linear,
    pub value: Linear,
    heads: usize,
    dropout: f64,
}

impl BertSelfAttention {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig) -> anyhow::Result<Self> {
        let (h, r) = (c.hidden_size, c.initializer_range);
        Ok(BertSelfAttention {
            query: Linear::load(p, &name.join("query"), h, h, r)?,
            key: Linear::load(p, &name.join("key"), h, h, r)?,
            value: Linear::load(p, &name.join("value"), h, h, r)?,
            heads: c.num_attention_heads,
            dropout: c.attention_probs_dropout_prob,
        })
    }

    /// `mask_bias`: additive, broadcastable to `[batch, heads, seq, seq]` (0 keep, −1e9 drop).
    /// A padding-free batch's projections are laid out as rows for the attention core and
    /// the context taken back into the stream (see [`Packed`]).
    fn forward(&self, x: &Tensor, at: &Attention, mode: &mut ForwardPass) -> Result<Tensor> {
        let d = x.dim(2)? / self.heads;
        // x·Wᵀ, then the bias added while splitting into [b, heads, s, d].
        let split = |l: &Linear| ops::split_heads(&at.to_rows(&l.matmul(x, mode)?)?, &l.bias, self.heads);
        let (q, k, v) = (split(&self.query)?, split(&self.key)?, split(&self.value)?);
        // dropout(softmax(q·kᵀ/√d + mask)), one fused kernel on the CPU.
        let drop = mode.row_site(self.dropout);
        let probs = ops::attention_softmax(&mode.mm(&q, &k.t()?)?, &at.mask_bias, 1.0 / (d as f64).sqrt(), drop)?;
        at.to_stream(&ops::merge_heads(&mode.mm(&probs, &v)?)?)
    }
}

/// `dense → dropout → LayerNorm(x + residual)`, in one fused epilogue: what HF's
/// `BertSelfOutput` and `BertOutput` both do, with different input widths.
fn dense_dropout_residual_norm(
    dense: &Linear,
    layer_norm: &LayerNorm,
    dropout: f64,
    x: &Tensor,
    residual: &Tensor,
    mode: &mut ForwardPass,
) -> Result<Tensor> {
    let drop = mode.site(dropout);
    let y = ops::bias_dropout_residual(&dense.matmul(x, mode)?, &dense.bias, residual, drop)?;
    layer_norm.forward(&y)
}

/// HF's `BertSelfOutput` (`attention.output`): the attention's output projection, dropout, and
/// LayerNorm with the layer's input.
pub struct BertSelfOutput {
    pub dense: Linear,
    pub layer_norm: LayerNorm,
    dropout: f64,
}

impl BertSelfOutput {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig) -> anyhow::Result<Self> {
        Ok(BertSelfOutput {
            dense: Linear::load(p, &name.join("dense"), c.hidden_size, c.hidden_size, c.initializer_range)?,
            layer_norm: LayerNorm::load(p, &name.join("LayerNorm"), c.hidden_size, c.layer_norm_eps)?,
            dropout: c.hidden_dropout_prob,
        })
    }

    fn forward(&self, x: &Tensor, residual: &Tensor, mode: &mut ForwardPass) -> Result<Tensor> {
        dense_dropout_residual_norm(&self.dense, &self.layer_norm, self.dropout, x, residual, mode)
    }
}

/// HF's `BertAttention` (`attention`): self-attention and its output.
pub struct BertAttention {
    /// `attention.self` (`self` is a keyword here).
    pub self_attention: BertSelfAttention,
    pub output: BertSelfOutput,
}

impl BertAttention {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig) -> anyhow::Result<Self> {
        Ok(BertAttention {
            self_attention: BertSelfAttention::load(p, &name.join("self"), c)?,
            output: BertSelfOutput::load(p, &name.join("output"), c)?,
        })
    }

    fn forward(&self, x: &Tensor, at: &Attention, mode: &mut ForwardPass) -> Result<Tensor> {
        let a = self.self_attention.forward(x, at, mode)?;
        self.output.forward(&a, x, mode)
    }
}

/// HF's `BertIntermediate` (`intermediate`): `act(dense(x))`, to the intermediate width.
pub struct BertIntermediate {
    pub dense: Linear,
    act: Activation,
}

impl BertIntermediate {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig) -> anyhow::Result<Self> {
        Ok(BertIntermediate {
            dense: Linear::load(p, &name.join("dense"), c.hidden_size, c.intermediate_size, c.initializer_range)?,
            act: c.hidden_act,
        })
    }
}

/// HF's `BertOutput` (`output`): back to the hidden width, dropout, LayerNorm with the
/// attention's output.
pub struct BertOutput {
    pub dense: Linear,
    pub layer_norm: LayerNorm,
    dropout: f64,
}

impl BertOutput {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig) -> anyhow::Result<Self> {
        Ok(BertOutput {
            dense: Linear::load(p, &name.join("dense"), c.intermediate_size, c.hidden_size, c.initializer_range)?,
            layer_norm: LayerNorm::load(p, &name.join("LayerNorm"), c.hidden_size, c.layer_norm_eps)?,
            dropout: c.hidden_dropout_prob,
        })
    }

    fn forward(&self, x: &Tensor, residual: &Tensor, mode: &mut ForwardPass) -> Result<Tensor> {
        dense_dropout_residual_norm(&self.dense, &self.layer_norm, self.dropout, x, residual, mode)
    }
}

/// HF's `BertLayer` (`encoder.layer.N`).
pub struct BertLayer {
    pub attention: BertAttention,
    pub intermediate: BertIntermediate,
    pub output: BertOutput,
}

impl BertLayer {
    fn load(p: &mut ParamLoader, name: &Name, c: &BertConfig) -> anyhow::Result<Self> {
        Ok(BertLayer {
            attention: BertAttention::load(p, &name.join("attention"), c)?,
            intermediate: BertIntermediate::load(p, &name.join("intermediate"), c)?,
            output: BertOutput::load(p, &name.join("output"), c)?,
        })
    }

    pub fn forward(&self, x: &Tensor, at: &Attention, mode: &mut ForwardPass) -> Result<Tensor> {
        let a = self.attention.forward(x, at, mode)?;
        let i = linear_activation(&self.intermediate.dense, self.intermediate.act, &a, mode)?;
        self.output.forward(&i, &a, mode)
    }
}

/// HF's `BertModel` (and `RobertaModel`, the same tree under `roberta.`): embeddings, encoder
/// and (optionally) the pooler.
pub struct BertModel {
    pub config: BertConfig,
    pub embeddings: BertEmbeddings,
    pub layers: Vec<BertLayer>,
    pub pooler: Option<Linear>,
}

impl BertModel {
    pub fn load(p: &mut ParamLoader, c: &BertConfig, with_pooler: bool) -> anyhow::Result<BertModel> {
        let name = Name::new(c.family().prefix());
        let embeddings = BertEmbeddings::load(p, &name.join("embeddings"), c)?;
        let layer = name.join("encoder").join("layer");
        let layers =
            (0..c.num_hidden_layers).map(|i| BertLayer::load(p, &layer.join(i), c)).collect::<anyhow::Result<_>>()?;
        let pooler = if with_pooler {
            Some(Linear::load(
                p,
                &name.join("pooler").join("dense"),
                c.hidden_size,
                c.hidden_size,
                c.initializer_range,
            )?)
        } else {
            None
        };
        Ok(BertModel { config: c.clone(), embeddings, layers, pooler })
    }

    /// Last hidden states `[batch, seq, hidden]` (a padding-free batch: `[1, tokens, hidden]`).
    pub fn forward(&self, batch: &Inputs, mode: &mut ForwardPass) -> Result<Tensor> {
        mode.for_inputs(batch);
        let at = Attention::of(batch);
        let mut x = self.embeddings.forward(batch, mode)?;
        for layer in &self.layers {
            x = layer.forward(&x, &at, mode)?;
        }
        Ok(x)
    }

    /// `tanh(dense(hidden[:, 0]))`, each row's first token (see [`first_token`]).
    pub fn pool(&self, hidden: &Tensor, inputs: &Inputs, mode: &ForwardPass) -> Result<Tensor> {
        let first = first_token(hidden, inputs)?;
        match &self.pooler {
            Some(p) => p.forward(&first, mode)?.tanh(),
            None => Ok(first),
        }
    }
}

/// `hidden[:, 0]`: each row's first token, `[batch, hidden]` (of a padding-free batch: the
/// token at each row's start).
pub fn first_token(hidden: &Tensor, inputs: &Inputs) -> Result<Tensor> {
    match &inputs.packed {
        Some(p) => hidden.squeeze(0)?.index_select(&p.firsts, 0),
        None => hidden.narrow(1, 0, 1)?.squeeze(1),
    }
}

/// One batch of model inputs on the device.
pub struct Inputs {
    /// u32 `[batch, seq]`, padded; padding-free: `[1, tokens]`, the rows one after another.
    pub input_ids: Tensor,
    pub token_type_ids: Tensor,
    /// 1.0 for a token, 0.0 for padding, f32 `[batch, seq]` (ModernBERT's mean pooling).
    pub attention_mask: Tensor,
    /// Additive attention bias, `[batch, 1, 1, seq]` or `[batch, 1, seq, seq]`: the padded
    /// layout the attention core runs in, padding-free batches included.
    pub mask_bias: Tensor,
    /// A padding-free batch's stream layout; `None` when padded.
    pub packed: Option<Packed>,
}

/// A padding-free batch (HF's `DataCollatorWithFlattening`, TRL's `padding_free`): the rows
/// are one stream of tokens `[1, tokens, …]`, and every position-wise part of the model —
/// embeddings, projections, MLP, norms, dropout, the MLM head — runs on real tokens only.
/// Attention stays within each row: the attention core gathers q, k and v into the padded
/// `[rows, heads, seq, d]` layout (`cu_seqlens` → rows, as varlen kernels index them), runs
/// the masked softmax there and scatters the context back. Positions restart at each row.
///
/// The gathers cost two index passes over `rows × seq × hidden` per layer; the padded part of
/// the attention core is `seq/hidden` of a layer's work at most (and the length grouping keeps
/// `seq` near every row's length), so what padding-free saves is the padding of everything else.
#[derive(Clone)]
pub struct Packed {
    /// `cu_seqlens`: row `r` is tokens `starts[r]..starts[r + 1]` of the stream.
    pub starts: std::sync::Arc<[u32]>,
    /// Each token's position in its row.
    pub positions: Vec<u32>,
    /// The stream's token ids (RoBERTa's positions depend on them).
    ids: Vec<u32>,
    pub rows: usize,
    /// The longest row: the attention core's padded length.
    pub seq: usize,
    /// u32 `[rows · seq]`: the stream token at each padded slot (padding points at token 0,
    /// masked out as a key and dropped as a query).
    gather: Tensor,
    /// u32 `[tokens]`: each token's padded slot.
    scatter: Tensor,
    /// u32 `[rows]`: each row's first token.
    firsts: Tensor,
}

impl Packed {
    /// RoBERTa's position ids, row by row as [`roberta_position_ids`] gives them in a padded
    /// batch (HF's `create_position_ids_from_input_ids`): `pad + 1, pad + 2, …` over the
    /// tokens that are not the padding id, and `pad` on one that is (a literal `<pad>` in a
    /// text), which the count then skips.
    pub fn roberta_positions(&self, pad: u32) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.ids.len());
        for row in self.starts.windows(2) {
            let mut count = 0;
            for &id in &self.ids[row[0] as usize..row[1] as usize] {
                if id == pad {
                    out.push(pad);
                } else {
                    count += 1;
                    out.push(pad + count);
                }
            }
        }
        out
    }

    /// Stream `[1, tokens, w]` → rows `[rows, seq, w]` (padding slots hold token 0).
    pub fn to_rows(&self, x: &Tensor) -> Result<Tensor> {
        let w = x.dim(candle_core::D::Minus1)?;
        x.reshape(((), w))?.index_select(&self.gather, 0)?.reshape((self.rows, self.seq, w))
    }

    /// Rows `[rows, seq, w]` → stream `[1, tokens, w]` (padding slots left behind).
    pub fn to_stream(&self, x: &Tensor) -> Result<Tensor> {
        let w = x.dim(candle_core::D::Minus1)?;
        let tokens = self.positions.len();
        x.reshape(((), w))?.index_select(&self.scatter, 0)?.reshape((1, tokens, w))
    }
}

/// What an attention layer needs of its batch: the additive mask, and how a padding-free
/// batch's stream maps to rows.
pub struct Attention {
    pub mask_bias: Tensor,
    pub packed: Option<Packed>,
}

impl Attention {
    pub fn of(inputs: &Inputs) -> Attention {
        Attention { mask_bias: inputs.mask_bias.clone(), packed: inputs.packed.clone() }
    }

    /// Token states as rows for the attention core (unchanged when padded).
    pub fn to_rows(&self, x: &Tensor) -> Result<Tensor> {
        match &self.packed {
            Some(p) => p.to_rows(x),
            None => Ok(x.clone()),
        }
    }

    /// The attention core's rows back as token states (unchanged when padded).
    pub fn to_stream(&self, x: &Tensor) -> Result<Tensor> {
        match &self.packed {
            Some(p) => p.to_stream(x),
            None => Ok(x.clone()),
        }
    }
}

/// Masked positions get −1e9 before the softmax: exp underflows to exactly 0, as with HF's
/// `finfo.min`, without the overflow risk of adding two huge negatives.
pub const MASKED: f32 = -1e9;

impl Inputs {
    /// From row-major `[batch, seq]` host arrays; `attention_mask` 1 = token, 0 = padding.
    pub fn new(
        input_ids: &[u32],
        token_type_ids: &[u32],
        attention_mask: &[u32],
        batch: usize,
        seq: usize,
        device: &Device,
    ) -> Result<Inputs> {
        let bias: Vec<f32> = attention_mask.iter().map(|&m| if m == 0 { MASKED } else { 0.0 }).collect();
        let keep: Vec<f32> = attention_mask.iter().map(|&m| if m == 0 { 0.0 } else { 1.0 }).collect();
        Ok(Inputs {
            input_ids: Tensor::from_slice(input_ids, (batch, seq), device)?,
            token_type_ids: Tensor::from_slice(token_type_ids, (batch, seq), device)?,
            attention_mask: Tensor::from_vec(keep, (batch, seq), device)?,
            mask_bias: Tensor::from_vec(bias, (batch, 1, 1, seq), device)?,
            packed: None,
        })
    }

    /// The same batch padding-free: the real tokens of each row (those with `attention_mask`
    /// 1, which must come first in the row) as one stream. Masks — padding, or the block
    /// diagonal of [`Inputs::with_block_diagonal`], applied before or after — stay in the
    /// padded layout the attention core uses.
    pub fn into_packed(mut self, input_ids: &[u32], token_type_ids: &[u32], attention_mask: &[u32]) -> Result<Inputs> {
        let (batch, seq) = self.attention_mask.dims2()?;
        let device = self.input_ids.device().clone();
        let mut starts = Vec::with_capacity(batch + 1);
        let (mut ids, mut types, mut positions) = (Vec::new(), Vec::new(), Vec::new());
        let (mut gather, mut scatter, mut firsts) = (vec![0u32; batch * seq], Vec::new(), Vec::with_capacity(batch));
        for r in 0..batch {
            let row = r * seq..(r + 1) * seq;
            let len = attention_mask[row.clone()].iter().take_while(|&&m| m != 0).count();
            if attention_mask[row.start + len..row.end].iter().any(|&m| m != 0) {
                candle_core::bail!("padding-free: row {r} has padding before its last token");
            }
            let start = ids.len() as u32;
            starts.push(start);
            firsts.push(start);
            for i in 0..len {
                gather[r * seq + i] = start + i as u32;
                scatter.push((r * seq + i) as u32);
                positions.push(i as u32);
            }
            ids.extend_from_slice(&input_ids[row.start..row.start + len]);
            types.extend_from_slice(&token_type_ids[row.start..row.start + len]);
        }
        let tokens = ids.len();
        starts.push(tokens as u32);
        self.input_ids = Tensor::from_slice(&ids, (1, tokens), &device)?;
        self.token_type_ids = Tensor::from_vec(types, (1, tokens), &device)?;
        self.packed = Some(Packed {
            starts: starts.into(),
            positions,
            ids,
            rows: batch,
            seq,
            gather: Tensor::from_vec(gather, batch * seq, &device)?,
            scatter: Tensor::from_vec(scatter, tokens, &device)?,
            firsts: Tensor::from_vec(firsts, batch, &device)?,
        });
        Ok(self)
    }

    /// The position of flat index `row · seq + i` of the padded batch in this batch's layout
    /// (the MLM positions' index into the hidden states): itself when padded.
    pub fn token_index(&self, padded: u32) -> u32 {
        match &self.packed {
            Some(p) => {
                let (r, i) = (padded as usize / p.seq, padded as usize % p.seq);
                p.starts[r] + i as u32
            }
            None => padded,
        }
    }

    /// Packed rows with attention kept inside each document: `segments[b]` holds the start
    /// of each document in row `b`; padding (`attention_mask` 0) is masked as usual.
    pub fn with_block_diagonal(
        mut self,
        segments: &[Vec<u32>],
        attention_mask: &[u32],
        batch: usize,
        seq: usize,
    ) -> Result<Inputs> {
        let mut bias = vec![MASKED; batch * seq * seq];
        for b in 0..batch {
            let mut doc = vec![0u32; seq];
            for (i, d) in doc.iter_mut().enumerate() {
                *d = segments[b].iter().filter(|&&s| s as usize <= i).count() as u32;
            }
            for i in 0..seq {
                for j in 0..seq {
                    if doc[i] == doc[j] && attention_mask[b * seq + j] != 0 {
                        bias[(b * seq + i) * seq + j] = 0.0;
                    }
                }
            }
        }
        self.mask_bias = Tensor::from_vec(bias, (batch, 1, seq, seq), self.input_ids.device())?;
        Ok(self)
    }
}
