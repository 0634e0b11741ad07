//! Fused CPU kernels with hand-written backward passes, for the ops where candle's graph of
//! small ops spends its time: LayerNorm (one pass forward, one backward, instead of ~8 ops and
//! their gradients); the attention softmax with its dropout; the bias epilogues of the
//! projections (`+ b` while splitting Q/K/V into heads, `gelu(y + b)`, `dropout(y + b) +
//! residual`), whose bias gradient is a parallel column sum; the head merge; and position-keyed
//! dropout. Other devices (and `BERTPIPE_UNFUSED=1`) take the graph of basic ops, which
//! backpropagates everywhere and drops the same elements.
//!
//! Each kernel is checked against that graph, values and gradients, in the tests below.

use candle_core::{CpuStorage, CustomOp2, CustomOp3, DType, Device, Layout, Result, Shape, Tensor, D};
use rayon::prelude::*;

/// Whether the fused CPU kernels (and the in-place optimiser) are on: yes, unless
/// `BERTPIPE_UNFUSED` is set (to measure the graph path). Read once per process.
pub fn kernels_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("BERTPIPE_UNFUSED").is_none())
}

/// Whether `t` lives where the fused kernels run.
fn fused(t: &Tensor) -> bool {
    matches!(t.device(), Device::Cpu) && t.dtype() == DType::F32 && kernels_enabled()
}

/// The contiguous f32 slice of a storage, or an error naming the op.
fn slice<'a>(s: &'a CpuStorage, l: &Layout, op: &str) -> Result<&'a [f32]> {
    let data = s.as_slice::<f32>()?;
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&data[a..b]),
        None => candle_core::bail!("{op}: input is not contiguous"),
    }
}

/// `n` zeros, written by the rayon workers: `vec![0.0; n]` would memset the whole output on
/// the calling thread (or fault its pages in there) before the parallel kernel starts.
fn zeroed(n: usize) -> Vec<f32> {
    let mut v = Vec::with_capacity(n);
    v.spare_capacity_mut().par_chunks_mut(1 << 16).for_each(|c| c.fill(std::mem::MaybeUninit::new(0.0)));
    // SAFETY: every element of the first n was written just above.
    unsafe { v.set_len(n) };
    v
}

/// Rows per rayon task: enough work to pay for the hand-off.
fn rows_per_task(width: usize) -> usize {
    (16384 / width.max(1)).max(1)
}

// ---------------------------------------------------------------------------------------------
// LayerNorm over the last axis: y = (x − mean) / sqrt(var + eps) · w + b.

pub fn layer_norm(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Result<Tensor> {
    if fused(x) {
        return x.contiguous()?.apply_op3(w, b, LayerNormOp { eps: eps as f32 });
    }
    let mean = x.mean_keepdim(D::Minus1)?;
    let centered = x.broadcast_sub(&mean)?;
    let var = centered.sqr()?.mean_keepdim(D::Minus1)?;
    let normed = centered.broadcast_div(&(var + eps)?.sqrt()?)?;
    normed.broadcast_mul(w)?.broadcast_add(b)
}

struct LayerNormOp {
    eps: f32,
}

/// Mean and 1/σ of one row, with the two-pass variance (as candle's graph computes it).
#[inline]
fn row_stats(row: &[f32], eps: f32) -> (f32, f32) {
    let n = row.len() as f32;
    let mean = row.iter().sum::<f32>() / n;
    let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

impl CustomOp3 for LayerNormOp {
    fn name(&self) -> &'static str {
        "bertpipe-layer-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w, b) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?, slice(s3, l3, self.name())?);
        let h = w.len();
        let mut y = zeroed(x.len());
        y.par_chunks_mut(h * rows_per_task(h)).zip(x.par_chunks(h * rows_per_task(h))).for_each(|(ys, xs)| {
            for (yr, xr) in ys.chunks_mut(h).zip(xs.chunks(h)) {
                let (mean, inv) = row_stats(xr, self.eps);
                for j in 0..h {
                    yr[j] = (xr[j] - mean) * inv * w[j] + b[j];
                }
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        x: &Tensor,
        w: &Tensor,
        _b: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let h = w.elem_count();
        let n = x.elem_count();
        // One pass gives dx, dw and db packed together: [dx (n) | dw (h) | db (h)].
        let packed = x.apply_op3_no_bwd(w, &grad.contiguous()?, &LayerNormBwd { eps: self.eps })?;
        let dx = packed.narrow(0, 0, n)?.reshape(x.shape())?;
        let dw = packed.narrow(0, n, h)?.reshape(w.shape())?;
        let db = packed.narrow(0, n + h, h)?.reshape(w.shape())?;
        Ok((Some(dx), Some(dw), Some(db)))
    }
}

struct LayerNormBwd {
    eps: f32,
}

impl CustomOp3 for LayerNormBwd {
    fn name(&self) -> &'static str {
        "bertpipe-layer-norm-bwd"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, w, g) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?, slice(s3, l3, self.name())?);
        let h = w.len();
        let n = x.len();
        let mut out = zeroed(n + 2 * h);
        let (dx, rest) = out.split_at_mut(n);
        let chunk = h * rows_per_task(h);
        // dx per row; dw, db summed per task, then across tasks.
        let partial: Vec<(Vec<f32>, Vec<f32>)> = dx
            .par_chunks_mut(chunk)
            .zip(x.par_chunks(chunk).zip(g.par_chunks(chunk)))
            .map(|(dxs, (xs, gs))| {
                let (mut dw, mut db) = (vec![0f32; h], vec![0f32; h]);
                for ((dxr, xr), gr) in dxs.chunks_mut(h).zip(xs.chunks(h)).zip(gs.chunks(h)) {
                    let (mean, inv) = row_stats(xr, self.eps);
                    // With x̂ = (x − mean)·inv and ĝ = g·w:
                    // dx = inv · (ĝ − mean(ĝ) − x̂ · mean(ĝ · x̂)).
                    let (mut sum_g, mut sum_gx) = (0f32, 0f32);
                    for j in 0..h {
                        let xh = (xr[j] - mean) * inv;
                        let gh = gr[j] * w[j];
                        sum_g += gh;
                        sum_gx += gh * xh;
                        dw[j] += gr[j] * xh;
                        db[j] += gr[j];
                    }
                    let (mg, mgx) = (sum_g / h as f32, sum_gx / h as f32);
                    for j in 0..h {
                        let xh = (xr[j] - mean) * inv;
                        dxr[j] = inv * (gr[j] * w[j] - mg - xh * mgx);
                    }
                }
                (dw, db)
            })
            .collect();
        let (dw, db) = rest.split_at_mut(h);
        for (pw, pb) in partial {
            for j in 0..h {
                dw[j] += pw[j];
                db[j] += pb[j];
            }
        }
        Ok((CpuStorage::F32(out), Shape::from(n + 2 * h)))
    }
}

// ---------------------------------------------------------------------------------------------
// Attention probabilities: dropout(softmax(scores · scale + mask)) over the last axis.

/// `scores` `[b, heads, q, k]`; `mask_bias` additive, `[b, 1, 1, k]` or `[b, 1, q, k]`;
/// `drop`: attention dropout on the probabilities, applied in the same pass.
pub fn attention_softmax(scores: &Tensor, mask_bias: &Tensor, scale: f64, drop: Option<Dropout>) -> Result<Tensor> {
    if fused(scores) && mask_bias.dtype() == DType::F32 {
        return scores.contiguous()?.apply_op2(&mask_bias.contiguous()?, SoftmaxOp { scale: scale as f32, drop });
    }
    let x = (scores * scale)?.broadcast_add(mask_bias)?;
    let max = x.max_keepdim(D::Minus1)?;
    let e = x.broadcast_sub(&max)?.exp()?;
    let probs = e.broadcast_div(&e.sum_keepdim(D::Minus1)?)?;
    match drop {
        Some(d) => d.apply_attention(&probs),
        None => Ok(probs),
    }
}

struct SoftmaxOp {
    scale: f32,
    drop: Option<Dropout>,
}

/// The mask rows for `[b, heads, q, k]` scores: row `r` of the scores uses `mask_row(r)`.
struct MaskRows<'a> {
    m: &'a [f32],
    heads: usize,
    q: usize,
    k: usize,
    per_query: bool,
}

