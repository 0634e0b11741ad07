//! The model's parameters by their HF names: taken from a checkpoint where it has them,
//! initialised as HF does where it does not (normal(0, initializer_range) weights, zero biases,
//! LayerNorm 1/0), and every difference between the two reported.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor, Var};

use crate::rng::Rng;

/// How a parameter missing from the checkpoint starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Init {
    Normal(f64),
    /// Normal(0, std) redrawn outside ±`cutoff`·std (ModernBERT's `trunc_normal_`).
    TruncatedNormal {
        std: f64,
        cutoff: f64,
    },
    Zeros,
    Ones,
}

/// Trainable parameters in creation order, by HF name.
#[derive(Default)]
pub struct Params {
    pub vars: Vec<(String, Var)>,
}

impl Params {
    pub fn get(&self, name: &str) -> Option<&Var> {
        self.vars.iter().find(|(n, _)| n == name).map(|(_, v)| v)
    }

    /// All parameters as a name → tensor map (for safetensors).
    pub fn tensors(&self) -> BTreeMap<String, Tensor> {
        self.vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().clone())).collect()
    }
}

/// Builds [`Params`] from an optional checkpoint.
pub struct ParamLoader {
    device: Device,
    checkpoint: HashMap<String, Tensor>,
    used: Vec<String>,
    /// Parameters the checkpoint did not have, initialised here.
    pub initialised: Vec<String>,
    pub params: Params,
    rng: Rng,
    /// Hands out checkpoint tensors as they are (detached), making no variables ([`Self::frozen`]).
    frozen: bool,
}

impl ParamLoader {
    /// No checkpoint: everything is initialised from `seed`.
    pub fn fresh(device: &Device, seed: u64) -> ParamLoader {
        ParamLoader {
            device: device.clone(),
            checkpoint: HashMap::new(),
            used: Vec::new(),
            initialised: Vec::new(),
            params: Params::default(),
            rng: Rng::for_key(seed, &[0x494e_4954]),
            frozen: false,
        }
    }

    /// The parameters of `params` as they are now, for inference: each tensor detached from
    /// the autograd graph (sharing its storage: nothing is copied), so a forward pass through a
    /// model built from them records nothing for a backward pass and frees each activation as
    /// soon as the next operation has used it — what PyTorch's `no_grad` gives an evaluation.
    pub fn frozen(params: &Params, device: &Device) -> ParamLoader {
        let mut loader = ParamLoader::fresh(device, 0);
        loader.checkpoint = params.vars.iter().map(|(n, v)| (n.clone(), v.as_tensor().detach())).collect();
        loader.frozen = true;
        loader
    }

    /// Tensors from a `model.safetensors`, renamed to the names our model uses: a bare
    /// encoder (sentence-transformers saves a `BertModel`'s `embeddings.…` without `bert.`) gets
    /// the family's `prefix`, and TF-era `LayerNorm.gamma/beta` become `weight/bias`. Any float
    /// dtype becomes f32.
    pub fn from_safetensors(path: &Path, device: &Device, seed: u64, prefix: &str) -> Result<ParamLoader> {
        if path.extension().is_some_and(|e| e == "bin" || e == "pt" || e == "pth") {
            bail!(
                "'{}' is a pickled PyTorch file; bertpipe reads safetensors only (convert it with `safetensors`)",
                path.display()
            );
        }
        crate::contract::reads::note_file(path);
        let raw = candle_core::safetensors::load(path, &Device::Cpu)
            .with_context(|| format!("could not read safetensors '{}'", path.display()))?;
        let owned = format!("{prefix}.");
        let bare = !raw.keys().any(|k| k.starts_with(&owned))
            && raw.keys().any(|k| ["embeddings.", "encoder.", "layers."].iter().any(|p| k.starts_with(p)));
        // A head's tensors keep their names (BERT's `cls.`, RoBERTa's `lm_head.`, ModernBERT's
        // `head.` and `decoder.`, everyone's `classifier.`).
        let head = |n: &str| ["cls.", "classifier.", "lm_head.", "head.", "decoder."].iter().any(|p| n.starts_with(p));
        let mut checkpoint = HashMap::new();
        for (name, t) in raw {
            let mut name = if bare && !head(&name) { format!("{owned}{name}") } else { name };
            for (old, new) in [("LayerNorm.gamma", "LayerNorm.weight"), ("LayerNorm.beta", "LayerNorm.bias")] {
                if name.ends_with(old) {
                    name = format!("{}{new}", &name[..name.len() - old.len()]);
                }
            }
            let t = if t.dtype().is_float() { t.to_dtype(DType::F32)? } else { t };
            // A damaged file (a flipped exponent bit) shows as values no trained weight has. One
            // reduction settles it for every sound tensor (a NaN or an infinity makes the sum
            // non-finite); only a tensor whose sum is not finite is copied and looked at value by
            // value, since huge finite values can overflow a sum too.
            let suspect =
                t.dtype() == DType::F32 && t.elem_count() > 0 && !t.sum_all()?.to_scalar::<f32>()?.is_finite();
            if suspect && !t.flatten_all()?.to_vec1::<f32>()?.iter().all(|v| v.is_finite()) {
                bail!("tensor `{name}` in '{}' holds NaN or infinite values: the file is damaged", path.display());
            }
            checkpoint.insert(name, t.to_device(device)?);
        }
        let mut loader = ParamLoader::fresh(device, seed);
        loader.checkpoint = checkpoint;
        Ok(loader)
    }