impl<'a> MaskRows<'a> {
    fn new(m: &'a [f32], scores: &Layout, mask: &Layout) -> Result<MaskRows<'a>> {
        let (b, heads, q, k) = scores.shape().dims4()?;
        let mdims = mask.shape().dims4()?;
        if mdims.0 != b || mdims.1 != 1 || mdims.3 != k || (mdims.2 != 1 && mdims.2 != q) {
            candle_core::bail!("attention softmax: mask {:?} does not fit scores {:?}", mdims, (b, heads, q, k));
        }
        Ok(MaskRows { m, heads, q, k, per_query: mdims.2 == q })
    }

    /// Score row `row`'s dropout: its batch row's key and the position of its first element.
    #[inline]
    fn dropout_row(&self, d: &Dropout, row: usize) -> (u64, u64) {
        let (bi, head, qi) = (row / (self.heads * self.q), (row / self.q) % self.heads, row % self.q);
        (d.row_key(bi), Dropout::attention_position(head, qi, 0))
    }

    #[inline]
    fn row(&self, row: usize) -> &'a [f32] {
        let (bi, qi) = (row / (self.heads * self.q), row % self.q);
        let start = if self.per_query { (bi * self.q + qi) * self.k } else { bi * self.k };
        &self.m[start..start + self.k]
    }
}

/// `out = softmax(x · scale + mask)` for one row.
#[inline]
fn softmax_row(x: &[f32], mask: &[f32], scale: f32, out: &mut [f32]) {
    let mut max = f32::NEG_INFINITY;
    for j in 0..x.len() {
        out[j] = x[j] * scale + mask[j];
        max = max.max(out[j]);
    }
    let mut sum = 0f32;
    for v in out.iter_mut() {
        *v = (*v - max).exp();
        sum += *v;
    }
    for v in out.iter_mut() {
        *v /= sum;
    }
}

impl CustomOp2 for SoftmaxOp {
    fn name(&self) -> &'static str {
        "bertpipe-attention-softmax"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x, m) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?);
        let masks = MaskRows::new(m, l1, l2)?;
        let k = masks.k;
        let mut y = zeroed(x.len());
        let chunk = k * rows_per_task(k);
        y.par_chunks_mut(chunk).zip(x.par_chunks(chunk)).enumerate().for_each(|(t, (ys, xs))| {
            let first = t * rows_per_task(k);
            for (r, (yr, xr)) in ys.chunks_mut(k).zip(xs.chunks(k)).enumerate() {
                softmax_row(xr, masks.row(first + r), self.scale, yr);
                if let Some(d) = &self.drop {
                    let (key, base) = masks.dropout_row(d, first + r);
                    for (j, v) in yr.iter_mut().enumerate() {
                        *v *= d.hashed(key, base + j as u64);
                    }
                }
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, mask: &Tensor, y: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let bwd = SoftmaxBwd { scale: self.scale, drop: self.drop.clone() };
        let dx = match &self.drop {
            // y is the softmax itself.
            None => y.apply_op3_no_bwd(mask, &grad.contiguous()?, &bwd)?,
            // y has dropped entries: the softmax is recomputed from the scores.
            Some(_) => x.apply_op3_no_bwd(mask, &grad.contiguous()?, &bwd)?,
        };
        Ok((Some(dx), None))
    }
}

struct SoftmaxBwd {
    scale: f32,
    drop: Option<Dropout>,
}

impl CustomOp3 for SoftmaxBwd {
    fn name(&self) -> &'static str {
        "bertpipe-attention-softmax-bwd"
    }

    /// With p the softmax and ĝ = g · dropout factor: dx = scale · p · (ĝ − Σ ĝ·p).
    /// The first input is p itself without dropout, else the scores p is recomputed from.
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (a, m, g) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?, slice(s3, l3, self.name())?);
        let masks = MaskRows::new(m, l1, l2)?;
        let k = masks.k;
        let mut dx = zeroed(a.len());
        let chunk = k * rows_per_task(k);
        dx.par_chunks_mut(chunk).zip(a.par_chunks(chunk).zip(g.par_chunks(chunk))).enumerate().for_each(
            |(t, (ds, (a_s, gs)))| {
                let first = t * rows_per_task(k);
                let mut scratch = vec![0f32; k];
                let mut gh = vec![0f32; k];
                for (r, ((dr, ar), gr)) in ds.chunks_mut(k).zip(a_s.chunks(k)).zip(gs.chunks(k)).enumerate() {
                    let row = first + r;
                    let p: &[f32] = match &self.drop {
                        None => ar,
                        Some(_) => {
                            softmax_row(ar, masks.row(row), self.scale, &mut scratch);
                            &scratch
                        }
                    };
                    match &self.drop {
                        None => gh.copy_from_slice(gr),
                        Some(d) => {
                            let (key, base) = masks.dropout_row(d, row);
                            for j in 0..k {
                                gh[j] = gr[j] * d.hashed(key, base + j as u64);
                            }
                        }
                    }
                    let dot: f32 = p.iter().zip(&gh).map(|(a, b)| a * b).sum();
                    for j in 0..k {
                        dr[j] = self.scale * p[j] * (gh[j] - dot);
                    }
                }
            },
        );
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}