    /// The parameter `name` with `shape`: from the checkpoint, else initialised.
    pub fn get(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        if self.frozen {
            let t = self.checkpoint.get(name).with_context(|| format!("the model has no parameter `{name}`"))?;
            self.used.push(name.to_string());
            return Ok(t.clone());
        }
        let t = match self.checkpoint.get(name) {
            Some(t) => {
                if t.dims() != shape {
                    bail!(
                        "checkpoint tensor `{name}` has shape {:?}, the model needs {shape:?} (does config.json match the weights?)",
                        t.dims()
                    );
                }
                self.used.push(name.to_string());
                t.clone()
            }
            None => {
                self.initialised.push(name.to_string());
                self.init(shape, init)?
            }
        };
        let var = Var::from_tensor(&t)?;
        let out = var.as_tensor().clone();
        self.params.vars.push((name.to_string(), var));
        Ok(out)
    }

    fn init(&mut self, shape: &[usize], init: Init) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        let data: Vec<f32> = match init {
            Init::Zeros => vec![0.0; n],
            Init::Ones => vec![1.0; n],
            Init::Normal(std) => (0..n).map(|_| (self.rng.normal() * std) as f32).collect(),
            Init::TruncatedNormal { std, cutoff } => (0..n)
                .map(|_| loop {
                    let z = self.rng.normal();
                    if z.abs() <= cutoff {
                        break (z * std) as f32;
                    }
                })
                .collect(),
        };
        Ok(Tensor::from_vec(data, shape, &self.device)?)
    }

    /// The device parameters are made on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Zeroes one row of a freshly initialised embedding (HF zeroes `padding_idx`).
    pub fn zero_row_if_initialised(&mut self, name: &str, row: usize) -> Result<()> {
        if !self.initialised.iter().any(|n| n == name) {
            return Ok(());
        }
        let var = self.params.get(name).expect("parameter was just created");
        let mut data = var.as_tensor().to_vec2::<f32>()?;
        if let Some(r) = data.get_mut(row) {
            r.iter_mut().for_each(|x| *x = 0.0);
        }
        let dims = var.as_tensor().dims().to_vec();
        var.set(&Tensor::from_vec(data.concat(), dims, &self.device)?)?;
        Ok(())
    }

    /// Checkpoint tensors the model did not use, except buffers HF keeps in state dicts and
    /// the tied decoder weight.
    pub fn unexpected(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .checkpoint
            .keys()
            .filter(|k| !self.used.contains(k))
            .filter(|k| !k.ends_with("position_ids") && !k.ends_with("token_type_ids"))
            .filter(|k| {
                !matches!(
                    k.as_str(),
                    "cls.predictions.decoder.weight"
                        | "cls.predictions.decoder.bias"
                        | "lm_head.decoder.weight"
                        | "lm_head.decoder.bias"
                        | "decoder.weight"
                )
            })
            .cloned()
            .collect();
        out.sort();
        out
    }
}