// ---------------------------------------------------------------------------------------------
// Dropout, keyed by row and position: whether an element is dropped is a hash of (site key,
// the key of the batch row it belongs to, its position within that row), so any thread
// computes any part of a mask, the backward pass recomputes it instead of storing it, the
// fused and graph paths drop the same elements — and a row gets the same mask whatever batch
// it is in, however that batch is padded, cut into micro-batches or shared among ranks.

/// Inverted dropout for one site: zero with probability p, scale the rest by 1/(1−p).
///
/// `rows` holds the key of each batch row (the trainer gives a row's place in its split), and
/// the tensors dropped out have those rows as their leading, outermost dimension: element `i`
/// of an `n`-element tensor is position `i mod (n / rows)` of row `i / (n / rows)`. For
/// `[batch, seq, hidden]` that position is `t·hidden + h`, which does not depend on how far
/// the batch is padded. Attention probabilities `[batch, heads, q, k]` are keyed by
/// `(head, q, k)` instead (see [`Dropout::attention_position`]), for the same reason.
///
/// A padding-free batch ([`Dropout::in_stream`]) is one stream of tokens `[1, tokens, width]`
/// with row `r` at tokens `starts[r]..starts[r + 1]`: token `t` of row `r` is keyed as
/// position `(t − starts[r])·width + j` of row `r`, the position it has in a padded batch, so
/// both layouts drop the same elements.
#[derive(Clone, Debug)]
pub struct Dropout {
    key: u64,
    /// Drop when the hash's high 32 bits are below this.
    threshold: u64,
    scale: f32,
    rows: std::sync::Arc<[u64]>,
    /// Padding-free: each row's first token in the stream, then the token count.
    stream: Option<std::sync::Arc<[u32]>>,
}

/// Where each batch row's elements lie in a tensor being dropped out.
#[derive(Clone, Copy)]
enum RowLayout<'a> {
    /// Every row `per_row` consecutive elements.
    Uniform(usize),
    /// A token stream: row `r` is elements `starts[r]·width..starts[r + 1]·width`.
    Stream { width: usize, starts: &'a [u32] },
}

impl RowLayout<'_> {
    /// The row of element `i`, its position in that row and the elements of the row after it.
    fn locate(self, i: usize) -> (usize, usize, usize) {
        match self {
            RowLayout::Uniform(per_row) => (i / per_row, i % per_row, per_row - i % per_row),
            RowLayout::Stream { width, starts } => {
                let t = (i / width) as u32;
                // The last row starting at or before t (rows are never empty past the end).
                let r = starts.partition_point(|&s| s <= t).saturating_sub(1);
                let first = starts[r] as usize * width;
                let end = starts.get(r + 1).map_or(usize::MAX, |&e| e as usize * width);
                (r, i - first, end - i)
            }
        }
    }

    /// Elements in row `r`.
    fn row_len(self, r: usize) -> usize {
        match self {
            RowLayout::Uniform(per_row) => per_row,
            RowLayout::Stream { width, starts } => match (starts.get(r), starts.get(r + 1)) {
                (Some(&a), Some(&b)) => (b - a) as usize * width,
                _ => usize::MAX,
            },
        }
    }
}

/// SplitMix64's finaliser.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Dropout {
    pub fn new(key: u64, p: f64, rows: std::sync::Arc<[u64]>) -> Dropout {
        Dropout {
            key,
            threshold: (p * (1u64 << 32) as f64) as u64,
            scale: (1.0 / (1.0 - p)) as f32,
            rows,
            stream: None,
        }
    }

    /// The same dropout on a padding-free token stream: `starts` holds each row's first token
    /// and then the number of tokens (`cu_seqlens`). Only tensors of the stream's tokens may be
    /// dropped with it; attention probabilities keep their padded `[rows, heads, q, k]` layout.
    pub fn in_stream(mut self, starts: Option<std::sync::Arc<[u32]>>) -> Dropout {
        self.stream = starts;
        self
    }

    /// The key of batch row `r`'s mask at this site.
    #[inline]
    pub fn row_key(&self, r: usize) -> u64 {
        let row = self.rows.get(r).copied().unwrap_or(r as u64);
        mix(self.key ^ mix(row.wrapping_add(0x5157_4f52_4f57_0001)))
    }

    /// 0 or 1/(1−p) for `position` in the row whose key is `row_key`.
    #[inline]
    pub fn hashed(&self, row_key: u64, position: u64) -> f32 {
        let z = mix(row_key.wrapping_add((position + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
        if (z >> 32) < self.threshold {
            0.0
        } else {
            self.scale
        }
    }

    /// Where the batch rows lie in an `n`-element tensor.
    fn layout(&self, n: usize) -> Result<RowLayout<'_>> {
        if let Some(starts) = &self.stream {
            let tokens = *starts.last().unwrap_or(&0) as usize;
            if tokens == 0 || n % tokens != 0 || starts.len() != self.rows.len() + 1 {
                candle_core::bail!(
                    "dropout: {n} elements are not a stream of {tokens} tokens in {} rows",
                    self.rows.len()
                );
            }
            return Ok(RowLayout::Stream { width: n / tokens, starts });
        }
        let rows = self.rows.len().max(1);
        if n % rows != 0 {
            candle_core::bail!("dropout: {n} elements do not split into {rows} batch rows");
        }
        Ok(RowLayout::Uniform((n / rows).max(1)))
    }

    /// The factors of elements `first..first + out.len()` of a tensor laid out as `layout`
    /// (one row lookup per call, not per element).
    fn fill(&self, first: usize, layout: RowLayout, out: &mut [f32]) {
        let (mut r, mut at, mut left) = layout.locate(first);
        let mut key = self.row_key(r);
        for v in out.iter_mut() {
            while left == 0 {
                (r, at) = (r + 1, 0);
                left = layout.row_len(r);
                key = self.row_key(r);
            }
            *v = self.hashed(key, at as u64);
            at += 1;
            left -= 1;
        }
    }

    /// The factors of the elements of an `n`-element tensor, for the graph path.
    pub fn factors(&self, n: usize) -> Result<Vec<f32>> {
        let layout = self.layout(n)?;
        let mut out = zeroed(n);
        out.par_chunks_mut(1 << 14).enumerate().for_each(|(c, chunk)| self.fill(c << 14, layout, chunk));
        Ok(out)
    }

    /// The position of attention probability `(head, qi, ki)` within its batch row: the same
    /// for a row however far its batch is padded (sequences are below 2²⁰ tokens).
    #[inline]
    pub fn attention_position(head: usize, qi: usize, ki: usize) -> u64 {
        (((head as u64) << 20 | qi as u64) << 20) | ki as u64
    }

    /// The factors of attention probabilities `[b, heads, q, k]`, for the graph path.
    pub fn attention_factors(&self, dims: (usize, usize, usize, usize)) -> Vec<f32> {
        let (b, heads, q, k) = dims;
        let mut out = zeroed(b * heads * q * k);
        out.par_chunks_mut(k).enumerate().for_each(|(row, chunk)| {
            let key = self.row_key(row / (heads * q));
            let base = Dropout::attention_position((row / q) % heads, row % q, 0);
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = self.hashed(key, base + j as u64);
            }
        });
        out
    }

    /// `x` times its dropout factors (x's leading dimension is the batch's rows).
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        if fused(x) {
            return x.contiguous()?.apply_op1(DropoutOp(self.clone()));
        }
        let mask = Tensor::from_vec(self.factors(x.elem_count())?, x.shape(), x.device())?.to_dtype(x.dtype())?;
        x * mask
    }

    /// Attention probabilities `[b, heads, q, k]` times their dropout factors (graph path).
    pub fn apply_attention(&self, probs: &Tensor) -> Result<Tensor> {
        let mask = Tensor::from_vec(self.attention_factors(probs.dims4()?), probs.shape(), probs.device())?
            .to_dtype(probs.dtype())?;
        probs * mask
    }
}

struct DropoutOp(Dropout);

impl candle_core::CustomOp1 for DropoutOp {
    fn name(&self) -> &'static str {
        "bertpipe-dropout"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(s, l, self.name())?;
        let layout = self.0.layout(x.len())?;
        let mut y = zeroed(x.len());
        y.par_chunks_mut(1 << 14).zip(x.par_chunks(1 << 14)).enumerate().for_each(|(c, (ys, xs))| {
            self.0.fill(c << 14, layout, ys);
            for (y, &v) in ys.iter_mut().zip(xs) {
                *y *= v;
            }
        });
        Ok((CpuStorage::F32(y), l.shape().clone()))
    }

    /// Linear: the gradient takes the same factors.
    fn bwd(&self, _x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        Ok(Some(grad.contiguous()?.apply_op1_no_bwd(&DropoutOp(self.0.clone()))?))
    }
}

// ---------------------------------------------------------------------------------------------
// Bias epilogues of a matmul `y = x·Wᵀ` (`[rows, out]`): `y + b`, `gelu(y + b)` and
// `dropout(y + b) + residual`, each one pass forward; the bias gradient is a column sum
// done in parallel (candle's broadcast backward sums it on one thread).

/// `y + b` over the last axis.
pub fn bias_add(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    if fused(y) {
        return y.contiguous()?.apply_op2(b, BiasOp { gelu: false });
    }
    y.broadcast_add(b)
}

/// `gelu(y + b)` (exact GELU).
pub fn bias_gelu(y: &Tensor, b: &Tensor) -> Result<Tensor> {
    if fused(y) {
        return y.contiguous()?.apply_op2(b, BiasOp { gelu: true });
    }
    y.broadcast_add(b)?.gelu_erf()
}

/// `dropout(y + b) + residual`: the end of BERT's attention and feed-forward blocks, before
/// their LayerNorm.
pub fn bias_dropout_residual(y: &Tensor, b: &Tensor, residual: &Tensor, drop: Option<Dropout>) -> Result<Tensor> {
    if fused(y) && residual.dtype() == DType::F32 {
        return y.contiguous()?.apply_op3(b, &residual.contiguous()?, BiasDropoutResidualOp { drop });
    }
    let z = y.broadcast_add(b)?;
    let z = match drop {
        Some(d) => d.apply(&z)?,
        None => z,
    };
    z + residual
}

/// Column sums of a contiguous `[rows, h]` slice: per-task partial sums over fixed row
/// blocks, added in block order, so the result does not depend on the thread count.
fn column_sums(g: &[f32], h: usize) -> Vec<f32> {
    let chunk = h * rows_per_task(h);
    let partial: Vec<Vec<f32>> = g
        .par_chunks(chunk)
        .map(|gs| {
            let mut s = vec![0f32; h];
            for r in gs.chunks(h) {
                for (a, &v) in s.iter_mut().zip(r) {
                    *a += v;
                }
            }
            s
        })
        .collect();
    let mut out = vec![0f32; h];
    for p in partial {
        for (a, v) in out.iter_mut().zip(p) {
            *a += v;
        }
    }
    out
}

/// Column sums of a contiguous tensor over every axis but the last.
fn column_sum(g: &Tensor) -> Result<Tensor> {
    g.contiguous()?.apply_op1_no_bwd(&ColumnSum)
}

struct ColumnSum;

impl candle_core::CustomOp1 for ColumnSum {
    fn name(&self) -> &'static str {
        "bertpipe-column-sum"
    }

    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let g = slice(s, l, self.name())?;
        let h = l.shape().dims().last().copied().unwrap_or(1);
        Ok((CpuStorage::F32(column_sums(g, h)), Shape::from(h)))
    }
}

struct BiasOp {
    gelu: bool,
}

impl CustomOp2 for BiasOp {
    fn name(&self) -> &'static str {
        "bertpipe-bias"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let (x, b) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?);
        let h = b.len();
        if l1.shape().dims().last() != Some(&h) {
            candle_core::bail!("bias: {:?} does not end in {h}", l1.shape());
        }
        let mut y = zeroed(x.len());
        let chunk = h * rows_per_task(h);
        y.par_chunks_mut(chunk).zip(x.par_chunks(chunk)).for_each(|(ys, xs)| {
            for (yr, xr) in ys.chunks_mut(h).zip(xs.chunks(h)) {
                if self.gelu {
                    for j in 0..h {
                        yr[j] = gelu(xr[j] + b[j]);
                    }
                } else {
                    for j in 0..h {
                        yr[j] = xr[j] + b[j];
                    }
                }
            }
        });
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(&self, x: &Tensor, b: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let dx = if self.gelu { x.apply_op3_no_bwd(b, &grad, &BiasGeluBwd)? } else { grad };
        let db = column_sum(&dx)?;
        Ok((Some(dx), Some(db)))
    }
}

struct BiasGeluBwd;

impl CustomOp3 for BiasGeluBwd {
    fn name(&self) -> &'static str {
        "bertpipe-bias-gelu-bwd"
    }

    /// d(y + b) = g · gelu′(y + b).
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, b, g) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?, slice(s3, l3, self.name())?);
        let h = b.len();
        let mut dx = zeroed(x.len());
        let chunk = h * rows_per_task(h);
        dx.par_chunks_mut(chunk).zip(x.par_chunks(chunk).zip(g.par_chunks(chunk))).for_each(|(ds, (xs, gs))| {
            for ((dr, xr), gr) in ds.chunks_mut(h).zip(xs.chunks(h)).zip(gs.chunks(h)) {
                for j in 0..h {
                    dr[j] = gr[j] * gelu_grad(xr[j] + b[j]);
                }
            }
        });
        Ok((CpuStorage::F32(dx), l1.shape().clone()))
    }
}

struct BiasDropoutResidualOp {
    drop: Option<Dropout>,
}

impl CustomOp3 for BiasDropoutResidualOp {
    fn name(&self) -> &'static str {
        "bertpipe-bias-dropout-residual"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        let (x, b, r) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?, slice(s3, l3, self.name())?);
        let h = b.len();
        if l1.shape() != l3.shape() || l1.shape().dims().last() != Some(&h) {
            candle_core::bail!("bias-dropout-residual: {:?}, bias {h}, residual {:?}", l1.shape(), l3.shape());
        }
        let layout = match &self.drop {
            Some(d) => d.layout(x.len())?,
            None => RowLayout::Uniform(x.len().max(1)),
        };
        let mut y = zeroed(x.len());
        let rows = rows_per_task(h);
        y.par_chunks_mut(h * rows).zip(x.par_chunks(h * rows).zip(r.par_chunks(h * rows))).enumerate().for_each(
            |(t, (ys, (xs, rs)))| {
                let mut factors = vec![0f32; h];
                for (i, ((yr, xr), rr)) in ys.chunks_mut(h).zip(xs.chunks(h)).zip(rs.chunks(h)).enumerate() {
                    match &self.drop {
                        Some(d) => {
                            d.fill((t * rows + i) * h, layout, &mut factors);
                            for j in 0..h {
                                yr[j] = (xr[j] + b[j]) * factors[j] + rr[j];
                            }
                        }
                        None => {
                            for j in 0..h {
                                yr[j] = (xr[j] + b[j]) + rr[j];
                            }
                        }
                    }
                }
            },
        );
        Ok((CpuStorage::F32(y), l1.shape().clone()))
    }

    fn bwd(
        &self,
        _x: &Tensor,
        _b: &Tensor,
        _r: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let grad = grad.contiguous()?;
        let dx = match &self.drop {
            Some(d) => grad.apply_op1_no_bwd(&DropoutOp(d.clone()))?,
            None => grad.clone(),
        };
        let db = column_sum(&dx)?;
        Ok((Some(dx), Some(db), Some(grad)))
    }
}

// ---------------------------------------------------------------------------------------------
// Attention heads: `[b, s, heads·d]` rows ⇄ `[b, heads, s, d]` blocks, in parallel, with the
// projection's bias added on the way in (candle's transpose + `contiguous()` copies on one
// thread, and the bias would be one more pass).

/// `y + bias` (`y` `[b, s, heads·d]`, the bias-free output of a Q/K/V projection) as
/// `[b, heads, s, d]`.
pub fn split_heads(y: &Tensor, bias: &Tensor, heads: usize) -> Result<Tensor> {
    if fused(y) {
        return y.contiguous()?.apply_op2(bias, Heads { heads });
    }
    let (b, s, h) = y.dims3()?;
    y.broadcast_add(bias)?.reshape((b, s, heads, h / heads))?.transpose(1, 2)?.contiguous()
}

/// `[b, heads, s, d]` → `[b, s, heads·d]`.
pub fn merge_heads(x: &Tensor) -> Result<Tensor> {
    if fused(x) {
        return x.contiguous()?.apply_op1(Heads { heads: x.dim(1)? });
    }
    let (b, heads, s, d) = x.dims4()?;
    x.transpose(1, 2)?.reshape((b, s, heads * d))
}

/// As a `CustomOp2` (rows, bias): split into heads; as a `CustomOp1` (blocks): merge them.
struct Heads {
    heads: usize,
}

/// `n` floats, each written once by `fill(task, chunk)` over consecutive `chunk`-sized
/// pieces in parallel, without zeroing them first.
///
/// # Safety
/// `fill` must write every element of the piece it is given.
unsafe fn filled(n: usize, chunk: usize, fill: impl Fn(usize, &mut [std::mem::MaybeUninit<f32>]) + Sync) -> Vec<f32> {
    let mut v = Vec::with_capacity(n);
    v.spare_capacity_mut()[..n].par_chunks_mut(chunk.max(1)).enumerate().for_each(|(t, c)| fill(t, c));
    // SAFETY: the caller's fill wrote every element.
    unsafe { v.set_len(n) };
    v
}

impl CustomOp2 for Heads {
    fn name(&self) -> &'static str {
        "bertpipe-split-heads"
    }

    fn cpu_fwd(&self, s1: &CpuStorage, l1: &Layout, s2: &CpuStorage, l2: &Layout) -> Result<(CpuStorage, Shape)> {
        let (y, bias) = (slice(s1, l1, self.name())?, slice(s2, l2, self.name())?);
        let (b, s, h) = l1.shape().dims3()?;
        if bias.len() != h || h % self.heads != 0 {
            candle_core::bail!("split heads: {:?} with bias {} into {} heads", l1.shape(), bias.len(), self.heads);
        }
        let (heads, d) = (self.heads, h / self.heads);
        // One task per (batch, head) block of s × d: row i of the block is y[batch, i, head·d..].
        // SAFETY: each block's s rows of d cover it exactly.
        let out = unsafe {
            filled(y.len(), s * d, |t, block| {
                let (bi, hi) = (t / heads, t % heads);
                let bias = &bias[hi * d..][..d];
                for (i, row) in block.chunks_mut(d).enumerate() {
                    let src = &y[(bi * s + i) * h + hi * d..][..d];
                    for ((o, &v), &c) in row.iter_mut().zip(src).zip(bias) {
                        o.write(v + c);
                    }
                }
            })
        };
        Ok((CpuStorage::F32(out), Shape::from((b, heads, s, d))))
    }

    /// dy = the gradient merged back into rows; dbias = its column sums.
    fn bwd(
        &self,
        y: &Tensor,
        _bias: &Tensor,
        _res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let dy = grad.contiguous()?.apply_op1_no_bwd(self)?.reshape(y.shape())?;
        let db = column_sum(&dy)?;
        Ok((Some(dy), Some(db)))
    }
}

impl candle_core::CustomOp1 for Heads {
    fn name(&self) -> &'static str {
        "bertpipe-merge-heads"
    }

    fn cpu_fwd(&self, st: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(st, l, candle_core::CustomOp1::name(self))?;
        let (b, heads, s, d) = l.shape().dims4()?;
        let h = heads * d;
        // One task per block of output rows; row (bi, i) gathers d floats from each head.
        let rows = rows_per_task(h);
        // SAFETY: every row of h is written head by head, d floats each.
        let out = unsafe {
            filled(x.len(), rows * h, |t, chunk| {
                for (r, row) in chunk.chunks_mut(h).enumerate() {
                    let (bi, i) = ((t * rows + r) / s, (t * rows + r) % s);
                    for (hi, dst) in row.chunks_mut(d).enumerate() {
                        let src = &x[((bi * heads + hi) * s + i) * d..][..d];
                        for (o, &v) in dst.iter_mut().zip(src) {
                            o.write(v);
                        }
                    }
                }
            })
        };
        Ok((CpuStorage::F32(out), Shape::from((b, s, h))))
    }

    fn bwd(&self, _x: &Tensor, _res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let h = grad.dim(2)?;
        let zero = Tensor::zeros(h, DType::F32, grad.device())?;
        Ok(Some(grad.contiguous()?.apply_op2_no_bwd(&zero, self)?))
    }
}

// ---------------------------------------------------------------------------------------------
// Exact GELU: y = x · Φ(x) = 0.5 · x · (1 + erf(x/√2)), used by `bias_gelu`.

/// erf(x) as a rational function of x on [−4, 4] (Eigen's `generic_fast_erf_float`, as in
/// TensorFlow): within 5e-7 of the exact value everywhere (tested), with no branches or calls,
/// so the loops over a row vectorise — libm's `erff` was 5% of a training step.
#[inline]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    for c in [2.770_681_4e-8, -2.101_024e-6, -5.692_506_4e-5, -7.349_906_3e-4, -2.954_600_2e-3, -1.609_603_3e-2] {
        p = p * x2 + c;
    }
    let mut q = -1.456_607_2e-5_f32;
    for c in [-2.133_740_6e-4, -1.682_827e-3, -7.373_329_2e-3, -1.426_473_9e-2] {
        q = q * x2 + c;
    }
    x * p / q
}

/// Candle's forward formula, with the erf above.
#[inline]
fn gelu(v: f32) -> f32 {
    (erf(v * std::f32::consts::FRAC_1_SQRT_2) + 1.0) * 0.5 * v
}

/// d/dx = 0.5 + 0.398942·x·e^(−x²/2) + 0.5·erf(x/√2), as candle's backward computes it.
#[inline]
fn gelu_grad(v: f32) -> f32 {
    0.5 + 0.398942 * (-(v * v) / 2.0).exp() * v + 0.5 * erf(v / std::f32::consts::SQRT_2)
}

/// Zeroes one row of a contiguous f32 matrix in place (the padding token's gradient).
pub struct ZeroRow {
    pub row: usize,
    pub width: usize,
}

impl candle_core::InplaceOp1 for ZeroRow {
    fn name(&self) -> &'static str {
        "bertpipe-zero-row"
    }

    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> Result<()> {
        let Some((a, b)) = l.contiguous_offsets() else { candle_core::bail!("zero row: not contiguous") };
        let CpuStorage::F32(data) = s else { candle_core::bail!("zero row: not f32") };
        let data = &mut data[a..b];
        data[self.row * self.width..(self.row + 1) * self.width].fill(0.0);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Var;

    fn rand(shape: &[usize], seed: u64, scale: f32) -> Tensor {
        let mut rng = crate::rng::Rng(seed);
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| (rng.f64() as f32 * 2.0 - 1.0) * scale).collect();
        Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
    }

    fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    /// Runs `f` fused and unfused (`BERTPIPE_UNFUSED` is read once per process, so the two runs use a
    /// flag instead of the environment) and compares outputs and input gradients.
    fn check(inputs: &[Tensor], f: impl Fn(&[Tensor], bool) -> Tensor, tol: f32) {
        let mut results = Vec::new();
        for fused in [true, false] {
            let vars: Vec<Var> = inputs.iter().map(|t| Var::from_tensor(t).unwrap()).collect();
            let ts: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
            let y = f(&ts, fused);
            // A weighted sum so every output element gets a distinct gradient.
            let weights = rand(y.dims(), 99, 1.0);
            let loss = (&y * &weights).unwrap().sum_all().unwrap();
            let grads = loss.backward().unwrap();
            let gs: Vec<Tensor> = ts.iter().map(|t| grads.get(t).expect("gradient").clone()).collect();
            results.push((y, gs));
        }
        let (a, b) = (&results[0], &results[1]);
        assert!(max_diff(&a.0, &b.0) < tol, "values differ by {}", max_diff(&a.0, &b.0));
        for (i, (ga, gb)) in a.1.iter().zip(&b.1).enumerate() {
            assert!(max_diff(ga, gb) < tol, "gradient {i} differs by {}", max_diff(ga, gb));
        }
    }

    fn unfused_ln(x: &Tensor, w: &Tensor, b: &Tensor, eps: f64) -> Tensor {
        let mean = x.mean_keepdim(D::Minus1).unwrap();
        let c = x.broadcast_sub(&mean).unwrap();
        let var = c.sqr().unwrap().mean_keepdim(D::Minus1).unwrap();
        let n = c.broadcast_div(&(var + eps).unwrap().sqrt().unwrap()).unwrap();
        n.broadcast_mul(w).unwrap().broadcast_add(b).unwrap()
    }

    #[test]
    fn gelu_matches_candles_op_with_gradients() {
        let x = rand(&[4, 33, 70], 6, 5.0);
        check(
            std::slice::from_ref(&x),
            |t, fused| {
                let zero = Tensor::zeros(70, DType::F32, &Device::Cpu).unwrap();
                if fused {
                    t[0].apply_op2(&zero, BiasOp { gelu: true }).unwrap()
                } else {
                    t[0].gelu_erf().unwrap()
                }
            },
            // |x| ≤ 5 times erf's 5e-7.
            3e-6,
        );
    }

    #[test]
    fn layer_norm_matches_the_graph_of_basic_ops_with_gradients() {
        let x = rand(&[3, 37, 64], 1, 3.0);
        let w = (rand(&[64], 2, 0.5) + 1.0).unwrap();
        let b = rand(&[64], 3, 0.5);
        check(
            &[x, w, b],
            |t, fused| {
                if fused {
                    t[0].apply_op3(&t[1], &t[2], LayerNormOp { eps: 1e-12 }).unwrap()
                } else {
                    unfused_ln(&t[0], &t[1], &t[2], 1e-12)
                }
            },
            1e-5,
        );
    }

    fn unfused_softmax(x: &Tensor, m: &Tensor, scale: f64) -> Tensor {
        let x = (x * scale).unwrap().broadcast_add(m).unwrap();
        let max = x.max_keepdim(D::Minus1).unwrap();
        let e = x.broadcast_sub(&max).unwrap().exp().unwrap();
        e.broadcast_div(&e.sum_keepdim(D::Minus1).unwrap()).unwrap()
    }

    #[test]
    fn attention_softmax_matches_the_graph_with_padding_and_block_masks() {
        let scores = rand(&[2, 4, 9, 9], 4, 6.0);
        let mut pad = vec![0f32; 2 * 9];
        for j in 6..9 {
            pad[9 + j] = crate::model::bert::MASKED;
        }
        let pad = Tensor::from_vec(pad, (2, 1, 1, 9), &Device::Cpu).unwrap();
        let block = rand(&[2, 1, 9, 9], 5, 1.0).ge(0.3).unwrap().to_dtype(DType::F32).unwrap();
        let block = (block * crate::model::bert::MASKED as f64).unwrap();
        for mask in [pad, block] {
            let m = mask.clone();
            check(
                std::slice::from_ref(&scores),
                move |t, fused| {
                    if fused {
                        t[0].apply_op2(&m, SoftmaxOp { scale: 0.125, drop: None }).unwrap()
                    } else {
                        unfused_softmax(&t[0], &m, 0.125)
                    }
                },
                1e-5,
            );
        }
    }

    /// The graph path's dropout: the same factors as a mask tensor.
    fn graph_dropout(x: &Tensor, d: &Dropout) -> Tensor {
        let m = Tensor::from_vec(d.factors(x.elem_count()).unwrap(), x.shape(), x.device()).unwrap();
        (x * m).unwrap()
    }

    /// Batch rows keyed 0..n.
    fn rows(n: u64) -> std::sync::Arc<[u64]> {
        (0..n).collect()
    }

    #[test]
    fn dropout_drops_its_share_the_same_way_on_both_paths() {
        let d = Dropout::new(0xfeed, 0.1, rows(4));
        let f = d.factors(100_000).unwrap();
        let dropped = f.iter().filter(|&&v| v == 0.0).count() as f64 / f.len() as f64;
        assert!((dropped - 0.1).abs() < 0.005, "dropped {dropped}");
        assert!(f.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.9).abs() < 1e-6));
        // Another key drops other elements.
        let g = Dropout::new(0xbeef, 0.1, rows(4)).factors(100_000).unwrap();
        assert!(f.iter().zip(&g).filter(|(a, b)| a != b).count() > 10_000);
        // A tensor that does not split into the batch's rows is an error, not a wrong mask.
        assert!(d.factors(10_001).is_err());
        let x = rand(&[3, 50, 70], 7, 2.0);
        let d = Dropout::new(0xfeed, 0.1, rows(3));
        check(
            std::slice::from_ref(&x),
            |t, fused| {
                if fused {
                    t[0].apply_op1(DropoutOp(d.clone())).unwrap()
                } else {
                    graph_dropout(&t[0], &d)
                }
            },
            1e-6,
        );
    }

    /// A row's mask is keyed by the row and the position in it, so it is the same in any batch:
    /// padded to any length, beside any other rows, in any place — what lets ranks, micro-batches
    /// and padding-free batches drop exactly what one padded batch drops.
    #[test]
    fn a_rows_mask_does_not_depend_on_its_batch() {
        let (h, heads) = (8, 2);
        // Row 41 first in a batch padded to 12 tokens, then second in one padded to 5.
        let a = Dropout::new(9, 0.3, std::sync::Arc::from(vec![41u64, 7]));
        let b = Dropout::new(9, 0.3, std::sync::Arc::from(vec![3u64, 41]));
        let fa = a.factors(2 * 12 * h).unwrap();
        let fb = b.factors(2 * 5 * h).unwrap();
        assert_eq!(fa[..5 * h], fb[5 * h..], "hidden states [batch, seq, hidden]");
        assert_ne!(fa[..5 * h], fb[..5 * h], "another row, another mask");
        let pa = a.attention_factors((2, heads, 12, 12));
        let pb = b.attention_factors((2, heads, 5, 5));
        for head in 0..heads {
            for q in 0..5 {
                let at_a = (head * 12 + q) * 12;
                let at_b = ((heads + head) * 5 + q) * 5;
                assert_eq!(pa[at_a..at_a + 5], pb[at_b..at_b + 5], "attention head {head}, query {q}");
            }
        }
        // The fused softmax drops what the graph path drops, row keys included.
        let scores = rand(&[2, heads, 5, 5], 5, 3.0);
        let pad = Tensor::zeros((2, 1, 1, 5), DType::F32, &Device::Cpu).unwrap();
        let fused = scores.apply_op2(&pad, SoftmaxOp { scale: 0.5, drop: Some(b.clone()) }).unwrap();
        let graph = b.apply_attention(&unfused_softmax(&scores, &pad, 0.5)).unwrap();
        let d = (fused - graph).unwrap().abs().unwrap().max_all().unwrap().to_scalar::<f32>().unwrap();
        assert!(d < 1e-6, "{d}");
    }

    #[test]
    fn bias_epilogues_match_the_graph_with_gradients() {
        let y = rand(&[2, 37, 48], 11, 3.0);
        let b = rand(&[48], 12, 1.0);
        let r = rand(&[2, 37, 48], 13, 1.0);
        check(
            &[y.clone(), b.clone()],
            |t, fused| {
                if fused {
                    t[0].apply_op2(&t[1], BiasOp { gelu: false }).unwrap()
                } else {
                    t[0].broadcast_add(&t[1]).unwrap()
                }
            },
            1e-5,
        );
        check(
            &[y.clone(), b.clone()],
            |t, fused| {
                if fused {
                    t[0].apply_op2(&t[1], BiasOp { gelu: true }).unwrap()
                } else {
                    t[0].broadcast_add(&t[1]).unwrap().gelu_erf().unwrap()
                }
            },
            1e-5,
        );
        for drop in [None, Some(Dropout::new(3, 0.25, rows(2)))] {
            check(
                &[y.clone(), b.clone(), r.clone()],
                |t, fused| {
                    if fused {
                        t[0].apply_op3(&t[1], &t[2], BiasDropoutResidualOp { drop: drop.clone() }).unwrap()
                    } else {
                        let z = t[0].broadcast_add(&t[1]).unwrap();
                        let z = match &drop {
                            Some(d) => graph_dropout(&z, d),
                            None => z,
                        };
                        (z + &t[2]).unwrap()
                    }
                },
                1e-5,
            );
        }
    }

    #[test]
    fn column_sums_do_not_depend_on_the_thread_count() {
        let g = rand(&[1000, 96], 21, 1.0);
        let data = g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        let one = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap().install(|| column_sums(&data, 96));
        let four = rayon::ThreadPoolBuilder::new().num_threads(4).build().unwrap().install(|| column_sums(&data, 96));
        assert_eq!(one, four);
        let want = g.sum(0).unwrap().to_vec1::<f32>().unwrap();
        for (a, b) in one.iter().zip(&want) {
            assert!((a - b).abs() < 1e-4, "{a} vs {b}");
        }
    }

    #[test]
    fn attention_softmax_with_dropout_matches_the_graph() {
        let scores = rand(&[2, 4, 9, 9], 4, 6.0);
        let mut pad = vec![0f32; 2 * 9];
        pad[5..9].fill(crate::model::bert::MASKED);
        let pad = Tensor::from_vec(pad, (2, 1, 1, 9), &Device::Cpu).unwrap();
        let d = Dropout::new(77, 0.3, rows(2));
        check(
            std::slice::from_ref(&scores),
            move |t, fused| {
                if fused {
                    t[0].apply_op2(&pad, SoftmaxOp { scale: 0.25, drop: Some(d.clone()) }).unwrap()
                } else {
                    d.apply_attention(&unfused_softmax(&t[0], &pad, 0.25)).unwrap()
                }
            },
            1e-5,
        );
    }

    #[test]
    fn head_split_and_merge_match_the_graph_with_gradients() {
        let y = rand(&[3, 7, 24], 31, 2.0);
        let b = rand(&[24], 32, 1.0);
        check(
            &[y, b],
            |t, fused| {
                if fused {
                    t[0].apply_op2(&t[1], Heads { heads: 4 }).unwrap()
                } else {
                    let z = t[0].broadcast_add(&t[1]).unwrap();
                    z.reshape((3, 7, 4, 6)).unwrap().transpose(1, 2).unwrap().contiguous().unwrap()
                }
            },
            1e-6,
        );
        let x = rand(&[3, 4, 7, 6], 33, 2.0);
        check(
            std::slice::from_ref(&x),
            |t, fused| {
                if fused {
                    t[0].apply_op1(Heads { heads: 4 }).unwrap()
                } else {
                    t[0].transpose(1, 2).unwrap().reshape((3, 7, 24)).unwrap()
                }
            },
            1e-6,
        );
    }

    #[test]
    fn fast_erf_is_within_5e7_of_the_exact_value() {
        let mut worst = 0f64;
        for i in -800_000..=800_000 {
            let x = i as f32 * 1e-5;
            worst = worst.max((erf(x) as f64 - libm::erf(x as f64)).abs());
        }
        assert!(worst < 5e-7, "max |erf error| {worst}");
    }
}
